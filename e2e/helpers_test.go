package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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

	"github.com/ebb-proxy/ebb/proxy/proxytest"
)

// ebbBin is the path of the ebb binary built by TestMain.
var ebbBin string

// Generous upper bounds: they only decide how long a broken ebb can make a
// test hang, never the order of events.
const (
	startTimeout = 20 * time.Second
	stopTimeout  = 30 * time.Second
	waitTimeout  = 15 * time.Second
)

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	root, err := moduleRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	dir, err := os.MkdirTemp("", "ebb-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	ebbBin = filepath.Join(dir, "ebb")
	build := exec.Command("go", "build", "-o", ebbBin, "./cmd/ebb")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: building ebb: %v\n%s", err, out)
		return 1
	}
	return m.Run()
}

// moduleRoot walks up from the working directory to the directory holding
// go.mod.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}

// ebbProc is a running ebb process.
type ebbProc struct {
	t         *testing.T
	cmd       *exec.Cmd
	config    string            // path of the configuration file
	listeners map[string]string // listener name -> host:port
	admin     string            // admin host:port

	mu    sync.Mutex
	lines []string // stderr, one log line each
	// logged is closed, and replaced, whenever a line is added to lines
	// (see awaitLogLine).
	logged chan struct{}

	// exited is closed once the process has exited; done once, in
	// addition, its stderr is read to the end (a successor it started
	// writes to the same stderr: see TestTakeoverSIGUSR2).
	exited   chan struct{}
	done     chan struct{}
	exitCode int       // set before exited is closed
	exitTime time.Time // when the exit was seen; set before exited is closed
	stopped  bool      // stop has run
}

// writeConfig writes a configuration file into a fresh temporary directory
// and returns its path.
func writeConfig(t *testing.T, yaml string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ebb.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// startEbb writes yaml to a file, starts "ebb run -config FILE", waits for
// its "ebb started" log line and learns the bound addresses from the log.
// At cleanup it stops ebb with SIGTERM and checks a clean exit.
//
// A configuration without a drain section gets a quick drain (no spread,
// no minimum duration, short quiet and idle close): those tests are about
// something else, and the default timeline (tuned for a Kubernetes pod)
// would add seconds to each. Drain tests write their own drain section.
func startEbb(t *testing.T, yaml string) *ebbProc {
	t.Helper()
	path := writeConfig(t, yaml)
	args := []string{"run", "-config", path}
	if !strings.Contains(yaml, "\ndrain:") {
		args = append(args, quickDrain...)
	}
	return startEbbArgs(t, path, args...)
}

// quickDrain are the -set flags of startEbb's quick drain.
var quickDrain = []string{
	"-set", "drain.spread=0s", "-set", "drain.min_duration=0s", "-set", "drain.quiet=50ms",
	"-set", "drain.http1.idle_close=50ms",
}

func startEbbArgs(t *testing.T, path string, args ...string) *ebbProc {
	t.Helper()
	return startEbbCmd(t, path, exec.Command(ebbBin, args...))
}

// startEbbCmd is startEbbArgs for a command prepared by the caller (its
// environment, its extra files).
func startEbbCmd(t *testing.T, path string, cmd *exec.Cmd) *ebbProc {
	t.Helper()
	// A pipe of our own rather than StderrPipe: Wait then returns at the
	// exit, even while a successor ebb started keeps the pipe open.
	stderr, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = w
	err = cmd.Start()
	w.Close()
	if err != nil {
		stderr.Close()
		t.Fatal(err)
	}
	e := &ebbProc{t: t, cmd: cmd, config: path, listeners: map[string]string{}, logged: make(chan struct{}),
		exited: make(chan struct{}), done: make(chan struct{})}
	started := make(chan struct{})
	read := make(chan struct{})
	go func() {
		defer close(read)
		defer stderr.Close()
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		once := false
		for sc.Scan() {
			line := sc.Text()
			var rec map[string]any
			_ = json.Unmarshal([]byte(line), &rec)
			e.mu.Lock()
			e.lines = append(e.lines, line)
			close(e.logged)
			e.logged = make(chan struct{})
			switch rec["msg"] {
			case "listening":
				name, _ := rec["listener"].(string)
				addr, _ := rec["address"].(string)
				e.listeners[name] = addr
			case "ebb started":
				e.admin, _ = rec["admin"].(string)
				if !once {
					once = true
					close(started)
				}
			}
			e.mu.Unlock()
		}
		io.Copy(io.Discard, stderr)
	}()
	go func() {
		err := cmd.Wait()
		exitTime := time.Now()
		code := 0
		if err != nil {
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code = ee.ExitCode()
			} else {
				code = -1
			}
		}
		e.mu.Lock()
		e.exitCode = code
		e.exitTime = exitTime
		e.mu.Unlock()
		close(e.exited)
		<-read
		close(e.done)
	}()
	t.Cleanup(func() { e.stop() })

	timer := time.NewTimer(startTimeout)
	defer timer.Stop()
	select {
	case <-started:
	case <-e.done:
		t.Fatalf("ebb exited with status %d before starting; its log:\n%s", e.exitCode, e.logs())
	case <-timer.C:
		t.Fatalf("ebb did not log \"ebb started\" within %s; its log:\n%s", startTimeout, e.logs())
	}
	return e
}

// stop sends SIGTERM, waits for the exit and checks that ebb drained
// cleanly (status 0) and logged no error. Safe to call more than once.
func (e *ebbProc) stop() {
	t := e.t
	t.Helper()
	if e.stopped {
		return
	}
	e.stopped = true
	code, err := e.terminate()
	if err != nil {
		t.Errorf("%v; its log:\n%s", err, e.logs())
		return
	}
	if code != 0 {
		t.Errorf("ebb exited with status %d after SIGTERM, want 0 (clean drain); its log:\n%s", code, e.logs())
	}
	if errs := e.logsAt("ERROR"); len(errs) > 0 {
		t.Errorf("ebb logged errors:\n%s", strings.Join(errs, "\n"))
	}
}

// terminate sends SIGTERM and returns the exit status. If ebb does not exit
// within stopTimeout it is killed and an error is returned.
func (e *ebbProc) terminate() (int, error) {
	select {
	case <-e.exited:
		return e.wait(stopTimeout)
	default:
	}
	if err := e.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return 0, fmt.Errorf("signalling ebb: %w", err)
	}
	return e.wait(stopTimeout)
}

// wait waits up to d for ebb to exit and returns its exit status; past d
// ebb is killed and an error is returned.
func (e *ebbProc) wait(d time.Duration) (int, error) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-e.done:
		return e.exitCode, nil
	case <-timer.C:
		e.cmd.Process.Kill()
		<-e.done
		return e.exitCode, fmt.Errorf("ebb did not exit within %s; killed", d)
	}
}

// signal sends sig to ebb.
func (e *ebbProc) signal(sig os.Signal) {
	e.t.Helper()
	if err := e.cmd.Process.Signal(sig); err != nil {
		e.t.Fatalf("signalling ebb: %v", err)
	}
}

// exit waits for ebb to exit (it is killed past stopTimeout) and returns
// its exit status; the cleanup then checks nothing more about the exit.
func (e *ebbProc) exit() int {
	e.t.Helper()
	e.stopped = true
	code, err := e.wait(stopTimeout)
	if err != nil {
		e.t.Fatalf("%v; its log:\n%s", err, e.logs())
	}
	return code
}

func (e *ebbProc) logs() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return strings.Join(e.lines, "\n")
}

// logsAt returns the log lines at the given level.
func (e *ebbProc) logsAt(level string) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for _, l := range e.lines {
		var rec map[string]any
		if json.Unmarshal([]byte(l), &rec) == nil && rec["level"] == level {
			out = append(out, l)
		}
	}
	return out
}

// logRecords returns the decoded log lines whose msg is msg.
func (e *ebbProc) logRecords(msg string) []map[string]any {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []map[string]any
	for _, l := range e.lines {
		var rec map[string]any
		if json.Unmarshal([]byte(l), &rec) == nil && rec["msg"] == msg {
			out = append(out, rec)
		}
	}
	return out
}

// addr returns the address of the named listener.
func (e *ebbProc) addr(listener string) string {
	e.t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	a, ok := e.listeners[listener]
	if !ok {
		e.t.Fatalf("ebb logged no address for listener %q", listener)
	}
	return a
}

// url returns http://ADDR+path for the named listener.
func (e *ebbProc) url(listener, path string) string {
	return "http://" + e.addr(listener) + path
}

func (e *ebbProc) adminURL(path string) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return "http://" + e.admin + path
}

func (e *ebbProc) pid() int { return e.cmd.Process.Pid }

// procStatusKiB reads a field such as VmRSS or VmHWM from
// /proc/PID/status, in KiB.
func procStatusKiB(t *testing.T, pid int, field string) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			f := strings.Fields(rest)
			if len(f) != 2 || f[1] != "kB" {
				t.Fatalf("unexpected /proc status line %q", line)
			}
			n, err := strconv.ParseInt(f[0], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// newOrigin starts a real net/http server on 127.0.0.1:0, closed at
// cleanup.
func newOrigin(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// newUnstartedOrigin is newOrigin for a server the test configures before
// calling Start.
func newUnstartedOrigin(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// hostPort returns the host:port of an httptest server.
func hostPort(srv *httptest.Server) string {
	return srv.Listener.Addr().String()
}

func get(t *testing.T, c *http.Client, url string) (int, []byte, *http.Response) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	return do(t, c, req)
}

// curlPath returns curl's path (see tool).
func curlPath(t *testing.T) string {
	t.Helper()
	return tool(t, "curl")
}

// curlResult is what one curl run produced.
type curlResult struct {
	status int    // from -w '%{http_code}'
	body   []byte // the response body
	stderr string // curl's -v trace, when asked for
}

// runCurl runs curl with args plus options that write the body to a file
// and the status to stdout. It fails the test if curl fails.
func runCurl(t *testing.T, args ...string) curlResult {
	t.Helper()
	out := filepath.Join(t.TempDir(), "curl-body")
	full := append([]string{"-sS", "--max-time", "60", "-o", out, "-w", "%{http_code}"}, args...)
	cmd := exec.Command(curlPath(t), full...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("curl %s: %v\nstderr:\n%s", strings.Join(args, " "), err, stderr.String())
	}
	status, err := strconv.Atoi(strings.TrimSpace(stdout.String()))
	if err != nil {
		t.Fatalf("curl %s: status %q: %v", strings.Join(args, " "), stdout.String(), err)
	}
	body, err := os.ReadFile(out)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return curlResult{status: status, body: body, stderr: stderr.String()}
}

// recv waits for a value on ch, failing the test after waitTimeout.
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	timeout, stop := after(waitTimeout)
	defer stop()
	select {
	case v := <-ch:
		return v
	case <-timeout:
		t.Fatalf("timed out after %s waiting for %s", waitTimeout, what)
		var zero T
		return zero
	}
}

// adminClient talks to admin servers without keeping connections open
// across tests.
var adminClient = &http.Client{
	Transport: &http.Transport{DisableKeepAlives: true},
	Timeout:   waitTimeout,
}

// metricSample is one line of the Prometheus text format.
type metricSample struct {
	name   string
	labels map[string]string
	value  float64
}

// scrape reads the admin /metrics and parses every sample.
func scrape(t *testing.T, e *ebbProc) []metricSample {
	t.Helper()
	status, body, _ := get(t, adminClient, e.adminURL("/metrics"))
	if status != http.StatusOK {
		t.Fatalf("/metrics: status %d", status)
	}
	var out []metricSample
	for _, line := range strings.Split(string(body), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		s, err := parseSample(line)
		if err != nil {
			t.Fatalf("/metrics line %q: %v", line, err)
		}
		out = append(out, s)
	}
	return out
}

func parseSample(line string) (metricSample, error) {
	s := metricSample{labels: map[string]string{}}
	i := strings.LastIndexByte(line, ' ')
	if i < 0 {
		return s, errors.New("no value")
	}
	v, err := strconv.ParseFloat(line[i+1:], 64)
	if err != nil {
		return s, err
	}
	s.value = v
	series := line[:i]
	open := strings.IndexByte(series, '{')
	if open < 0 {
		s.name = series
		return s, nil
	}
	s.name = series[:open]
	rest := strings.TrimSuffix(series[open+1:], "}")
	for rest != "" {
		eq := strings.IndexByte(rest, '=')
		if eq < 0 || len(rest) < eq+2 || rest[eq+1] != '"' {
			return s, fmt.Errorf("bad labels %q", rest)
		}
		key := rest[:eq]
		rest = rest[eq+2:]
		var val strings.Builder
		j := 0
		for ; j < len(rest) && rest[j] != '"'; j++ {
			if rest[j] == '\\' && j+1 < len(rest) {
				j++
			}
			val.WriteByte(rest[j])
		}
		s.labels[key] = val.String()
		rest = strings.TrimPrefix(rest[min(j+1, len(rest)):], ",")
	}
	return s, nil
}

// metricValue returns the value of the sample named name whose labels are
// exactly labels, and whether there is one.
func metricValue(samples []metricSample, name string, labels map[string]string) (float64, bool) {
	for _, s := range samples {
		if s.name != name || len(s.labels) != len(labels) {
			continue
		}
		match := true
		for k, v := range labels {
			if s.labels[k] != v {
				match = false
				break
			}
		}
		if match {
			return s.value, true
		}
	}
	return 0, false
}

// The helpers the behaviour tests share with the proxy package's.
var (
	randReader   = proxytest.RandReader
	randBytes    = proxytest.RandBytes
	streamSHA256 = proxytest.StreamSHA256
	after        = proxytest.After
	newClient    = proxytest.NewClient
	do           = proxytest.Do
	rawConn      = proxytest.RawConn
	rawExchange  = proxytest.RawExchange
)
