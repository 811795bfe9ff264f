package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ebb-proxy/ebb/admin"
	"github.com/ebb-proxy/ebb/config"
	"github.com/ebb-proxy/ebb/drain"
	"github.com/ebb-proxy/ebb/proxy"
	"github.com/ebb-proxy/ebb/telemetry"
)

// cmdRun serves until the drain finishes.
func cmdRun(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("ebb run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cf configFlags
	cf.register(fs)
	if code := parseFlags(fs, args); code >= 0 {
		return code
	}
	childArgs := fs.Args() // after "--"
	cfg, err := loadConfig(cf)
	if err != nil {
		printConfigError(stderr, err)
		return exitConfig
	}
	tel, err := telemetry.New(cfg.Telemetry, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "ebb:", err)
		return exitConfig
	}
	log := tel.Logger
	for _, p := range cfg.Ignored {
		log.Warn("environment variable ignored", "variable", strings.TrimPrefix(p.Source, "environment "), "why", p.Msg)
	}

	// Signals are caught before anything listens, so that none is lost.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, signalsOf(cfg.Drain.Signals)...)
	defer signal.Stop(sigs)
	// SIGHUP, the reflex of nginx and HAProxy operators, asks for a
	// reload: it never ends ebb unless drain.signals lists it.
	hups := make(chan os.Signal, 1)
	if !slices.Contains(cfg.Drain.Signals, "SIGHUP") {
		signal.Notify(hups, syscall.SIGHUP)
		defer signal.Stop(hups)
	}

	s, err := startServing(cf, cfg, tel)
	if err != nil {
		log.Error("starting", "err", err)
		return exitConfig
	}
	var child *child
	if len(childArgs) > 0 {
		child, err = startChild(childArgs, log)
		if err != nil {
			log.Error("starting the application", "err", err)
			s.adm.Close()
			s.px.Close()
			return exitConfig
		}
	}
	res := s.run(cfg, sigs, hups, child)

	shutCtx, cancel := context.WithTimeout(context.Background(), time.Second)
	s.adm.Shutdown(shutCtx)
	tel.Shutdown(shutCtx)
	cancel()
	child.stop(log)

	log.Info("ebb exiting", "reason", string(res.Reason), "forced_closes", res.Forced)
	if !res.Clean() {
		return exitForced
	}
	return exitOK
}

// serving is a running ebb: the proxy, its drain controller, its
// reloader and the admin server.
type serving struct {
	px  *proxy.Proxy
	ctl *drain.Controller
	rl  *reloader
	adm *admin.Server
	log *slog.Logger
}

// startServing builds the proxy for cfg, binds its listeners and starts
// the admin server. On error nothing is left listening.
func startServing(cf configFlags, cfg *config.Config, tel *telemetry.Telemetry) (*serving, error) {
	log := tel.Logger
	reg := drain.NewRegistry()
	px, err := proxy.New(cfg, reg, tel.Meter, log)
	if err != nil {
		return nil, fmt.Errorf("building the proxy: %w", err)
	}
	tel.AddProducer(px.MetricsProducer())
	if err := px.Start(); err != nil {
		return nil, err
	}
	ctl := drain.NewController(cfg.Drain, reg, px, log)
	rl := newReloader(cf, cfg, px, ctl, tel.Meter, log)
	adm, err := admin.Start(admin.Options{
		Address:   cfg.Admin.Address,
		Readiness: readiness{ctl},
		Metrics:   tel.MetricsHandler(),
		Config:    rl.status,
		Reload: func(trigger string) (any, bool) {
			res := rl.reload(trigger)
			return res, res.Applied
		},
		Endpoints: func() any { return px.Endpoints() },
		Drain:     ctl.Trigger,
		Shutdown:  ctl.Force,
		Log:       log,
	})
	if err != nil {
		px.Close()
		return nil, err
	}
	for _, l := range cfg.Listeners {
		log.Info("listening", "listener", l.Name, "address", px.Addr(l.Name).String(), "role", l.Role)
	}
	log.Info("ebb started", "version", buildVersion(), "config", cfg.Source, "admin", adm.Addr().String())
	return &serving{px: px, ctl: ctl, rl: rl, adm: adm, log: log}, nil
}

// run serves until the drain has ended, with its owned goroutines: the
// signal watcher, the child watcher, the application watcher and
// discovery. They end once the drain has: discovery keeps running through
// it, since requests in flight still need endpoints.
func (s *serving) run(cfg *config.Config, sigs, hups <-chan os.Signal, child *child) drain.Result {
	watchCtx, stopWatching := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { s.px.RunDiscovery(watchCtx) })
	wg.Go(func() { s.watchSignals(watchCtx, sigs, hups, child) })
	if cfg.Reload.Watch {
		wg.Go(func() { s.rl.watch(watchCtx) })
	}
	if child != nil {
		wg.Go(func() {
			select {
			case <-child.done:
				s.ctl.AppGone("the child process exited")
			case <-watchCtx.Done():
			}
		})
	}
	// drain.app: the application watched by port, URL or PID.
	app := drain.WatchApp(watchCtx, cfg.Drain.App, s.log)
	wg.Go(func() {
		select {
		case <-app.Done():
			s.ctl.AppGone(app.Reason())
		case <-watchCtx.Done():
		}
	})
	defer app.Wait()

	res, _ := s.ctl.Run(context.Background())
	stopWatching()
	wg.Wait()
	return res
}

// watchSignals turns the first signal into the drain's trigger and a
// second one into a forced stop, until ctx ends. Signals are counted here,
// not inferred from the drain's state: a drain started by the
// application's exit or the admin API does not make the first signal a
// second one. A SIGHUP on hups (when drain.signals does not list it)
// reloads the configuration file.
func (s *serving) watchSignals(ctx context.Context, sigs, hups <-chan os.Signal, child *child) {
	signals := 0
	for {
		select {
		case <-hups:
			s.rl.reload("signal SIGHUP")
		case sig := <-sigs:
			signals++
			name := signalName(sig)
			if signals == 1 {
				// The child gets this signal once ebb has drained
				// (child.stop): until then it serves the requests ebb
				// still receives.
				child.deferSignal(sig)
				s.ctl.Trigger("signal " + name)
			} else {
				s.log.Warn("second signal: closing now", "signal", name)
				s.ctl.Force("signal " + name)
				child.signal(sig)
			}
		case <-ctx.Done():
			return
		}
	}
}

// readiness answers /ready from the drain controller.
type readiness struct{ ctl *drain.Controller }

func (r readiness) Ready() (bool, string) {
	deadline, draining := r.ctl.Deadline()
	if !draining {
		return true, "ready"
	}
	left := max(time.Until(deadline), 0).Round(100 * time.Millisecond)
	return false, fmt.Sprintf("draining: phase %s, %s left before the deadline", r.ctl.Phase(), left)
}

// signalsByName maps the names drain.signals accepts to signals.
var signalsByName = map[string]os.Signal{
	"SIGTERM": syscall.SIGTERM, "SIGINT": syscall.SIGINT, "SIGHUP": syscall.SIGHUP,
	"SIGQUIT": syscall.SIGQUIT, "SIGUSR1": syscall.SIGUSR1, "SIGUSR2": syscall.SIGUSR2,
}

func signalsOf(names []string) []os.Signal {
	out := make([]os.Signal, 0, len(names))
	for _, n := range names {
		out = append(out, signalsByName[n])
	}
	return out
}

func signalName(s os.Signal) string {
	for name, v := range signalsByName {
		if v == s {
			return name
		}
	}
	return s.String()
}
