package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ebb-proxy/ebb/bench/peers"
)

// peerStopTimeout bounds nginx's and HAProxy's graceful stops
// (worker_shutdown_timeout, hard-stop-after): a WebSocket lasts until
// then, as neither closes one in its protocol. Kept short for the demo.
const peerStopTimeout = 3 * time.Second

// replica is one proxy process behind the VIPs.
type replica struct {
	name   string
	h1, h2 string // where its HTTP/1.1 and h2c clients connect (the same for ebb)
	cmd    *exec.Cmd
	stop   os.Signal // its graceful stop: what a kubelet's SIGTERM means to it
	exited chan struct{}
	code   int    // exit status, once exited; -1 when a signal killed it
	exit   string // how it ended, as "exited 0" or "killed by segmentation fault"
	log    string // its log file

	mu     sync.Mutex
	phases []string // ebb's drain phases, as "announce 0s"
	reason string   // ebb's exit reason
	report string   // ebb's drain.report
	ready  chan struct{}
}

// startedAfter waits for r to be ready, at most d.
func (r *replica) startedAfter(d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-r.ready:
		return nil
	case <-r.exited:
		return fmt.Errorf("%s %s before it was ready; its log: %s", r.name, r.exit, r.log)
	case <-t.C:
		return fmt.Errorf("%s was not ready after %s", r.name, d)
	}
}

// wait waits for r's exit, at most d, then kills it.
func (r *replica) wait(d time.Duration) (time.Duration, error) {
	start := time.Now()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-r.exited:
		return time.Since(start), nil
	case <-t.C:
		r.cmd.Process.Kill()
		<-r.exited
		return time.Since(start), fmt.Errorf("%s still running %s after its stop signal: killed", r.name, d)
	}
}

// run starts r's command, its log going to logPath; onLine, if set, sees
// each line of its stderr.
func (r *replica) run(logPath string, onLine func(string)) error {
	logf, err := os.Create(logPath)
	if err != nil {
		return err
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		logf.Close()
		return err
	}
	r.cmd.Stderr, r.cmd.Stdout = pw, logf
	r.exited = make(chan struct{})
	r.log = logPath
	if err := r.cmd.Start(); err != nil {
		pw.Close()
		pr.Close()
		logf.Close()
		return err
	}
	pw.Close()
	read := make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			fmt.Fprintln(logf, sc.Text())
			if onLine != nil {
				onLine(sc.Text())
			}
		}
		pr.Close()
	}()
	go func() {
		err := r.cmd.Wait()
		<-read
		logf.Close()
		r.exit = "exited 0"
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			r.code = ee.ExitCode()
			r.exit = fmt.Sprintf("exited %d", r.code)
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				r.exit = "killed by " + ws.Signal().String()
			}
		} else if err != nil {
			r.code, r.exit = -1, err.Error()
		}
		close(r.exited)
	}()
	return nil
}

// startEbb starts an ebb replica in front of origins, configured for a
// pod whose endpoint removal takes up to a second to propagate: the
// announce phase lasts a second, connections get their close signal over
// the next (a WebSocket's is a close frame with status 1001, its
// handshake given a second), and the report is written to dir at exit.
func startEbb(bin, dir, name string, origins []string, sets []string) (*replica, error) {
	report := filepath.Join(dir, name+"-drain.html")
	cfg := fmt.Sprintf(`admin: { address: 127.0.0.1:0 }
listeners:
  - name: public
    address: 127.0.0.1:0
    routes:
      - match: { path_prefix: "/" }
        cluster: app
clusters:
  - name: app
    discovery: { static: [%s] }
drain:
  delay: 1s
  spread: 1s
  quiet: 500ms
  timeout: 15s
  http1: { idle_close: 300ms }
  http2: { goaway_grace: 300ms }
  websocket: { close: at_signal, grace: 1s }
  report: %q
reload: { watch: false }
telemetry: { log: { format: json } }
`, quoteAll(origins), report)
	path := filepath.Join(dir, name+".yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	args := []string{"run", "-config", path}
	for _, s := range sets {
		args = append(args, "-set", s)
	}
	r := &replica{name: name, cmd: exec.Command(bin, args...), stop: syscall.SIGTERM, ready: make(chan struct{})}
	once := false
	err := r.run(filepath.Join(dir, name+".log"), func(line string) {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) != nil {
			return
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		switch rec["msg"] {
		case "listening":
			r.h1, _ = rec["address"].(string)
			r.h2 = r.h1 // one port: ebb tells HTTP/2 from HTTP/1 by the preface
		case "ebb started":
			if !once {
				once = true
				close(r.ready)
			}
		case "drain phase":
			r.phases = append(r.phases, fmt.Sprintf("%s %v", rec["phase"], rec["since_trigger"]))
		case "drain finished":
			r.reason, _ = rec["reason"].(string)
		case "drain report written":
			r.report, _ = rec["path"].(string)
		}
	})
	return r, err
}

// startNginx starts an nginx replica: one port for HTTP/1.1, one for h2c
// (nginx 1.22 does not tell them apart on one cleartext port), upstream
// keep-alive, WebSockets passed on. Its graceful stop is SIGQUIT, bounded
// by worker_shutdown_timeout: the WebSockets still open then are cut.
func startNginx(bin, dir, name string, origins []string) (*replica, error) {
	h1, h2, err := twoPorts()
	if err != nil {
		return nil, err
	}
	prefix := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Join(prefix, "logs"), 0o755); err != nil {
		return nil, err
	}
	pass := []peers.Location{{Match: "/", Pass: "origins", WebSocket: true}}
	cfg, err := peers.Nginx{
		Dir: prefix, TempDir: prefix, ErrorLog: "stderr", ErrorLevel: "notice",
		WorkerConnections: 1024, WorkerShutdownTimeout: peerStopTimeout,
		Upstreams: []peers.Upstream{{Name: "origins", Servers: origins, Keepalive: 32}},
		Servers:   []peers.Server{{Listen: h1, Locations: pass}, {Listen: h2, Proto: peers.H2C, Locations: pass}},
	}.Render()
	if err != nil {
		return nil, err
	}
	path := filepath.Join(prefix, "nginx.conf")
	if err := os.WriteFile(path, cfg, 0o644); err != nil {
		return nil, err
	}
	r := &replica{name: name, h1: h1, h2: h2, cmd: exec.Command(bin, "-p", prefix, "-c", path), stop: syscall.SIGQUIT, ready: make(chan struct{})}
	if err := r.run(prefix+".log", nil); err != nil {
		return nil, err
	}
	go r.awaitPorts()
	return r, nil
}

// startHAProxy starts an HAProxy replica: one port for HTTP/1.1 (and h2c
// by its preface), one for h2c only, upstream keep-alive, WebSockets
// passed on (as HTTP mode does by default). Its graceful stop is SIGUSR1
// (soft-stop), bounded by hard-stop-after: the WebSockets still open
// then are cut.
func startHAProxy(bin, dir, name string, origins []string) (*replica, error) {
	h1, h2, err := twoPorts()
	if err != nil {
		return nil, err
	}
	servers := make([]peers.BackendServer, len(origins))
	for i, o := range origins {
		servers[i] = peers.BackendServer{Name: fmt.Sprintf("o%d", i), Addr: o}
	}
	cfg, err := peers.HAProxy{
		GlobalMaxConn: 4096, HardStopAfter: peerStopTimeout, ReuseAlways: true,
		Timeouts:  peers.Timeouts{Connect: 2 * time.Second, Client: 30 * time.Second, Server: 30 * time.Second, HTTPKeepAlive: 30 * time.Second},
		Frontends: []peers.Frontend{{Name: "fe", Binds: []peers.Bind{{Addr: h1}, {Addr: h2, Proto: peers.H2C}}, Backend: "origins"}},
		Backends:  []peers.Backend{{Name: "origins", Balance: "roundrobin", Servers: servers}},
	}.Render()
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, name+".cfg")
	if err := os.WriteFile(path, cfg, 0o644); err != nil {
		return nil, err
	}
	r := &replica{name: name, h1: h1, h2: h2, cmd: exec.Command(bin, "-db", "-f", path), stop: syscall.SIGUSR1, ready: make(chan struct{})}
	if err := r.run(filepath.Join(dir, name+".log"), nil); err != nil {
		return nil, err
	}
	go r.awaitPorts()
	return r, nil
}

// awaitPorts marks r ready once both its ports accept (nginx and HAProxy
// log nothing that says so).
func (r *replica) awaitPorts() {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-r.exited:
			return
		case <-tick.C:
		}
		ok := true
		for _, a := range []string{r.h1, r.h2} {
			c, err := net.DialTimeout("tcp", a, time.Second)
			if err != nil {
				ok = false
				break
			}
			c.Close()
		}
		if ok {
			close(r.ready)
			return
		}
	}
}

// twoPorts returns two loopback addresses free a moment ago.
func twoPorts() (string, string, error) {
	var addrs []string
	for range 2 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", "", err
		}
		defer ln.Close()
		addrs = append(addrs, ln.Addr().String())
	}
	return addrs[0], addrs[1], nil
}

func quoteAll(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = fmt.Sprintf("%q", s)
	}
	return strings.Join(q, ", ")
}

// findBinary looks for a peer's binary on $PATH and in /usr/sbin.
func findBinary(name string) string {
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	if p := "/usr/sbin/" + name; isExecutable(p) {
		return p
	}
	return ""
}

func isExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
}

// buildEbb builds ebb from the module this program is in.
func buildEbb(ctx context.Context, dir string) (string, error) {
	root, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(root, "go.mod")); err == nil {
			break
		}
		up := filepath.Dir(root)
		if up == root {
			return "", errors.New("not inside ebb's module: run it from the repository (go run ./examples/rolling-restart), or pass -ebb")
		}
		root = up
	}
	bin := filepath.Join(dir, "ebb-bin")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/ebb")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/ebb: %v\n%s", err, out)
	}
	return bin, nil
}
