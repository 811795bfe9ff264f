package e2e

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/ebb-proxy/ebb/bench/peers"
)

// nginxProc is an nginx started by a test: a master process in the
// foreground (daemon off) with one worker, its configuration, pid file,
// temporary files and error log in a t.TempDir().
//
// Its listening socket is opened by the test and handed to nginx as an
// inherited socket (the NGINX environment variable nginx itself uses for a
// binary upgrade), so the address is known before nginx starts and no port
// is guessed; connections made before nginx is ready wait in the backlog.
// (With master_process off, nginx 1.22 crashes on an inherited socket, so
// the master stays on.)
//
// Everything is read-only after startNginx, except that done is closed and
// err set once the master has exited.
type nginxProc struct {
	t      *testing.T
	cmd    *exec.Cmd
	addr   string // host:port nginx listens on
	errLog string // path of the error log
	done   chan struct{}
	err    error // the master's exit, set before done is closed
}

// nginxPath returns nginx's path (see tool).
func nginxPath(t *testing.T) string {
	t.Helper()
	return tool(t, "nginx")
}

// startNginx starts nginx with the configuration site(listen) describes,
// listen being the address to put in the server's listen directive;
// startNginx sets the process's part (its directory, error log and
// worker's user). nginx is stopped (SIGQUIT, then SIGKILL of its process
// group past stopTimeout) at cleanup.
func startNginx(t *testing.T, site func(listen string) peers.Nginx) *nginxProc {
	t.Helper()
	bin := nginxPath(t)
	dir := t.TempDir()
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	f, err := ln.File()
	ln.Close() // f holds the socket
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close() // nginx has its own copy once started
	n := &nginxProc{t: t, addr: ln.Addr().String(), errLog: filepath.Join(dir, "error.log"), done: make(chan struct{})}

	conf := site(n.addr)
	conf.Dir, conf.TempDir, conf.ErrorLog, conf.ErrorLevel, conf.WorkerConnections = dir, dir, n.errLog, "notice", 1024
	// Run as root, the master would start its worker as nobody, which
	// cannot enter the test's temporary directory (mode 0700).
	if os.Geteuid() == 0 {
		conf.User = "root"
	}
	text, err := conf.Render()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(path, text, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-p", dir, "-e", n.errLog, "-c", path)
	cmd.ExtraFiles = []*os.File{f} // fd 3
	cmd.Env = append(os.Environ(), "NGINX=3;")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := os.Create(filepath.Join(dir, "stdout.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting nginx: %v", err)
	}
	n.cmd = cmd
	go func() {
		n.err = cmd.Wait()
		close(n.done)
	}()
	t.Cleanup(n.stop)
	return n
}

// stop asks nginx for a graceful stop and waits for it; past stopTimeout
// its process group (the master and its worker) is killed.
func (n *nginxProc) stop() {
	select {
	case <-n.done:
		return
	default:
	}
	n.cmd.Process.Signal(syscall.SIGQUIT)
	timeout, stopTimer := after(stopTimeout)
	defer stopTimer()
	select {
	case <-n.done:
	case <-timeout:
		n.t.Errorf("nginx did not stop within %s of SIGQUIT; killed. Its error log:\n%s", stopTimeout, n.log())
		syscall.Kill(-n.cmd.Process.Pid, syscall.SIGKILL)
		<-n.done
	}
}

// log returns nginx's error log (its last 32 KiB).
func (n *nginxProc) log() string {
	b, err := os.ReadFile(n.errLog)
	if err != nil {
		return "(no error log: " + err.Error() + ")"
	}
	if len(b) > 32<<10 {
		b = append([]byte("...\n"), b[len(b)-32<<10:]...)
	}
	return string(b)
}

// logErrors returns the lines of nginx's error log at level error or
// worse ([error], [crit], [alert], [emerg]).
func (n *nginxProc) logErrors() []string {
	b, _ := os.ReadFile(n.errLog)
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		for _, lvl := range []string{"[error]", "[crit]", "[alert]", "[emerg]"} {
			if strings.Contains(l, lvl) {
				out = append(out, l)
				break
			}
		}
	}
	return out
}
