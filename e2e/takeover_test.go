package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ebb-proxy/ebb/examples/loadgen"
)

// takeoverTail is how long the load goes on after the old ebb exited.
const takeoverTail = 300 * time.Millisecond

// takeoverYAML is the configuration of the takeover tests: one listener,
// the admin and the probes on ports the kernel chooses (a successor with
// the same file takes the same sockets: the configured strings match, in
// order), the takeover socket, and a short but complete drain timeline.
func takeoverYAML(origin, socket string) string {
	return strings.Replace(singleClusterYAML(origin), "admin: { address: 127.0.0.1:0 }", "admin: { address: 127.0.0.1:0, probe_address: 127.0.0.1:0 }", 1) +
		fmt.Sprintf(`takeover: { socket: %q }
drain:
  delay: 200ms
  spread: 500ms
  quiet: 200ms
  timeout: 15s
  http1: { idle_close: 200ms }
  http2: { goaway_grace: 300ms }
`, socket)
}

// startTakeoverLoad starts keep-alive load from every client kind, with
// new clients arriving all the time (a refused connection would fail
// one), on addr.
func startTakeoverLoad(t *testing.T, addr string) *loadgen.Load {
	t.Helper()
	l := startLoad(t, loadSpec{addr: addr, kinds: loadgen.Kinds, workers: 3, arrivals: 2, session: 3,
		request: mixedRequest, warmOK: 150, limit: 2 * time.Minute})
	recv(t, l.Warm(), "the load to warm up")
	return l
}

// checkTakeoverLoad stops the load, after it has run takeoverTail past the
// old ebb's exit, and checks that no client saw an error and that the
// successor served after that exit.
func checkTakeoverLoad(t *testing.T, l *loadgen.Load, trigger time.Time) {
	t.Helper()
	stopLoadAfterExit(t, l, takeoverTail, trigger, "start of the successor",
		"no request answered after the old ebb exited: the successor did not serve")
	checkEveryKindSent(t, l)
}

// checkDrainedExit checks that the old ebb exited 0, drained, having
// logged that it was taken over.
func checkDrainedExit(t *testing.T, old *ebbProc) {
	t.Helper()
	code, err := old.wait(stopTimeout)
	if err != nil || code != 0 {
		t.Fatalf("the old ebb: exit status %d (%v), want 0 after a takeover; its log:\n%s", code, err, old.logs())
	}
	if recs := old.logRecords("ebb exiting"); len(recs) != 1 || recs[0]["reason"] != "drained" {
		t.Errorf("the old ebb's exit lines %v, want one with reason drained", recs)
	}
	if recs := old.logRecords("takeover: the successor serves; stopping accepting and draining"); len(recs) != 1 {
		t.Errorf("the old ebb logged the takeover %d times, want once", len(recs))
	}
}

// TestTakeover is the hitless restart (docs/RESTART.md): under keep-alive
// load from every client kind, with new clients arriving all the time, a
// second ebb started with -takeover takes over the same ports (listener
// and admin); the old one stops accepting, drains and exits 0. No client
// sees an error, no connection is refused, and the successor serves on.
func TestTakeover(t *testing.T) {
	t.Parallel()
	origin := newOrigin(t, mixedOrigin(false))
	path := writeConfig(t, takeoverYAML(hostPort(origin), filepath.Join(t.TempDir(), "takeover.sock")))
	old := startEbbArgs(t, path, "run", "-config", path)
	addr := old.addr("public")
	l := startTakeoverLoad(t, addr)

	trigger := time.Now()
	succ := startEbbArgs(t, path, "run", "-config", path, "-takeover")
	if got := succ.addr("public"); got != addr {
		t.Fatalf("the successor listens on %s, want the old one's %s", got, addr)
	}
	if succ.admin != old.admin {
		t.Fatalf("the successor's admin is on %s, want the old one's %s", succ.admin, old.admin)
	}
	if got, want := startedField(t, succ, "probe"), startedField(t, old, "probe"); got != want || want == "" {
		t.Fatalf("the successor's probes are on %q, want the old one's %q", got, want)
	}
	checkDrainedExit(t, old)
	checkTakeoverLoad(t, l, trigger)
	if status, body, _ := get(t, adminClient, succ.adminURL("/ready")); status != http.StatusOK {
		t.Errorf("the successor's /ready: %d %s", status, body)
	}
	if recs := succ.logRecords("takeover: serving; the previous ebb drains"); len(recs) != 1 || int(recs[0]["pid"].(float64)) != old.pid() {
		t.Errorf("the successor's takeover lines %v, want one naming pid %d", recs, old.pid())
	}
}

// startedField returns field of e's "ebb started" line.
func startedField(t *testing.T, e *ebbProc, field string) string {
	t.Helper()
	recs := e.logRecords("ebb started")
	if len(recs) == 0 {
		t.Fatal("no \"ebb started\" line")
	}
	v, _ := recs[0][field].(string)
	return v
}

// TestTakeoverFails: a successor that cannot start changes nothing. One
// whose configuration does not load never asks for the sockets; one that
// fails after receiving them (a listener it cannot bind) tells the old
// ebb, which serves on and accepts as before; the next successor then
// takes over. Under load, no client sees an error throughout.
func TestTakeoverFails(t *testing.T) {
	t.Parallel()
	origin := newOrigin(t, mixedOrigin(false))
	dir := t.TempDir()
	yaml := takeoverYAML(hostPort(origin), filepath.Join(dir, "takeover.sock"))
	path := writeConfig(t, yaml)
	old := startEbbArgs(t, path, "run", "-config", path)
	l := startTakeoverLoad(t, old.addr("public"))

	// A configuration that fails validation.
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte(strings.Replace(yaml, "timeout: 15s", "timeout: soon", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	out := runFailingSuccessor(t, bad)
	if !strings.Contains(out, bad) || !strings.Contains(out, "drain.timeout") {
		t.Errorf("a successor with a bad file said:\n%s\nwant the file and the key named", out)
	}

	// A configuration that loads, with a listener on a port in use: the
	// successor has the sockets when its bind fails.
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	busy := filepath.Join(dir, "busy.yaml")
	extra := fmt.Sprintf("listeners:\n  - name: extra\n    address: %s\n    routes:\n      - match: { path_prefix: \"/\" }\n        cluster: app\n", held.Addr())
	if err := os.WriteFile(busy, []byte(strings.Replace(yaml, "listeners:\n", extra, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	out = runFailingSuccessor(t, busy)
	if !strings.Contains(out, held.Addr().String()) || !strings.Contains(out, "address already in use") {
		t.Errorf("a successor that cannot bind said:\n%s\nwant the address in use named", out)
	}
	awaitLogLine(t, old, "takeover: the successor failed to start; serving on")
	if recs := old.logRecords("takeover: the successor serves; stopping accepting and draining"); len(recs) != 0 {
		t.Fatalf("the old ebb took a failed successor for one that serves")
	}
	// The old ebb still accepts: new clients kept arriving, and one more.
	expectBody(t, &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}, old.url("public", "/after"), "get /after\n")

	trigger := time.Now()
	startEbbArgs(t, path, "run", "-config", path, "-takeover")
	checkDrainedExit(t, old)
	checkTakeoverLoad(t, l, trigger)
}

// runFailingSuccessor runs "ebb run -config path -takeover", which must
// exit 1, and returns what it printed.
func runFailingSuccessor(t *testing.T, path string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, ebbBin, "run", "-config", path, "-takeover")
	out, err := cmd.CombinedOutput()
	if cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != 1 {
		t.Fatalf("a successor that cannot start: %v, want exit status 1; it said:\n%s", err, out)
	}
	return string(out)
}

// TestTakeoverSIGUSR2 is the restart nginx's binary upgrade taught
// operators, under a service manager: an ebb started with NOTIFY_SOCKET
// (systemd's Type=notify) says READY=1; SIGUSR2 makes it start its own
// executable with -takeover, which takes over, tells the manager it is
// the main process now (MAINPID, READY=1), and serves; the old one drains
// and exits 0, with no client error.
func TestTakeoverSIGUSR2(t *testing.T) {
	t.Parallel()
	origin := newOrigin(t, mixedOrigin(false))
	dir := t.TempDir()
	path := writeConfig(t, takeoverYAML(hostPort(origin), filepath.Join(dir, "takeover.sock")))
	notify, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: filepath.Join(dir, "notify.sock"), Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer notify.Close()
	cmd := exec.Command(ebbBin, "run", "-config", path)
	cmd.Env = append(os.Environ(), "NOTIFY_SOCKET="+notify.LocalAddr().String())
	old := startEbbCmd(t, path, cmd)
	if got := readNotify(t, notify); got != "READY=1" {
		t.Fatalf("ebb told the service manager %q, want READY=1", got)
	}
	l := startTakeoverLoad(t, old.addr("public"))

	trigger := time.Now()
	old.signal(syscall.SIGUSR2)
	rec := awaitLogLine(t, old, "SIGUSR2: successor started; it takes over once it serves")
	pid := int(rec["pid"].(float64))
	// The successor is not this test's child but it started it: stopped
	// (before the old ebb's cleanup, which waits for the end of their
	// shared stderr) and checked to exit through its drain.
	t.Cleanup(func() {
		if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
			t.Errorf("stopping the successor (pid %d): %v", pid, err)
			return
		}
		timeout, stop := after(stopTimeout)
		defer stop()
		select {
		case <-old.done:
		case <-timeout:
			syscall.Kill(pid, syscall.SIGKILL)
			t.Errorf("the successor (pid %d) did not exit within %s of SIGTERM", pid, stopTimeout)
		}
		if recs := old.logRecords("ebb exiting"); len(recs) != 2 {
			t.Errorf("exit lines %v, want the old ebb's and the successor's", recs)
		}
	})
	if got, want := readNotify(t, notify), fmt.Sprintf("MAINPID=%d\nREADY=1", pid); got != want {
		t.Fatalf("the successor told the service manager %q, want %q", got, want)
	}
	// exited, not done: the successor still writes to the shared stderr.
	recv(t, old.exited, "the old ebb to exit")
	if old.exitCode != 0 {
		t.Fatalf("the old ebb exited with status %d, want 0; the log:\n%s", old.exitCode, old.logs())
	}
	checkTakeoverLoad(t, l, trigger)
}

// readNotify reads one sd_notify datagram.
func readNotify(t *testing.T, c *net.UnixConn) string {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(waitTimeout))
	buf := make([]byte, 4096)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatalf("reading from NOTIFY_SOCKET: %v", err)
	}
	return string(buf[:n])
}

// TestSocketActivation: ebb serves on a listening socket systemd passes
// (LISTEN_FDS, LISTEN_PID): a client that connected before ebb started,
// while only the socket existed, is answered once it runs.
func TestSocketActivation(t *testing.T) {
	t.Parallel()
	origin := newOrigin(t, mixedOrigin(false))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f, err := ln.(*net.TCPListener).File()
	ln.Close() // f holds the socket
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	addr := ln.Addr().String()
	early := make(chan error, 1)
	go func() {
		c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: startTimeout}
		resp, err := c.Get("http://" + addr + "/early")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				err = fmt.Errorf("status %d", resp.StatusCode)
			}
		}
		early <- err
	}()

	path := writeConfig(t, strings.Replace(singleClusterYAML(hostPort(origin)), "    address: 127.0.0.1:0", "    address: "+addr, 1))
	// systemd sets LISTEN_PID to the pid it starts; a shell that execs
	// keeps its own.
	args := append([]string{"-c", `export LISTEN_PID=$$ LISTEN_FDS=1 LISTEN_FDNAMES=http; exec "$0" "$@"`, ebbBin, "run", "-config", path}, quickDrain...)
	cmd := exec.Command("/bin/sh", args...)
	cmd.ExtraFiles = []*os.File{f}
	e := startEbbCmd(t, path, cmd)
	if got := e.addr("public"); got != addr {
		t.Fatalf("ebb listens on %s, want the socket passed at %s", got, addr)
	}
	if err := recv(t, early, "the request sent before ebb started"); err != nil {
		t.Fatalf("the request sent before ebb started: %v", err)
	}
	expectBody(t, http.DefaultClient, e.url("public", "/late"), "get /late\n")
	if recs := e.logRecords("a socket handed over is not in this configuration: closed"); len(recs) != 0 {
		t.Errorf("ebb closed the socket passed: %v", recs)
	}
}
