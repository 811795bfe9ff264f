package e2e

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ebb-proxy/ebb/examples/loadgen"
)

// Drain scenario (d), the watched application exits. The helpers the
// scenarios share are in drain_scenarios_test.go.

// buildScenarioApp builds the application of TestDrainAppGone,
// testdata/scenarioapp, into a temporary directory and returns the
// binary's path.
func buildScenarioApp(t *testing.T) string {
	t.Helper()
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "app")
	cmd := exec.Command("go", "build", "-o", bin, "./e2e/testdata/scenarioapp")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the app: %v\n%s", err, out)
	}
	return bin
}

// appControl is the test's side of the app's control calls.
type appControl struct {
	url      string
	up       chan int      // the app's pid, once it listens
	hold     *gate         // the app's /hold requests wait here
	stopping chan struct{} // the app closed its port on SIGTERM
}

func newAppControl(t *testing.T) *appControl {
	c := &appControl{up: make(chan int, 1), hold: newGate(), stopping: make(chan struct{}, 1)}
	srv := newOrigin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/up":
			pid, _ := strconv.Atoi(r.URL.Query().Get("pid"))
			c.up <- pid
		case "/hold":
			c.hold.wait(r.Context())
		case "/stopping":
			c.stopping <- struct{}{}
		}
	}))
	t.Cleanup(c.hold.open)
	c.url = srv.URL
	return c
}

// reservePort returns a loopback address on which the test holds a bound
// socket (not listening, SO_REUSEADDR) so that no other test's listener on
// port 0 gets it before the app binds it; release closes that socket.
func reservePort(t *testing.T) (addr string, release func()) {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	release = func() { once.Do(func() { syscall.Close(fd) }) }
	t.Cleanup(release)
	if err := syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port), release
}

// startEbbRunApp starts "ebb run -config F -- APP", APP being appBin on a
// port of its own with a new appControl, and waits for the app to listen;
// it returns ebb, the app's control and its pid.
func startEbbRunApp(t *testing.T, appBin string) (*ebbProc, *appControl, int) {
	t.Helper()
	ctl := newAppControl(t)
	addr, releasePort := reservePort(t)
	path := writeConfig(t, singleClusterYAML(addr)+scenarioDrain(10*time.Second))
	e := startEbbArgs(t, path, "run", "-config", path, "--", appBin, "-addr", addr, "-ctl", ctl.url)
	pid := recv(t, ctl.up, "the app to start")
	releasePort()
	return e, ctl, pid
}

// TestDrainAppGone makes the watched application exit with a request in
// flight through ebb; ebb's drain starts with cause "application gone" and
// ebb exits 0 (app gone) within 1 s after that request's response
// completed at the client, not before.
//
//   - child: "ebb run -config F -- APP": the app gets SIGTERM (not ebb),
//     closes its port, finishes the request it holds, then exits.
//   - pid_file: the app is started by the test and watched through
//     drain.app.pid_file; it exits at once on SIGTERM, while a request to
//     another cluster is still in flight through ebb.
//   - child_ebb_signalled: "ebb run -- APP" gets SIGTERM itself, the usual
//     case in a pod, under keep-alive load until T+delay (the announce
//     window, in which endpoints are still being removed): zero client
//     errors. ebb passes the signal on to the app only once it has
//     drained, so the app serves everything ebb still receives.
func TestDrainAppGone(t *testing.T) {
	t.Parallel()
	appBin := buildScenarioApp(t)

	t.Run("child", func(t *testing.T) {
		t.Parallel()
		e, ctl, pid := startEbbRunApp(t, appBin)
		client := newClient(t)
		if status, body, _ := get(t, client, e.url("public", "/")); status != 200 || string(body) != "app\n" {
			t.Fatalf("GET / through ebb: %d %q, want 200 \"app\\n\"", status, body)
		}
		held := getHeld(t, client, e.url("public", "/hold"), 0)
		recv(t, ctl.hold.arrived, "the request to reach the app")

		if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
			t.Fatalf("signalling the app (pid %d): %v", pid, err)
		}
		recv(t, ctl.stopping, "the app to close its port")
		// The app is still finishing its request: nothing has started
		// ebb's drain yet.
		holdUntil(t, time.Now().Add(200*time.Millisecond), e.done, "ebb exited while the app was finishing a request")
		if status, _, _ := get(t, adminClient, e.adminURL("/ready")); status != 200 {
			t.Errorf("/ready %d while the app is still running, want 200", status)
		}
		ctl.hold.open()
		r := recv(t, held, "the held request to finish")
		want := fmt.Sprintf("held, then answered by pid %d\n", pid)
		if r.err != nil || r.status != 200 || r.body != want {
			t.Fatalf("held request: %d %q %v; want 200 %q", r.status, r.body, r.err, want)
		}
		checkAppGoneExit(t, e, r.at)
	})

	t.Run("pid_file", func(t *testing.T) {
		t.Parallel()
		ctl := newAppControl(t)
		ext, extHold := gatedOrigin(t, "", func(w http.ResponseWriter, _ *http.Request, opened bool) {
			if opened {
				io.WriteString(w, "ext finished\n")
			}
		})

		addr, releasePort := reservePort(t)
		app := exec.Command(appBin, "-addr", addr, "-ctl", ctl.url)
		app.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		app.Stderr = os.Stderr
		if err := app.Start(); err != nil {
			t.Fatal(err)
		}
		// Reaped at once: a zombie counts as alive.
		appDone := make(chan struct{})
		var appErr error
		go func() {
			appErr = app.Wait()
			close(appDone)
		}()
		t.Cleanup(func() {
			app.Process.Kill()
			<-appDone
		})
		pid := recv(t, ctl.up, "the app to start")
		releasePort()
		pidFile := filepath.Join(t.TempDir(), "app.pid")
		if err := os.WriteFile(pidFile, []byte(strconv.Itoa(pid)+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		e := startEbb(t, fmt.Sprintf(`
admin: { address: 127.0.0.1:0 }
listeners:
  - name: public
    address: 127.0.0.1:0
    routes:
      - { match: { path_prefix: "/ext/" }, cluster: ext }
      - { match: { path_prefix: "/" }, cluster: app }
clusters:
  - name: app
    discovery: { static: [%q] }
  - name: ext
    discovery: { static: [%q] }
`, addr, hostPort(ext))+scenarioDrain(10*time.Second, fmt.Sprintf("  app: { pid_file: %q, interval: 100ms }", pidFile)))
		awaitLogLine(t, e, "application is up")
		client := newClient(t)
		if status, body, _ := get(t, client, e.url("public", "/")); status != 200 || string(body) != "app\n" {
			t.Fatalf("GET / through ebb: %d %q, want 200 \"app\\n\"", status, body)
		}
		held := getHeld(t, newClient(t), e.url("public", "/ext/slow"), 0)
		recv(t, extHold.arrived, "the request to reach the other cluster")

		if err := app.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		recv(t, ctl.stopping, "the app to close its port")
		recv(t, appDone, "the app to exit")
		if appErr != nil {
			t.Fatalf("the app exited with %v, want status 0", appErr)
		}
		if status, body := pollReady(t, e); status != 503 {
			t.Fatalf("/ready %d %q after the app exited, want 503 (drain started)", status, body)
		}
		// The app is gone but a request is in flight: ebb must wait.
		holdUntil(t, time.Now().Add(300*time.Millisecond), e.done, "ebb exited with a request in flight")
		extHold.open()
		r := recv(t, held, "the held request to finish")
		if r.err != nil || r.status != 200 || r.body != "ext finished\n" {
			t.Fatalf("held request: %d %q %v; want 200 \"ext finished\\n\"", r.status, r.body, r.err)
		}
		checkAppGoneExit(t, e, r.at)
	})

	t.Run("child_ebb_signalled", func(t *testing.T) {
		t.Parallel()
		e, _, _ := startEbbRunApp(t, appBin)

		// Keep-alive load: 3 workers, each over its own connection, every
		// answer "app\n"; warm once each could have sent 5.
		load := startLoad(t, loadSpec{addr: e.addr("public"), kinds: []loadgen.Kind{loadgen.GoHTTP1PerWorker}, workers: 3,
			request: func(int, int, bool) loadgen.Request {
				return loadgen.Request{Method: http.MethodGet, Path: "/", Want: "app\n"}
			},
			warmOK: 15, limit: stopTimeout})
		recv(t, load.Warm(), "the load to start")
		trigger := time.Now()
		e.signal(syscall.SIGTERM)
		// Clients keep coming for the announce window, then move away.
		holdUntil(t, trigger.Add(scnDelay), nil, "")
		load.Stop()
		exitAt := awaitExit(t, e, "ebb to exit")
		code := e.exit()
		res := load.Results()
		t.Logf("%d requests answered; ebb exited at T+%s", res.OK, exitAt.Sub(trigger).Round(time.Millisecond))
		if len(res.Fails) > 0 {
			t.Errorf("%d requests failed in the announce window, want 0; first:\n%s\nebb's log:\n%s",
				len(res.Fails), formatFailures(res.Fails, trigger, 8), e.logs())
		}
		if code != 0 {
			t.Errorf("exit status %d, want 0", code)
		}
		if d := exitAt.Sub(trigger); d < scnDelay {
			t.Errorf("ebb exited at T+%s, inside its announce window (delay %s)", d, scnDelay)
		}
	})
}

// checkAppGoneExit checks that ebb, its application gone, exited with
// status 0 (reason app_gone, nothing forced) within 1 s after the request
// in flight completed at the client (at done).
func checkAppGoneExit(t *testing.T, e *ebbProc, done time.Time) {
	t.Helper()
	exitAt := awaitExit(t, e, "ebb to exit after the app")
	code := e.exit()
	t.Logf("ebb exited %s after the held response completed", exitAt.Sub(done).Round(time.Millisecond))
	if code != 0 {
		t.Errorf("exit status %d, want 0 (app gone); log:\n%s", code, e.logs())
	}
	if d := exitAt.Sub(done); d > time.Second {
		t.Errorf("ebb exited %s after the request in flight finished, want within 1s", d)
	}
	checkAppGoneCause(t, e)
	if f := checkDrainEnd(t, e, "app_gone"); f != 0 {
		t.Errorf("forced_closes %v, want 0", f)
	}
}

// checkAppGoneCause checks that the drain was started by the application's
// exit.
func checkAppGoneCause(t *testing.T, e *ebbProc) {
	t.Helper()
	recs := e.logRecords("drain started")
	if len(recs) != 1 {
		t.Errorf("\"drain started\" lines %v, want one", recs)
		return
	}
	if cause, _ := recs[0]["cause"].(string); !strings.HasPrefix(cause, "application gone") {
		t.Errorf("drain started with cause %q, want \"application gone: ...\"", cause)
	}
}
