package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/ebb-proxy/ebb/config"
	"github.com/ebb-proxy/ebb/drain"
	"github.com/ebb-proxy/ebb/proxy"
)

// reloader applies the configuration file anew (SIGHUP, POST /reload):
// loaded, validated and built whole, then swapped in; a configuration
// that fails anywhere never replaces the running one.
type reloader struct {
	cf      configFlags
	px      *proxy.Proxy
	ctl     *drain.Controller
	log     *slog.Logger
	reloads metric.Int64Counter

	mu       sync.Mutex
	cfg      *config.Config // in force
	gen      int            // reloads applied
	loadedAt time.Time      // when cfg was loaded
	last     reloadResult   // the last attempt's
	seen     []byte         // the file's content last seen by watch (or at the start)
}

// reloadResult is what a reload attempt did, as POST /reload answers it.
type reloadResult struct {
	Applied    bool          `json:"applied"`
	Generation int           `json:"generation"`
	At         time.Time     `json:"at"`
	Change     *proxy.Change `json:"change,omitempty"`
	Errors     []string      `json:"errors,omitempty"`
}

func newReloader(cf configFlags, cfg *config.Config, px *proxy.Proxy, ctl *drain.Controller, meter metric.Meter, log *slog.Logger) *reloader {
	r := &reloader{cf: cf, cfg: cfg, px: px, ctl: ctl, log: log, loadedAt: time.Now()}
	// The content the running configuration came from, read now (not when
	// the watcher starts): a change made right after the start is seen.
	r.seen, _ = os.ReadFile(cf.path)
	var err error
	r.reloads, err = meter.Int64Counter("ebb.config.reloads",
		metric.WithDescription("Configuration reloads, by result (applied or rejected)"), metric.WithUnit("{reload}"))
	if err != nil {
		log.Error("creating the reload counter", "err", err)
		return r
	}
	// Both series from the start, so that a rate or an alert on rejected
	// reloads sees the first one.
	for _, result := range []string{"applied", "rejected"} {
		r.reloads.Add(context.Background(), 0, metric.WithAttributes(attribute.String("result", result)))
	}
	return r
}

// reload reads the configuration file again and applies it, or keeps the
// running one and says why. trigger names what asked (for the log).
func (r *reloader) reload(trigger string) reloadResult {
	r.mu.Lock()
	defer r.mu.Unlock()
	res := reloadResult{Generation: r.gen, At: time.Now()}
	reject := func(errs ...string) reloadResult {
		res.Errors = errs
		r.count("rejected")
		r.log.Error("configuration reload rejected; the running configuration stays", "trigger", trigger, "problems", errs)
		r.last = res
		return res
	}
	if _, draining := r.ctl.Deadline(); draining {
		return reject("ebb is draining: the configuration in force at the drain's start stays until the exit")
	}
	cfg, err := loadConfig(r.cf)
	if err != nil {
		return reject(problems(err)...)
	}
	ch, err := r.px.Update(cfg)
	if err != nil {
		return reject(err.Error())
	}
	r.gen++
	r.cfg, r.loadedAt = cfg, res.At
	res.Applied, res.Generation, res.Change = true, r.gen, &ch
	r.count("applied")
	r.log.Info("configuration reloaded", "trigger", trigger, "generation", r.gen,
		"clusters_added", ch.Added, "clusters_removed", ch.Removed, "clusters_rebuilt", ch.Rebuilt, "clusters_kept", len(ch.Kept))
	if len(ch.Restart) > 0 {
		r.log.Warn("changed settings that only a restart applies keep their running values", "settings", ch.Restart)
	}
	for _, p := range cfg.Ignored {
		r.log.Warn("environment variable ignored", "variable", p.Source, "why", p.Msg)
	}
	r.last = res
	return res
}

func (r *reloader) count(result string) {
	if r.reloads != nil {
		r.reloads.Add(context.Background(), 1, metric.WithAttributes(attribute.String("result", result)))
	}
}

// status is what /config shows: the configuration in force, and under
// "reload" its generation, when it was loaded and the last attempt.
func (r *reloader) status() any {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.cfg.Map()
	st := map[string]any{"generation": r.gen, "loaded_at": r.loadedAt.UTC().Format(time.RFC3339Nano)}
	if !r.last.At.IsZero() {
		st["last"] = r.last
	}
	m["reload"] = st
	return m
}

// problems lists what is wrong with a configuration, one line each.
func problems(err error) []string {
	var ce *config.Error
	if errors.As(err, &ce) {
		out := make([]string, 0, len(ce.Problems))
		for _, p := range ce.Problems {
			out = append(out, p.String())
		}
		return out
	}
	return []string{err.Error()}
}

// cmdReload asks a running ebb, through its admin server, to reload its
// configuration file (POST /reload), and prints what it did. Exit 0: the
// new configuration is in force; 1: ebb kept the running one (every
// problem printed), or could not be reached; 2: bad usage.
func cmdReload(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("ebb reload", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr, cf := adminFlags(fs, "admin address of the running ebb, host:port", "read the admin address (admin.address) from this configuration file instead")
	tokenFile := fs.String("token-file", "", "file holding the admin token (default with -config: admin.token_file)")
	timeout := fs.Duration("timeout", 30*time.Second, "give up after this long")
	if code := parseFlags(fs, args); code >= 0 {
		return code
	}
	set, code := checkAdminFlags(fs, "ebb reload", *timeout, stderr)
	if code >= 0 {
		return code
	}
	if set["config"] {
		cfg, err := loadConfig(*cf)
		if err != nil {
			// The file the running ebb would reload is broken: say so
			// here, without asking it.
			printConfigError(stderr, err)
			return exitFailed
		}
		*addr = cfg.Admin.Address
		if *tokenFile == "" {
			*tokenFile = cfg.Admin.TokenFile
		}
	} else if _, port, err := net.SplitHostPort(*addr); err != nil || port == "" {
		fmt.Fprintf(stderr, "ebb reload: -admin: expected host:port, got %q\n", *addr)
		return exitUsage
	}
	token, code := readToken("ebb reload", *tokenFile, stderr)
	if code >= 0 {
		return code
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+*addr+"/reload", nil)
	if err != nil {
		fmt.Fprintln(stderr, "ebb reload:", err)
		return exitUsage
	}
	setToken(req, token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Fprintf(stderr, "ebb reload: asking ebb at %s to reload: %v\n", *addr, unwrapURL(err))
		return exitFailed
	}
	defer resp.Body.Close()
	var res reloadResult
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode == http.StatusNotFound {
		fmt.Fprintf(stderr, "ebb reload: ebb at %s has no /reload (older than `ebb reload`, or not ebb)\n", *addr)
		return exitFailed
	}
	if err := json.Unmarshal(body, &res); err != nil {
		fmt.Fprintf(stderr, "ebb reload: ebb at %s answered %s: %s\n", *addr, resp.Status, strings.TrimSpace(string(body)))
		return exitFailed
	}
	if !res.Applied {
		fmt.Fprintf(stderr, "ebb reload: ebb at %s kept its running configuration (generation %d):\n", *addr, res.Generation)
		for _, e := range res.Errors {
			fmt.Fprintln(stderr, "  "+e)
		}
		return exitFailed
	}
	fmt.Fprintf(stdout, "ebb at %s: configuration reloaded (generation %d)\n", *addr, res.Generation)
	if ch := res.Change; ch != nil {
		for _, l := range []struct {
			what  string
			names []string
		}{{"clusters added", ch.Added}, {"clusters removed", ch.Removed}, {"clusters rebuilt", ch.Rebuilt}, {"clusters kept", ch.Kept}} {
			if len(l.names) > 0 {
				fmt.Fprintf(stdout, "  %s: %s\n", l.what, strings.Join(l.names, ", "))
			}
		}
		if len(ch.Restart) > 0 {
			fmt.Fprintf(stdout, "  needs a restart (running values kept): %s\n", strings.Join(ch.Restart, ", "))
		}
	}
	return exitOK
}

// watchPoll is how often the watcher re-reads the file even without an
// event (a file system whose events do not arrive, a missed one).
const watchPoll = 5 * time.Second

// watch reloads the configuration file when its content changes (and
// differs from what was last loaded or tried), until ctx ends. The
// directory is watched, not the file: editors and Kubernetes replace the
// file (atomic renames, ConfigMap symlink swaps) rather than write it.
func (r *reloader) watch(ctx context.Context) {
	path := r.cf.path
	last := r.seen
	w, err := fsnotify.NewWatcher()
	if err != nil {
		r.log.Error("watching the configuration file: reloads need SIGHUP or ebb reload", "file", path, "err", err)
		return
	}
	defer w.Close()
	if err := w.Add(filepath.Dir(path)); err != nil {
		r.log.Error("watching the configuration file: reloads need SIGHUP or ebb reload", "file", path, "err", err)
		return
	}
	check := func() {
		data, err := os.ReadFile(path)
		if err != nil || bytes.Equal(data, last) {
			return // gone for now (a rename in progress), or unchanged
		}
		last = data
		r.reload("file change")
	}
	poll := time.NewTicker(watchPoll)
	defer poll.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-w.Events:
			if !ok {
				return
			}
			check()
		case err, ok := <-w.Errors:
			if !ok {
				return
			}
			r.log.Warn("watching the configuration file", "file", path, "err", err)
		case <-poll.C:
			check()
		}
	}
}
