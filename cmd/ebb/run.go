package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ebb-proxy/ebb/admin"
	"github.com/ebb-proxy/ebb/config"
	"github.com/ebb-proxy/ebb/drain"
	"github.com/ebb-proxy/ebb/drain/takeover"
	"github.com/ebb-proxy/ebb/proxy"
	"github.com/ebb-proxy/ebb/proxy/downstream"
	"github.com/ebb-proxy/ebb/telemetry"
)

// cmdRun serves until the drain finishes.
func cmdRun(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("ebb run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cf configFlags
	cf.register(fs)
	takeoverFlag := fs.Bool("takeover", false, "take over the listening sockets of the ebb offering them on takeover.socket; it then drains and exits (see docs/RESTART.md)")
	if code := parseFlags(fs, args); code >= 0 {
		return code
	}
	childArgs := fs.Args() // after "--"
	if *takeoverFlag && len(childArgs) > 0 {
		fmt.Fprintln(stderr, "ebb: -takeover cannot be used with a child command (-- CMD): the application would run twice")
		return exitUsage
	}
	cfg, err := loadConfig(cf)
	if err != nil {
		printConfigError(stderr, err)
		return exitConfig
	}
	if *takeoverFlag && cfg.Takeover.Socket == "" {
		fmt.Fprintf(stderr, "ebb: -takeover: %s does not set takeover.socket: set it, to the same path, for the running ebb and this one\n", cfg.Source)
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

	// SIGUSR2 starts a successor that takes over (when takeover.socket is
	// set), as nginx's binary upgrade does, unless drain.signals lists it.
	usr2 := make(chan os.Signal, 1)
	if !slices.Contains(cfg.Drain.Signals, "SIGUSR2") {
		signal.Notify(usr2, syscall.SIGUSR2)
		defer signal.Stop(usr2)
	}
	// SIGUSR1 reopens the access log's file (logrotate's postrotate), as
	// it does nginx's, unless drain.signals lists it.
	usr1 := make(chan os.Signal, 1)
	if !slices.Contains(cfg.Drain.Signals, "SIGUSR1") {
		signal.Notify(usr1, syscall.SIGUSR1)
		defer signal.Stop(usr1)
	}
	// systemd's notification socket is ebb's alone, not the child's.
	notifySocket := os.Getenv("NOTIFY_SOCKET")
	os.Unsetenv("NOTIFY_SOCKET")

	socks, err := takeover.FromEnv()
	if err != nil {
		log.Error("sockets passed by systemd", "err", err)
		return exitConfig
	}
	var ho *takeover.Handover
	if *takeoverFlag {
		if ho, err = takeOver(cfg.Takeover.Socket, log); err != nil {
			log.Error("taking over", "err", err)
			return exitConfig
		}
		if ho != nil {
			socks = ho.Sockets.Join(socks)
		}
	}
	s, err := startServing(cf, cfg, tel, socks)
	if err != nil {
		log.Error("starting", "err", err)
		if ho != nil {
			ho.Fail(err)
			log.Info("takeover: the running ebb serves on", "pid", ho.PID)
		}
		socks.Close()
		return exitConfig
	}
	for _, k := range socks.Close() {
		log.Warn("a socket handed over is not in this configuration: closed", "kind", k.Kind, "name", k.Name, "address", k.Bound)
	}
	ready := "READY=1"
	if ho != nil {
		if err := ho.Serving(); err != nil {
			log.Warn("takeover: serving, but the previous ebb did not confirm that it drains", "pid", ho.PID, "err", err)
		} else {
			log.Info("takeover: serving; the previous ebb drains", "pid", ho.PID)
		}
		ready = fmt.Sprintf("MAINPID=%d\nREADY=1", os.Getpid())
	}
	if err := notify(notifySocket, ready); err != nil {
		log.Warn("telling systemd that ebb is ready (NOTIFY_SOCKET)", "err", err)
	}
	if len(childArgs) == 0 {
		s.successor = newSuccessor(os.Args[0], args, notifySocket, log)
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
	res := s.run(cfg, signalChans{drain: sigs, hup: hups, usr1: usr1, usr2: usr2}, child)
	if path := cfg.Drain.Report; path != "" {
		// For postmortems; the exit status stays the drain's.
		if err := s.ctl.Timeline().Report().WriteFile(path); err != nil {
			log.Error("writing the drain report (drain.report)", "path", path, "err", err)
		} else {
			log.Info("drain report written", "path", path)
		}
	}

	shutCtx, cancel := context.WithTimeout(context.Background(), time.Second)
	s.adm.Shutdown(shutCtx)
	cancel()
	at, drained := s.ctl.Deadline()
	if flush, ok := flushTime(at, drained, time.Now()); ok {
		shutCtx, cancel = context.WithTimeout(context.Background(), flush)
		if err := tel.Shutdown(shutCtx); err != nil {
			log.Warn("telemetry: flushing at exit", "err", err)
		}
		cancel()
	} else if cfg.Telemetry.Tracing.Enabled {
		log.Warn("telemetry: flushing at exit", "err", "the drain's deadline has passed: the spans not yet exported are dropped")
	}
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
	cfg *config.Config // as started
	px  *proxy.Proxy
	ctl *drain.Controller
	rl  *reloader
	adm *admin.Server
	log *slog.Logger
	// tko offers the sockets to a successor (nil: takeover.socket unset);
	// successor starts one on SIGUSR2 (nil: not with a child).
	tko       *takeover.Offer
	successor *successor
}

// startServing builds the proxy for cfg, binds its listeners and the admin
// server, taking the sockets socks holds (handed over, or passed by
// systemd) and binding the others, and starts serving. On error nothing is
// left listening, and nothing has been accepted.
func startServing(cf configFlags, cfg *config.Config, tel *telemetry.Telemetry, socks *takeover.Set) (*serving, error) {
	log := tel.Logger
	reg := downstream.NewRegistry()
	reg.SetEventStreams(cfg.Drain.EventStreams)
	px, err := proxy.New(cfg, reg, tel.Meter, tel.Tracer, log)
	if err != nil {
		return nil, fmt.Errorf("building the proxy: %w", err)
	}
	tel.AddCollector(px.MetricsCollector())
	// Everything is bound before anything is accepted: a start that fails
	// half-way must not have taken a connection it would then drop.
	if err := px.Bind(socks.Listen); err != nil {
		return nil, err
	}
	var token string
	if cfg.Admin.TokenFile != "" {
		if token, err = config.ReadAdminToken(cfg.Admin.TokenFile); err != nil {
			px.Close()
			return nil, fmt.Errorf("admin.token_file: %w", err)
		}
	}
	ctl := drain.NewController(cfg.Drain, reg, px, log)
	rl := newReloader(cf, cfg, px, ctl, tel.Meter, log)
	adm, err := admin.Start(admin.Options{
		Address:      cfg.Admin.Address,
		ProbeAddress: cfg.Admin.ProbeAddress,
		Hosts:        cfg.Admin.Hosts,
		Pprof:        cfg.Admin.Pprof,
		Token:        token,
		Listen:       socks.Listen,
		Readiness:    readiness{ctl},
		Metrics:      tel.MetricsHandler(),
		Config:       rl.status,
		Reload: func(trigger string) (any, bool) {
			res := rl.reload(trigger)
			return res, res.Applied
		},
		Endpoints: func() any { return px.Endpoints() },
		Drain:     ctl.Trigger,
		Timeline:  ctl.Timeline(),
		Shutdown:  ctl.Force,
		Log:       log,
	})
	if err != nil {
		px.Close()
		return nil, err
	}
	s := &serving{cfg: cfg, px: px, ctl: ctl, rl: rl, adm: adm, log: log}
	if path := cfg.Takeover.Socket; path != "" {
		ln, err := socks.ListenUnix(path)
		if err != nil {
			adm.Close()
			px.Close()
			return nil, fmt.Errorf("takeover.socket: %w", err)
		}
		s.tko = s.offer(ln)
	}
	if err := px.Serve(); err != nil {
		if s.tko != nil {
			s.tko.Close()
		}
		adm.Close()
		px.Close()
		return nil, err
	}
	for _, l := range cfg.Listeners {
		log.Info("listening", "listener", l.Name, "address", px.Addr(l.Name).String(), "role", l.Role)
	}
	probe := ""
	if a := adm.ProbeAddr(); a != nil {
		probe = a.String()
	}
	// GOMAXPROCS: what the runtime chose (the CPUs ebb may run on, or a
	// cgroup CPU limit rounded up and at least 2), or the environment's;
	// docs/DEPLOYMENT.md says when to set it.
	log.Info("ebb started", "version", buildVersion(), "config", cfg.Source, "admin", adm.Addr().String(), "probe", probe, "takeover_socket", cfg.Takeover.Socket,
		"gomaxprocs", runtime.GOMAXPROCS(0))
	return s, nil
}

// maxFlush bounds the export of the spans left at exit: a collector that
// does not answer must not keep a drained ebb.
const maxFlush = 5 * time.Second

// flushTime returns how long the spans not yet exported at exit (now) may
// take: after a drain (drained, deadline its drain.timeout), what is left
// of it, at most maxFlush, and false when nothing is (a flush already past
// its deadline is not tried); without one, a second.
func flushTime(deadline time.Time, drained bool, now time.Time) (time.Duration, bool) {
	if !drained {
		return time.Second, true
	}
	left := deadline.Sub(now)
	if left <= 0 {
		return 0, false
	}
	return min(left, maxFlush), true
}

// signalChans are the signals run watches: those that drain (a second one
// forces the stop), SIGHUP (reload), SIGUSR1 (reopen the access log) and
// SIGUSR2 (a successor takes over) when drain.signals does not list them.
type signalChans struct {
	drain, hup, usr1, usr2 <-chan os.Signal
}

// run serves until the drain has ended, with its owned goroutines: the
// signal watcher, the child watcher, the application watcher and
// discovery. They end once the drain has: discovery keeps running through
// it, since requests in flight still need endpoints.
func (s *serving) run(cfg *config.Config, sigs signalChans, child *child) drain.Result {
	watchCtx, stopWatching := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { s.px.RunDiscovery(watchCtx) })
	wg.Go(func() { s.watchSignals(watchCtx, sigs, child) })
	if s.tko != nil {
		// Offered until a successor takes over, or the exit: a successor
		// may take over from an ebb that is draining already.
		wg.Go(func() {
			if err := s.tko.Serve(); err != nil {
				s.log.Error("takeover: the socket failed; no successor can take over", "err", err)
			}
		})
	}
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
	if s.tko != nil {
		s.tko.Close()
	}
	wg.Wait()
	return res
}

// watchSignals turns the first signal into the drain's trigger and a
// second one into a forced stop, until ctx ends. Signals are counted here,
// not inferred from the drain's state: a drain started by the
// application's exit or the admin API does not make the first signal a
// second one. A SIGHUP (when drain.signals does not list it) reloads the
// configuration file; a SIGUSR1 reopens the access log; a SIGUSR2 starts
// a successor.
func (s *serving) watchSignals(ctx context.Context, sigs signalChans, child *child) {
	signals := 0
	for {
		select {
		case <-sigs.hup:
			s.rl.reload("signal SIGHUP")
		case <-sigs.usr1:
			if err := s.px.ReopenAccessLog(); err != nil {
				s.log.Error("SIGUSR1: reopening the access log failed; it goes on to the file it had", "err", err)
			} else {
				s.log.Info("SIGUSR1: access log reopened")
			}
		case <-sigs.usr2:
			switch {
			case s.tko == nil:
				s.log.Warn("SIGUSR2: a restart by takeover needs takeover.socket; ignored")
			case s.successor == nil:
				s.log.Warn("SIGUSR2: a restart by takeover is not done with a child command (-- CMD); ignored")
			default:
				s.successor.start()
			}
		case sig := <-sigs.drain:
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
