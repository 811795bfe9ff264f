package drain

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ebb-proxy/ebb/config"
)

// These tests use real sockets and processes, so testing/synctest does not
// apply: the watcher's checks are handed to the test one at a time (the
// checked hook), and every wait is bounded by appWait.

const (
	appWait = 5 * time.Second
	// appInterval is short for quick tests, but long enough that a local
	// dial under -race does not time out (the dial timeout is the interval).
	appInterval = 50 * time.Millisecond
)

// appRun is a watcher whose checks the test receives one by one.
type appRun struct {
	w      *AppWatcher
	checks chan appCheck
	cancel context.CancelFunc
	log    *recordLog
}

func startWatch(t *testing.T, cfg config.App) *appRun {
	t.Helper()
	if cfg.Interval == 0 {
		cfg.Interval = appInterval
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &appRun{checks: make(chan appCheck), cancel: cancel, log: &recordLog{}}
	r.w = watchApp(ctx, cfg, slog.New(r.log), func(c appCheck) {
		select {
		case r.checks <- c:
		case <-ctx.Done():
		}
	})
	t.Cleanup(func() {
		cancel()
		r.w.Wait()
	})
	return r
}

// next returns the next check, failing if the watcher reports the app gone
// first: the previous check did not make it gone.
func (r *appRun) next(t *testing.T) appCheck {
	t.Helper()
	select {
	case c := <-r.checks:
		return c
	case <-r.w.Done():
		t.Fatalf("app gone: %s", r.w.Reason())
	case <-time.After(appWait):
		t.Fatalf("no check within %v", appWait)
	}
	panic("unreachable")
}

// notGone receives n checks, all failed and none making the app gone.
func (r *appRun) notGone(t *testing.T, n int, seen string) {
	t.Helper()
	for range n {
		if c := r.next(t); c.alive || !strings.Contains(c.reason, seen) {
			t.Fatalf("check = %+v, want a failure mentioning %q", c, seen)
		}
	}
}

// untilAlive receives checks until one finds the app alive.
func (r *appRun) untilAlive(t *testing.T) {
	t.Helper()
	deadline := time.After(appWait)
	for {
		select {
		case c := <-r.checks:
			if c.alive {
				return
			}
		case <-r.w.Done():
			t.Fatalf("app gone before alive: %s", r.w.Reason())
		case <-deadline:
			t.Fatalf("app not seen alive within %v", appWait)
		}
	}
}

// gone waits for the app to be reported gone and returns the reason.
func (r *appRun) gone(t *testing.T) string {
	t.Helper()
	deadline := time.After(appWait)
	for {
		select {
		case <-r.checks:
		case <-r.w.Done():
			r.w.Wait()
			return r.w.Reason()
		case <-deadline:
			t.Fatalf("app not gone within %v", appWait)
		}
	}
}

func TestAppStateObserve(t *testing.T) {
	up := appCheck{alive: true}
	refused := appCheck{reason: "refused"}
	timeout := appCheck{reason: "timeout", unsure: true}
	exited := appCheck{reason: "pid exited", final: true}
	tests := []struct {
		name   string
		checks []appCheck
		want   []appEvent
	}{
		{"not yet up is not gone", []appCheck{refused, timeout, refused}, []appEvent{appNotYetUp, appNothing, appNothing}},
		{"up once", []appCheck{refused, up, up}, []appEvent{appNotYetUp, appUp, appNothing}},
		{"refused after up", []appCheck{up, refused}, []appEvent{appUp, appGone}},
		{"one timeout is not gone", []appCheck{up, timeout, up, timeout, up}, []appEvent{appUp, appUnsure, appNothing, appUnsure, appNothing}},
		{"two timeouts are gone", []appCheck{up, timeout, timeout}, []appEvent{appUp, appUnsure, appGone}},
		{"timeout then refused", []appCheck{up, timeout, refused}, []appEvent{appUp, appUnsure, appGone}},
		{"final before up", []appCheck{exited}, []appEvent{appGone}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s appState
			for i, c := range tt.checks {
				if got := s.observe(c); got != tt.want[i] {
					t.Fatalf("check %d (%+v): event %d, want %d", i, c, got, tt.want[i])
				}
			}
		})
	}
}

func TestAppNone(t *testing.T) {
	w := WatchApp(context.Background(), config.App{Interval: appInterval}, slog.New(&recordLog{}))
	if w.Done() != nil {
		t.Fatal("Done() is not nil with no app configured")
	}
	w.Wait() // returns: no goroutine
	if w.Reason() != "" {
		t.Fatalf("Reason() = %q", w.Reason())
	}
	var nilW *AppWatcher
	nilW.Wait()
	if nilW.Done() != nil || nilW.Reason() != "" {
		t.Fatal("nil watcher is not a watcher of nothing")
	}
}

func TestAppTCP(t *testing.T) {
	// A socket bound but not listening: the app is not up yet, and no other
	// test can take its port meanwhile.
	fd, addr, closeFD := boundSocket(t)
	r := startWatch(t, config.App{TCP: addr})
	r.notGone(t, 3, "connection refused")

	if err := syscall.Listen(fd, 16); err != nil {
		t.Fatalf("listening on %s: %v", addr, err)
	}
	r.untilAlive(t)
	r.next(t) // the first alive check did not make it gone
	closeFD()

	want := "tcp " + addr + ": connection refused"
	if got := r.gone(t); got != want {
		t.Fatalf("reason = %q, want %q", got, want)
	}
	if n := r.log.count("application not up yet"); n != 1 {
		t.Fatalf("logged %d times that the app is not up yet, want once", n)
	}
	r.log.want(t, slog.LevelInfo, "application is up", "application gone")
}

// boundSocket returns a TCP socket bound to a free port on 127.0.0.1 but
// not listening (connecting to it is refused), and a func that closes it.
func boundSocket(t *testing.T) (fd int, addr string, closeFD func()) {
	t.Helper()
	// Close-on-exec, set under ForkLock as package syscall does, so that
	// a child started by another test does not keep the port open.
	syscall.ForkLock.RLock()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err == nil {
		syscall.CloseOnExec(fd)
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		t.Fatal(err)
	}
	closeFD = sync.OnceFunc(func() { syscall.Close(fd) })
	t.Cleanup(closeFD)
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return fd, net.JoinHostPort("127.0.0.1", strconv.Itoa(sa.(*syscall.SockaddrInet4).Port)), closeFD
}

func TestAppHTTP(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	r := startWatch(t, config.App{HTTP: srv.URL + "/healthz"})
	r.untilAlive(t)
	srv.Close()
	if got := r.gone(t); !strings.Contains(got, "connection refused") {
		t.Fatalf("reason = %q, want connection refused", got)
	}
}

func TestAppHTTPAnyStatusIsAlive(t *testing.T) {
	for _, status := range []int{http.StatusFound, http.StatusNotFound, http.StatusInternalServerError, http.StatusServiceUnavailable} {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if status == http.StatusFound {
					http.Redirect(w, r, "/elsewhere", status)
					return
				}
				w.WriteHeader(status)
			}))
			defer srv.Close()
			r := startWatch(t, config.App{HTTP: srv.URL})
			r.untilAlive(t)
		})
	}
}

// An app that stops answering (but still accepts) is gone after two
// timeouts in a row, not one.
func TestAppHTTPTimeout(t *testing.T) {
	release := make(chan struct{})
	var answered sync.Once
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hang := true
		answered.Do(func() { hang = false })
		if hang {
			select {
			case <-r.Context().Done():
			case <-release:
			}
		}
	}))
	defer srv.Close()
	defer close(release)

	r := startWatch(t, config.App{HTTP: srv.URL})
	r.untilAlive(t)
	if c := r.next(t); c.alive || !c.unsure {
		t.Fatalf("check = %+v, want an unsure failure", c)
	}
	if got := r.gone(t); !strings.Contains(got, "deadline exceeded") {
		t.Fatalf("reason = %q, want a timeout", got)
	}
}

func TestAppPID(t *testing.T) {
	cmd := startChild(t)
	r := startWatch(t, config.App{PID: cmd.Process.Pid})
	r.untilAlive(t)
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	// Killed or not yet, the child exists until reaped.
	for range 2 {
		if c := r.next(t); !c.alive {
			t.Fatalf("check = %+v, want alive until reaped", c)
		}
	}
	cmd.Wait()
	want := "pid " + strconv.Itoa(cmd.Process.Pid) + " exited"
	if got := r.gone(t); got != want {
		t.Fatalf("reason = %q, want %q", got, want)
	}
}

// An explicit PID that does not exist is gone at once: it cannot appear.
func TestAppPIDNeverExisted(t *testing.T) {
	pid := reapedPID(t)
	r := startWatch(t, config.App{PID: pid})
	select {
	case c := <-r.checks:
		if c.alive || !c.final {
			t.Fatalf("first check = %+v, want a final failure", c)
		}
	case <-time.After(appWait):
		t.Fatalf("no check within %v", appWait)
	}
	if got, want := r.gone(t), "pid "+strconv.Itoa(pid)+" exited"; got != want {
		t.Fatalf("reason = %q, want %q", got, want)
	}
}

func TestAppPIDFileRemoved(t *testing.T) {
	cmd := startChild(t)
	path := filepath.Join(t.TempDir(), "app.pid")
	writePIDFile(t, path, strconv.Itoa(cmd.Process.Pid)+"\n")
	r := startWatch(t, config.App{PIDFile: path})
	r.untilAlive(t)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if got, want := r.gone(t), "pid_file "+path+": removed"; got != want {
		t.Fatalf("reason = %q, want %q", got, want)
	}
}

func TestAppPIDFileNotYetUp(t *testing.T) {
	path := filepath.Join(t.TempDir(), "app.pid")
	dead := reapedPID(t)
	r := startWatch(t, config.App{PIDFile: path})
	// Before the app is seen alive, none of these is gone: no file yet, a
	// garbage file, and a stale file naming a process that has exited.
	r.notGone(t, 2, "removed")
	writePIDFile(t, path, "not a pid")
	r.untilFailure(t, "expected a process id")
	r.notGone(t, 2, "expected a process id")
	writePIDFile(t, path, strconv.Itoa(dead))
	r.untilFailure(t, "exited")
	r.notGone(t, 2, "exited")

	cmd := startChild(t)
	writePIDFile(t, path, " "+strconv.Itoa(cmd.Process.Pid)+"\n")
	r.untilAlive(t)
	// Now a file naming an exited process is gone.
	writePIDFile(t, path, strconv.Itoa(dead))
	want := "pid_file " + path + ": pid " + strconv.Itoa(dead) + " exited"
	if got := r.gone(t); got != want {
		t.Fatalf("reason = %q, want %q", got, want)
	}
}

// untilFailure receives checks until one fails mentioning seen, none making
// the app gone.
func (r *appRun) untilFailure(t *testing.T, seen string) {
	t.Helper()
	deadline := time.After(appWait)
	for {
		select {
		case c := <-r.checks:
			if !c.alive && strings.Contains(c.reason, seen) {
				return
			}
		case <-r.w.Done():
			t.Fatalf("app gone: %s", r.w.Reason())
		case <-deadline:
			t.Fatalf("no check saw %q within %v", seen, appWait)
		}
	}
}

// Cancelling the context ends the watcher without reporting the app gone.
func TestAppCancel(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	cmd := startChild(t)
	for _, cfg := range []config.App{
		{TCP: l.Addr().String()},
		{PID: cmd.Process.Pid},
		{TCP: "127.0.0.1:1"}, // never up
	} {
		r := startWatch(t, cfg)
		r.next(t)
		r.cancel()
		exited := make(chan struct{})
		go func() {
			r.w.Wait()
			close(exited)
		}()
		select {
		case <-exited:
		case <-time.After(appWait):
			t.Fatalf("%+v: Wait did not return within %v of cancel", cfg, appWait)
		}
		select {
		case <-r.w.Done():
			t.Fatalf("%+v: gone after cancel: %s", cfg, r.w.Reason())
		default:
		}
		if r.w.Reason() != "" {
			t.Fatalf("%+v: Reason() = %q after cancel", cfg, r.w.Reason())
		}
	}
}

// TestAppHelperProcess is the child process of the PID tests, not a test:
// it runs until its stdin closes (or it is killed).
func TestAppHelperProcess(t *testing.T) {
	if os.Getenv("EBB_APP_HELPER") != "1" {
		return
	}
	io.Copy(io.Discard, os.Stdin)
	os.Exit(0)
}

// startChild starts a process that runs until killed or the test ends.
func startChild(t *testing.T) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestAppHelperProcess$")
	cmd.Env = append(os.Environ(), "EBB_APP_HELPER=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		cmd.Process.Kill()
		cmd.Wait()
	})
	return cmd
}

// reapedPID returns the pid of a process that has exited and been reaped.
func reapedPID(t *testing.T) int {
	t.Helper()
	cmd := startChild(t)
	cmd.Process.Kill()
	cmd.Wait()
	return cmd.Process.Pid
}

// writePIDFile replaces path atomically, as careful daemons do.
func writePIDFile(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// recordLog is a slog.Handler that keeps the messages it is given.
type recordLog struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (h *recordLog) Enabled(context.Context, slog.Level) bool { return true }
func (h *recordLog) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *recordLog) WithGroup(string) slog.Handler            { return h }
func (h *recordLog) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, r)
	return nil
}

// count returns how many times msg was logged.
func (h *recordLog) count(msg string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, r := range h.recs {
		if r.Message == msg {
			n++
		}
	}
	return n
}

// want checks that the messages logged at level are exactly msgs, in order.
func (h *recordLog) want(t *testing.T, level slog.Level, msgs ...string) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	var got []string
	for _, r := range h.recs {
		if r.Level == level {
			got = append(got, r.Message)
		}
	}
	if strings.Join(got, "|") != strings.Join(msgs, "|") {
		t.Fatalf("log at %v = %q, want %q", level, got, msgs)
	}
}
