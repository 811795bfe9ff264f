package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/ebb-proxy/ebb/config"
)

// pollInterval is how often `ebb drain -wait` asks /live whether ebb is
// still there.
const pollInterval = 200 * time.Millisecond

// cmdDrain asks a running ebb, through its admin server, to drain (POST
// /drain) or to close now (POST /shutdown?now), and with -wait waits until
// it has exited. It is meant for a Kubernetes preStop exec hook.
func cmdDrain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("ebb drain", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr, cf := adminFlags(fs, "admin address of the running ebb, host:port", "read the admin address (admin.address) from this configuration file instead")
	tokenFile := fs.String("token-file", "", "file holding the admin token (default with -config: admin.token_file)")
	now := fs.Bool("now", false, "skip the drain: close every connection at once (POST /shutdown?now)")
	wait := fs.Bool("wait", false, "once accepted, show the drain as it goes and wait until ebb has exited")
	progress := fs.String("progress", progressAuto, "with -wait, how to show the drain: auto (inplace on a terminal, else lines), inplace, lines, or off")
	timeout := fs.Duration("timeout", 60*time.Second, "give up after this long (the request and -wait)")
	if code := parseFlags(fs, args); code >= 0 {
		return code
	}
	set, code := checkAdminFlags(fs, "ebb drain", *timeout, stderr)
	if code >= 0 {
		return code
	}
	switch *progress {
	case progressAuto, progressInPlace, progressLines, progressOff:
	default:
		fmt.Fprintf(stderr, "ebb drain: -progress: expected auto, inplace, lines or off, got %q\n", *progress)
		return exitUsage
	}
	if set["config"] {
		cfg, err := loadConfig(*cf)
		if err != nil {
			printConfigError(stderr, err)
			return exitConfig
		}
		printIgnored(stderr, cfg)
		*addr = cfg.Admin.Address
		if *tokenFile == "" {
			*tokenFile = cfg.Admin.TokenFile
		}
	} else if _, port, err := net.SplitHostPort(*addr); err != nil || port == "" {
		fmt.Fprintf(stderr, "ebb drain: -admin: expected host:port, got %q\n", *addr)
		return exitUsage
	}
	token, code := readToken("ebb drain", *tokenFile, stderr)
	if code >= 0 {
		return code
	}

	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	// A new connection per request: -wait must see the refusal of a new
	// connection, not the close of a pooled one.
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	path, what := "/drain", "drain"
	if *now {
		path, what = "/shutdown?now", "close now"
	}
	if err := post(ctx, client, "http://"+*addr+path, token); err != nil {
		fmt.Fprintf(stderr, "ebb drain: asking ebb at %s to %s: %v\n", *addr, what, err)
		return exitFailed
	}
	fmt.Fprintf(stdout, "ebb at %s: accepted (%s)\n", *addr, what)
	if !*wait {
		return exitOK
	}
	// The drain as it goes, then its outcome; then the exit itself (ebb
	// writes drain.report and stops its admin server after the drain).
	// Without the stream (an older ebb, a stream cut short), only the exit.
	switch out, err := followDrain(ctx, client, "http://"+*addr, token, resolveProgress(*progress, stdout), stdout); {
	case err == nil:
		fmt.Fprint(stdout, outcomeText(*addr, out))
	case errors.Is(err, errNoProgress) || ctx.Err() != nil:
	default:
		fmt.Fprintf(stdout, "ebb at %s: the drain's progress stopped (%v); waiting for the exit\n", *addr, err)
	}
	if err := waitGone(ctx, client, "http://"+*addr+"/live"); err != nil {
		fmt.Fprintf(stderr, "ebb drain: waiting for ebb at %s to exit: %v after -timeout %s\n", *addr, err, *timeout)
		return exitFailed
	}
	fmt.Fprintf(stdout, "ebb at %s: exited\n", *addr)
	return exitOK
}

// adminFlags registers -admin, -config and -set, the flags that name the
// running ebb a command talks to: its address, or the configuration file
// to read it from (configHelp says which key).
func adminFlags(fs *flag.FlagSet, addrHelp, configHelp string) (*string, *configFlags) {
	addr := fs.String("admin", config.DefaultAdminAddress, addrHelp)
	cf := &configFlags{}
	fs.StringVar(&cf.path, "config", "", configHelp)
	fs.Var(&cf.sets, "set", "with -config: override one key, as key=value (repeatable)")
	return addr, cf
}

// checkAdminFlags checks the flags shared by the commands that talk to a
// running ebb's admin server (-admin, -config, -set, -timeout) and
// returns which were given, or an exit status (else -1).
func checkAdminFlags(fs *flag.FlagSet, cmd string, timeout time.Duration, stderr io.Writer) (map[string]bool, int) {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	switch {
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "%s: unexpected argument %q\n", cmd, fs.Arg(0))
	case set["admin"] && set["config"]:
		fmt.Fprintf(stderr, "%s: -admin and -config both name the admin address; give one\n", cmd)
	case set["set"] && !set["config"]:
		fmt.Fprintf(stderr, "%s: -set needs -config\n", cmd)
	case timeout <= 0:
		fmt.Fprintf(stderr, "%s: -timeout must be positive, got %s\n", cmd, timeout)
	default:
		return set, -1
	}
	return set, exitUsage
}

// readToken reads the admin token of -token-file (none when path is
// empty), or returns an exit status (else -1).
func readToken(cmd, path string, stderr io.Writer) (string, int) {
	if path == "" {
		return "", -1
	}
	token, err := config.ReadAdminToken(path)
	if err != nil {
		fmt.Fprintf(stderr, "%s: the admin token: %v\n", cmd, err)
		return "", exitUsage
	}
	return token, -1
}

// setToken adds the admin token, if any, to req.
func setToken(req *http.Request, token string) {
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
}

// post sends an empty POST and expects 202 Accepted.
func post(ctx context.Context, client *http.Client, target, token string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, nil)
	if err != nil {
		return err
	}
	setToken(req, token)
	resp, err := client.Do(req)
	if err != nil {
		return unwrapURL(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode != http.StatusAccepted {
		msg := strings.TrimSpace(string(body))
		if resp.StatusCode == http.StatusNotFound {
			msg = "no such endpoint (ebb older than `ebb drain`, or not ebb)"
		}
		return fmt.Errorf("answered %s: %s", resp.Status, msg)
	}
	return nil
}

// waitGone asks target every pollInterval until the connection is refused,
// which means ebb (and its admin server) has exited. When ctx ends first,
// the error says what the last poll saw.
func waitGone(ctx context.Context, client *http.Client, target string) error {
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	var last error
	for {
		select {
		case <-ctx.Done():
			if last != nil {
				return fmt.Errorf("no answer but no refusal either (%v)", last)
			}
			return errors.New("still running")
		case <-tick.C:
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			last = nil
			continue
		}
		if errors.Is(err, syscall.ECONNREFUSED) {
			return nil
		}
		// Anything else (a reset, a stall) is not proof that ebb is gone:
		// ask again until refused or the timeout.
		if ctx.Err() == nil {
			last = unwrapURL(err)
		}
	}
}

// unwrapURL drops the method and URL that *url.Error repeats in front of
// the cause; callers name the address themselves.
func unwrapURL(err error) error {
	if ue, ok := errors.AsType[*url.Error](err); ok {
		return ue.Err
	}
	return err
}
