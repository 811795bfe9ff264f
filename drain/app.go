package drain

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ebb-proxy/ebb/config"
)

// AppWatcher watches the application named by drain.app and reports when it
// has exited: the "app gone" exit of docs/DRAIN.md. In a sidecar nothing
// can be served once the application is gone, so the drain need not wait
// for its deadline.
//
// Its goroutine is owned by whoever called WatchApp: it ends when the
// watcher's context ends or the application is gone, and Wait waits for it.
// A nil *AppWatcher is a watcher of no application: Done never fires and
// Wait returns at once.
type AppWatcher struct {
	// Read-only after WatchApp returns.
	done   chan struct{} // closed when the app is gone; nil when none is watched
	exited chan struct{} // closed when the goroutine has ended

	// reason is written once by the goroutine before done is closed, and
	// read only after done is closed.
	reason string
}

// WatchApp starts watching the application named by cfg: exactly one of
// cfg.TCP, cfg.HTTP, cfg.PID and cfg.PIDFile (if several are set, the first
// in that order wins; validation forbids it). It checks at once, then every
// cfg.Interval, until ctx ends or the application is gone.
//
// The application may start after ebb, so "gone" means it was seen alive at
// least once and then a check failed; until then failures are only logged
// at debug level. The exception is an explicit cfg.PID: a process that does
// not exist cannot appear later, so it is gone at the first check.
//
// If cfg names no application, the returned watcher has a nil Done channel
// (which never fires) and no goroutine. The caller cancels ctx and calls
// Wait to reclaim the goroutine.
func WatchApp(ctx context.Context, cfg config.App, log *slog.Logger) *AppWatcher {
	return watchApp(ctx, cfg, log, nil)
}

// watchApp is WatchApp with a hook that sees every check's outcome before
// the watcher acts on it; tests use it to step through the checks.
func watchApp(ctx context.Context, cfg config.App, log *slog.Logger, checked func(appCheck)) *AppWatcher {
	w := &AppWatcher{exited: make(chan struct{})}
	p := newAppProbe(cfg)
	if p == nil {
		close(w.exited)
		return w
	}
	if log == nil {
		log = slog.Default()
	}
	interval := cfg.Interval
	if interval <= 0 {
		interval = 500 * time.Millisecond // config's default; validation requires > 0
	}
	w.done = make(chan struct{})
	go w.run(ctx, p, interval, log.With("app", p.name()), checked)
	return w
}

// Done returns a channel that is closed once the application is gone. It is
// nil, and never fires, when no application is watched.
func (w *AppWatcher) Done() <-chan struct{} {
	if w == nil {
		return nil
	}
	return w.done
}

// Reason says what was seen when the application was found gone, such as
// "tcp 127.0.0.1:9000: connection refused" or "pid 1234 exited"; it is empty
// until Done is closed.
func (w *AppWatcher) Reason() string {
	if w == nil || w.done == nil {
		return ""
	}
	select {
	case <-w.done:
		return w.reason
	default:
		return ""
	}
}

// Wait waits for the watcher's goroutine to end: after the application is
// gone, or after the context given to WatchApp has ended.
func (w *AppWatcher) Wait() {
	if w == nil {
		return
	}
	<-w.exited
}

func (w *AppWatcher) run(ctx context.Context, p appProbe, interval time.Duration, log *slog.Logger, checked func(appCheck)) {
	defer close(w.exited)
	defer p.close()
	timeout := min(interval, time.Second)
	t := time.NewTicker(interval)
	defer t.Stop()
	var st appState
	for {
		c := p.check(ctx, timeout)
		if ctx.Err() != nil {
			return // a check cut short by ctx says nothing about the app
		}
		if checked != nil {
			checked(c)
		}
		switch st.observe(c) {
		case appUp:
			log.Info("application is up")
		case appNotYetUp:
			log.Debug("application not up yet", "seen", c.reason)
		case appUnsure:
			log.Debug("application check failed; confirming", "seen", c.reason)
		case appGone:
			log.Info("application gone", "reason", c.reason)
			w.reason = c.reason
			close(w.done)
			return
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
	}
}

// appCheck is the outcome of one check of the application.
type appCheck struct {
	alive bool
	// The rest describes a failed check.
	reason string // what was seen, for the log and Reason
	// unsure: the failure may be transient (a timeout: one lost SYN or a
	// slow answer is not an exit), so it takes two in a row to be gone.
	unsure bool
	// final: the application cannot come back, even if never seen alive
	// (an explicit PID that does not exist).
	final bool
}

// appEvent is what one check changed, for the log.
type appEvent int

const (
	appNothing  appEvent = iota
	appUp                // first seen alive
	appNotYetUp          // first failure before ever seen alive
	appUnsure            // an unsure failure after alive; one more makes it gone
	appGone
)

// appState decides from the sequence of checks when the application is
// gone. It belongs to the watcher's goroutine.
type appState struct {
	seenAlive  bool
	loggedDown bool // appNotYetUp was reported
	unsure     int  // consecutive unsure failures since last alive
}

func (s *appState) observe(c appCheck) appEvent {
	switch {
	case c.alive:
		s.unsure = 0
		if !s.seenAlive {
			s.seenAlive = true
			return appUp
		}
		return appNothing
	case c.final:
		return appGone
	case !s.seenAlive:
		if !s.loggedDown {
			s.loggedDown = true
			return appNotYetUp
		}
		return appNothing
	case c.unsure:
		s.unsure++
		if s.unsure < 2 {
			return appUnsure
		}
		return appGone
	default:
		return appGone
	}
}

// appProbe checks one kind of application.
type appProbe interface {
	name() string // "tcp 127.0.0.1:9000", for the log
	check(ctx context.Context, timeout time.Duration) appCheck
	close()
}

func newAppProbe(cfg config.App) appProbe {
	switch {
	case cfg.TCP != "":
		return tcpProbe{addr: cfg.TCP}
	case cfg.HTTP != "":
		return newHTTPProbe(cfg.HTTP)
	case cfg.PID != 0:
		return pidProbe{pid: cfg.PID}
	case cfg.PIDFile != "":
		return pidFileProbe{path: cfg.PIDFile}
	}
	return nil
}

// tcpProbe: a port that accepts a connection is alive.
type tcpProbe struct{ addr string }

func (p tcpProbe) name() string { return "tcp " + p.addr }
func (p tcpProbe) close()       {}

func (p tcpProbe) check(ctx context.Context, timeout time.Duration) appCheck {
	d := net.Dialer{Timeout: timeout}
	conn, err := d.DialContext(ctx, "tcp", p.addr)
	if err != nil {
		return netFailure(p.name(), err)
	}
	conn.Close()
	return appCheck{alive: true}
}

// netFailure describes a failed connection. Only a refused connection is
// certain: the port is closed. Anything else (a timeout, a reset, a DNS
// failure) takes a second failure in a row.
func netFailure(name string, err error) appCheck {
	return appCheck{
		reason: name + ": " + innermost(err).Error(),
		unsure: !errors.Is(err, syscall.ECONNREFUSED),
	}
}

// innermost strips the wrappers that only repeat the operation and address
// ("Get URL: dial tcp ADDR: connect: connection refused") down to what was
// seen ("connection refused").
func innermost(err error) error {
	for {
		switch e := err.(type) {
		case *url.Error:
			err = e.Err
		case *net.OpError:
			err = e.Err
		case *os.SyscallError:
			err = e.Err
		case *fs.PathError:
			err = e.Err
		default:
			return err
		}
	}
}

// httpProbe: a URL that gives any HTTP response, whatever its status, is
// alive; the application is what answered.
type httpProbe struct {
	url    string
	tr     *http.Transport
	client *http.Client
}

func newHTTPProbe(u string) *httpProbe {
	tr := &http.Transport{
		Proxy:             nil, // the application is local; HTTP_PROXY is for egress
		DisableKeepAlives: true,
		// Liveness, not trust: nothing is sent but a GET, and a
		// self-signed certificate on a local port is common (Kubernetes'
		// HTTPS probes do not verify either).
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true},
	}
	return &httpProbe{url: u, tr: tr, client: &http.Client{
		Transport: tr,
		// A redirect is an answer.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

func (p *httpProbe) name() string { return "http " + p.url }
func (p *httpProbe) close()       { p.tr.CloseIdleConnections() }

func (p *httpProbe) check(ctx context.Context, timeout time.Duration) appCheck {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.url, nil)
	if err != nil {
		// Validation checks the URL; this cannot become alive.
		return appCheck{reason: p.name() + ": " + err.Error()}
	}
	req.Header.Set("User-Agent", "ebb-app-watch")
	resp, err := p.client.Do(req)
	if err != nil {
		return netFailure(p.name(), err)
	}
	resp.Body.Close()
	return appCheck{alive: true}
}

// pidProbe: a process that exists is alive, even as a zombie not yet
// reaped by its parent.
type pidProbe struct{ pid int }

func (p pidProbe) name() string { return "pid " + strconv.Itoa(p.pid) }
func (p pidProbe) close()       {}

func (p pidProbe) check(context.Context, time.Duration) appCheck {
	c := pidCheck(p.pid)
	// An explicit pid that does not exist cannot appear later.
	c.final = !c.alive && !c.unsure
	return c
}

// pidCheck reports whether process pid exists.
func pidCheck(pid int) appCheck {
	if pid <= 0 {
		// kill(2) would address a process group, or every process.
		return appCheck{reason: fmt.Sprintf("pid %d: not a process id", pid), unsure: true}
	}
	switch err := syscall.Kill(pid, 0); {
	case err == nil, errors.Is(err, syscall.EPERM): // EPERM: exists, owned by someone else
		return appCheck{alive: true}
	case errors.Is(err, syscall.ESRCH):
		return appCheck{reason: fmt.Sprintf("pid %d exited", pid)}
	default:
		return appCheck{reason: fmt.Sprintf("pid %d: %v", pid, err), unsure: true}
	}
}

// pidFileProbe: the process named by the file, read at each check, is
// alive. A removed file, or one naming a process that does not exist, is
// gone; a file that cannot be read or parsed may be in the middle of being
// rewritten, so it takes a second failure in a row.
type pidFileProbe struct{ path string }

func (p pidFileProbe) name() string { return "pid_file " + p.path }
func (p pidFileProbe) close()       {}

func (p pidFileProbe) check(context.Context, time.Duration) appCheck {
	b, err := os.ReadFile(p.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return appCheck{reason: p.name() + ": removed"}
	case err != nil:
		return appCheck{reason: p.name() + ": " + innermost(err).Error(), unsure: true}
	}
	s := strings.TrimSpace(string(b))
	pid, err := strconv.Atoi(s)
	if err != nil || pid <= 0 {
		return appCheck{reason: fmt.Sprintf("%s: expected a process id, found %.20q", p.name(), s), unsure: true}
	}
	c := pidCheck(pid)
	if !c.alive {
		c.reason = p.name() + ": " + c.reason
	}
	return c
}
