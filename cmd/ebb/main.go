// Command ebb is a reverse proxy for HTTP/1.1 and HTTP/2 that shuts down
// without causing client errors.
//
//	ebb [run] -config ebb.yaml [-set key=value ...] [-- CMD ARGS...]
//	ebb check -config ebb.yaml
//	ebb drain [-admin 127.0.0.1:9901 | -config ebb.yaml] [-now] [-wait [-progress auto]] [-timeout 60s]
//	ebb reload [-admin 127.0.0.1:9901 | -config ebb.yaml] [-timeout 30s]
//	ebb health [-admin 127.0.0.1:9901 | -config ebb.yaml] [-path /ready] | -url URL
//	ebb version
//
// Exit statuses: 0 stopped cleanly (drained, or the watched application
// gone with no request in flight); 1 configuration or start-up error, or
// for ebb drain: the running ebb could not be reached, refused, or outlived
// -timeout, for ebb reload: not reached, or the new configuration
// rejected, and for ebb health: not reached or not 200; 2 bad usage; 3
// the drain deadline passed or a forced stop (second signal,
// /shutdown?now) closed connections (drain.timeout is too short for the
// traffic).
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"

	"github.com/ebb-proxy/ebb/discovery/kubernetes"
)

// Exit statuses.
const (
	exitOK     = 0
	exitConfig = 1
	exitFailed = 1 // ebb drain: ebb not reached, refused, or still running; ebb health: not healthy
	exitUsage  = 2
	exitForced = 3
)

// version is set at build time with -ldflags "-X main.version=...".
var version = ""

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// Kubernetes discovery (client-go) is wired in here, where the sources,
// the exporters and the data path meet: package discovery, which the data
// path builds its sources with, does not import it.
func init() { kubernetes.Use() }

func run(args []string, stdout, stderr io.Writer) int {
	cmd := "run"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "run":
		return cmdRun(args, stderr)
	case "check":
		return cmdCheck(args, stdout, stderr)
	case "drain":
		return cmdDrain(args, stdout, stderr)
	case "reload":
		return cmdReload(args, stdout, stderr)
	case "health":
		return cmdHealth(args, stdout, stderr)
	case "version":
		fmt.Fprintln(stdout, "ebb", buildVersion())
		return exitOK
	case "help", "-h", "--help":
		usage(stdout)
		return exitOK
	}
	fmt.Fprintf(stderr, "ebb: unknown command %q\n\n", cmd)
	usage(stderr)
	return exitUsage
}

func usage(w io.Writer) {
	fmt.Fprint(w, `usage:
  ebb [run] -config ebb.yaml [-set key=value ...] [-- CMD ARGS...]
        serve; with "-- CMD ARGS", also run CMD as a child: it receives
        the signals ebb receives, and its exit starts ebb's drain
  ebb check -config ebb.yaml [-set key=value ...]
        validate the configuration and print every problem
  ebb drain [-admin 127.0.0.1:9901 | -config ebb.yaml] [-now] [-wait [-progress auto]] [-timeout 60s]
        ask the running ebb to drain (POST /drain on its admin server);
        -config reads admin.address from the file; -now closes every
        connection at once instead (POST /shutdown?now); -wait then shows
        the drain as it goes (-progress: inplace on a terminal, else lines;
        or off), its summary and exit reason, and waits until ebb has
        exited, for at most -timeout. Kubernetes preStop exec
        hook: "ebb drain -wait" (the pod's SIGTERM follows the hook).
        Exit 0 accepted (with -wait: and ebb exited); 1 ebb not reached,
        refused, or still running after -timeout
  ebb reload [-admin 127.0.0.1:9901 | -config ebb.yaml] [-timeout 30s]
        ask the running ebb to reload its configuration file (POST /reload;
        SIGHUP does the same): routes and clusters change at once, without
        dropping a request; a file that fails to load or validate changes
        nothing. Exit 0 applied; 1 rejected (every problem printed) or ebb
        not reached
  ebb health [-admin 127.0.0.1:9901 | -config ebb.yaml] [-path /ready] [-timeout 2s]
  ebb health -url http://127.0.0.1:9000/healthz
        a container healthcheck that needs no shell or curl: GET /ready
        (or -path /live) on the running ebb (-config: admin.probe_address,
        else admin.address; an address on every interface is asked on
        loopback), or GET -url. Exit 0 on 200; 1 otherwise, with the
        status and why (/ready: the drain's phase)
  ebb version
        print the version

Environment variables EBB_<KEY> override the file (EBB_DRAIN__DELAY=5s
sets drain.delay); -set overrides both.
`)
}

// configFlags are the flags shared by run and check.
type configFlags struct {
	path string
	sets stringList
}

func (c *configFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.path, "config", "ebb.yaml", "configuration file (YAML or JSON)")
	fs.Var(&c.sets, "set", "override one key, as key=value (repeatable), e.g. -set drain.delay=5s")
}

type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

// parseFlags parses args. On -h it returns exitOK, on bad usage exitUsage
// (flag has printed why), and -1 to go on.
func parseFlags(fs *flag.FlagSet, args []string) int {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	return -1
}

func buildVersion() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		v := bi.Main.Version
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				return v + " (" + s.Value[:12] + ")"
			}
		}
		return v
	}
	return "(unknown)"
}
