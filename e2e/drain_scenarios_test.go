package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// The drain scenarios of issue 4, item 11 b–e: an outbound listener used
// by the local app through the drain, nginx as a WAF in front of two
// replicas, the watched application exiting, and the deadline. Each writes
// its own drain section with small but realistic numbers, so that a
// scenario takes a few seconds; every assertion on errors is exact.
const (
	scnDelay     = 300 * time.Millisecond
	scnSpread    = 500 * time.Millisecond
	scnQuiet     = 300 * time.Millisecond
	scnIdleClose = 200 * time.Millisecond
)

// scenarioDrain returns the drain section of these scenarios with the
// given timeout; extra lines go inside the section, as written (two-space
// indent).
func scenarioDrain(timeout time.Duration, extra ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "drain:\n  delay: %s\n  spread: %s\n  quiet: %s\n  timeout: %s\n  http1: { idle_close: %s }\n",
		scnDelay, scnSpread, scnQuiet, timeout, scnIdleClose)
	for _, l := range extra {
		b.WriteString(l + "\n")
	}
	return b.String()
}

// exitedAt returns a channel that receives the time ebb's process was seen
// to exit.
func exitedAt(e *ebbProc) <-chan time.Time {
	ch := make(chan time.Time, 1)
	go func() {
		<-e.done
		ch <- time.Now()
	}()
	return ch
}

// holdUntil waits until at (a timer, not a sleep); if done closes first,
// it fails the test with msg.
func holdUntil(t *testing.T, at time.Time, done <-chan struct{}, msg string) {
	t.Helper()
	timer := time.NewTimer(time.Until(at))
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-done:
		t.Fatal(msg)
	}
}

// awaitLogLine waits for ebb to log a line whose msg is msg and returns the
// first. ebbProc has no log subscription, so this polls the lines read so
// far every 10ms, at most waitTimeout.
func awaitLogLine(t *testing.T, e *ebbProc, msg string) map[string]any {
	t.Helper()
	timeout, stop := after(waitTimeout)
	defer stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if recs := e.logRecords(msg); len(recs) > 0 {
			return recs[0]
		}
		select {
		case <-tick.C:
		case <-e.done:
			if recs := e.logRecords(msg); len(recs) > 0 {
				return recs[0]
			}
			t.Fatalf("ebb exited (status %d) without logging %q; its log:\n%s", e.exitCode, msg, e.logs())
		case <-timeout:
			t.Fatalf("ebb did not log %q within %s; its log:\n%s", msg, waitTimeout, e.logs())
		}
	}
}

// checkDrainEnd checks that ebb logged exactly one "drain finished" line,
// with reason, and returns its forced_closes.
func checkDrainEnd(t *testing.T, e *ebbProc, reason string) float64 {
	t.Helper()
	recs := e.logRecords("drain finished")
	if len(recs) != 1 || recs[0]["reason"] != reason {
		t.Errorf("\"drain finished\" lines %v, want one with reason %s; log:\n%s", recs, reason, e.logs())
		return -1
	}
	forced, _ := recs[0]["forced_closes"].(float64)
	exiting := e.logRecords("ebb exiting")
	if len(exiting) != 1 || exiting[0]["reason"] != reason {
		t.Errorf("\"ebb exiting\" lines %v, want one with reason %s", exiting, reason)
	}
	if errs := e.logsAt("ERROR"); len(errs) > 0 {
		t.Errorf("ebb logged errors:\n%s", strings.Join(errs, "\n"))
	}
	return forced
}

// heldResult is how a request held open by a test ended, as its client
// saw it.
type heldResult struct {
	status int
	body   string
	err    error
	at     time.Time // when the client had the whole response, or the error
}

// getHeld sends GET url with c in a goroutine and reports how it ended.
func getHeld(c *http.Client, url string) <-chan heldResult {
	ch := make(chan heldResult, 1)
	go func() {
		resp, err := c.Get(url)
		if err != nil {
			ch <- heldResult{err: err, at: time.Now()}
			return
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		ch <- heldResult{status: resp.StatusCode, body: string(b), err: err, at: time.Now()}
	}()
	return ch
}

// ---------------------------------------------------------------------------
// (b) Outbound listener

// appCaller is one of the app's HTTP clients for its calls out, over
// HTTP/1 or h2c, counting its dials and the connections the server (ebb)
// closed. Read-only after newAppCaller but for the counters.
type appCaller struct {
	name       string
	client     *http.Client
	dials      atomic.Int32
	peerCloses atomic.Int32
}

// peerCloseConn counts, once, a read that fails before the client closed
// the connection: the server closed or reset it.
type peerCloseConn struct {
	net.Conn
	c       *appCaller
	closed  atomic.Bool // by the client
	counted atomic.Bool
}

func (pc *peerCloseConn) Read(b []byte) (int, error) {
	n, err := pc.Conn.Read(b)
	if err != nil && !pc.closed.Load() && pc.counted.CompareAndSwap(false, true) {
		pc.c.peerCloses.Add(1)
	}
	return n, err
}

func (pc *peerCloseConn) Close() error {
	pc.closed.Store(true)
	return pc.Conn.Close()
}

func newAppCaller(t *testing.T, name string, h2c bool) *appCaller {
	c := &appCaller{name: name}
	var p http.Protocols
	if h2c {
		p.SetUnencryptedHTTP2(true)
	} else {
		p.SetHTTP1(true)
	}
	tr := &http.Transport{
		Protocols: &p,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c.dials.Add(1)
			var d net.Dialer
			nc, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &peerCloseConn{Conn: nc, c: c}, nil
		},
		MaxIdleConnsPerHost:   1,
		ResponseHeaderTimeout: waitTimeout,
	}
	t.Cleanup(tr.CloseIdleConnections)
	c.client = &http.Client{Transport: tr, Timeout: waitTimeout}
	return c
}

// TestDrainOutbound is the sidecar case: ebb has an inbound listener in
// front of the app and a role: outbound listener through which the app
// calls an upstream service. After SIGTERM the inbound side drains
// (Connection: close, still accepting) while the app keeps calling out,
// over one keep-alive HTTP/1 connection and one h2c connection: every call
// succeeds, none is told to close (no Connection: close, no GOAWAY: each
// client dials once), a new outbound connection is served as before, and
// ebb does not exit while the app is up although the inbound side is
// empty. When the app stops (closes its port, drain.app.tcp) with
// one inbound request still in flight, which calls out once more before it
// answers, ebb exits 0 (app gone) within 1 s of that response.
func TestDrainOutbound(t *testing.T) {
	t.Parallel()
	upstream := newOrigin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, "upstream: "+err.Error(), http.StatusInternalServerError)
			return
		}
		fmt.Fprintf(w, "upstream %s %s", r.URL.Path, b)
	}))

	// The app's HTTP clients for its calls out: HTTP/1 and HTTP/2 (h2c),
	// each counting its dials.
	h1 := newAppCaller(t, "http1", false)
	h2 := newAppCaller(t, "h2c", true)
	callers := []*appCaller{h1, h2}
	var outbound atomic.Pointer[string] // ebb's outbound base URL, once known
	callOut := func(c *http.Client, path, payload string) error {
		req, err := http.NewRequest(http.MethodPost, *outbound.Load()+path, strings.NewReader(payload))
		if err != nil {
			return err
		}
		resp, err := c.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			return fmt.Errorf("POST %s: reading the body: %w", path, err)
		}
		if want := "upstream " + path + " " + payload; resp.StatusCode != 200 || string(b) != want {
			return fmt.Errorf("POST %s: %d %q, want 200 %q", path, resp.StatusCode, b, want)
		}
		if resp.Close {
			return fmt.Errorf("POST %s: the response carries Connection: close; the outbound listener must not be drained", path)
		}
		return nil
	}

	// The app: /work is held until released, then calls out once and
	// answers with what it got.
	release := make(chan struct{})
	arrived := make(chan struct{}, 1)
	app := newOrigin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/work" {
			io.WriteString(w, "app "+r.URL.Path)
			return
		}
		arrived <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		if err := callOut(h1.client, "/from-work", "last call"); err != nil {
			http.Error(w, "app: calling out: "+err.Error(), http.StatusBadGateway)
			return
		}
		io.WriteString(w, "work done")
	}))
	var releaseOnce sync.Once
	releaseWork := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(releaseWork)

	e := startEbb(t, fmt.Sprintf(`
admin: { address: 127.0.0.1:0 }
listeners:
  - name: inbound
    address: 127.0.0.1:0
    routes:
      - { match: { path_prefix: "/" }, cluster: app }
  - name: outbound
    address: 127.0.0.1:0
    role: outbound
    routes:
      - { match: { path_prefix: "/" }, cluster: upstream }
clusters:
  - name: app
    discovery: { static: [%q] }
  - name: upstream
    discovery: { static: [%q] }
`, hostPort(app), hostPort(upstream))+scenarioDrain(10*time.Second,
		fmt.Sprintf("  app: { tcp: %q, interval: 100ms }", hostPort(app))))
	base := e.url("outbound", "")
	outbound.Store(&base)
	awaitLogLine(t, e, "application is up")

	// The app's calls out, a loop per protocol, one call every 2ms until
	// stopped.
	var (
		mu       sync.Mutex
		calls    int
		callErrs []string
	)
	warm := make(chan struct{})
	var warmed sync.WaitGroup
	stopCalls := make(chan struct{})
	var loops sync.WaitGroup
	for _, c := range callers {
		warmed.Add(1)
		loops.Go(func() {
			tick := time.NewTicker(2 * time.Millisecond)
			defer tick.Stop()
			limit, stopLimit := after(stopTimeout)
			defer stopLimit()
			for i := 0; ; i++ {
				path := fmt.Sprintf("/call/%s/%d", c.name, i)
				err := callOut(c.client, path, "payload "+strconv.Itoa(i))
				mu.Lock()
				calls++
				if err != nil {
					callErrs = append(callErrs, fmt.Sprintf("%s: %v", time.Now().Format("15:04:05.000"), err))
				}
				mu.Unlock()
				if i == 4 {
					warmed.Done()
				}
				select {
				case <-tick.C:
				case <-stopCalls:
					if i < 4 {
						warmed.Done()
					}
					return
				case <-limit:
					mu.Lock()
					callErrs = append(callErrs, "the call loop was not stopped within "+stopTimeout.String())
					mu.Unlock()
					return
				}
			}
		})
	}
	go func() {
		warmed.Wait()
		close(warm)
	}()
	var stopOnce sync.Once
	stopCalling := func() {
		stopOnce.Do(func() { close(stopCalls) })
		loops.Wait()
	}
	t.Cleanup(stopCalling)
	recv(t, warm, "the app's first calls out")

	exited := exitedAt(e)
	trigger := time.Now()
	e.signal(syscall.SIGTERM)
	if status, body := pollReady(t, e); status != 503 {
		t.Fatalf("/ready during the drain: %d %q, want 503", status, body)
	}

	// The signal phase is over: a new connection to the outbound listener
	// is served as before; one to the inbound listener is served and told
	// to close (the inbound side drains but keeps accepting).
	signalEnd := trigger.Add(scnDelay + scnSpread + 100*time.Millisecond)
	holdUntil(t, signalEnd, e.done, "ebb exited while the app was up and calling out")
	fresh := &http.Transport{ResponseHeaderTimeout: waitTimeout}
	defer fresh.CloseIdleConnections()
	if err := callOut(&http.Client{Transport: fresh, Timeout: waitTimeout}, "/fresh", "new connection"); err != nil {
		t.Errorf("a new connection to the outbound listener after T+%s: %v", scnDelay+scnSpread, err)
	}
	inboundClient := newClient(t)
	status, body, resp := get(t, inboundClient, e.url("inbound", "/hello"))
	if status != 200 || string(body) != "app /hello" || !resp.Close {
		t.Errorf("a new inbound connection after T+%s: %d %q close=%v, want 200 \"app /hello\" with Connection: close",
			scnDelay+scnSpread, status, body, resp.Close)
	}
	lastInbound := time.Now()

	// Without the outbound connection, ebb would now be drained: nothing
	// inbound, min_duration (delay+spread) past, no new connection for
	// quiet. It must stay: the app is up and still calling out.
	holdUntil(t, lastInbound.Add(scnQuiet+300*time.Millisecond), e.done,
		"ebb exited (drained?) while the app was up and calling out through the outbound listener")

	// The app stops: one inbound request in flight, then the background
	// calls end and the app closes its port.
	held := getHeld(inboundClient, e.url("inbound", "/work"))
	recv(t, arrived, "the inbound request to reach the app")
	stopCalling()
	var peerCloses []int32
	for _, c := range callers {
		peerCloses = append(peerCloses, c.peerCloses.Load())
	}
	appStopped := time.Now()
	app.Listener.Close()
	awaitLogLine(t, e, "application gone")
	// ebb must wait for the request in flight.
	holdUntil(t, time.Now().Add(300*time.Millisecond), e.done, "ebb exited with an inbound request in flight")
	releaseWork()
	r := recv(t, held, "the inbound request in flight to finish")
	if r.err != nil || r.status != 200 || r.body != "work done" {
		t.Errorf("inbound request in flight: %d %q %v; want 200 \"work done\"", r.status, r.body, r.err)
	}
	exitAt := recv(t, exited, "ebb to exit once the app is gone")
	code := e.exit()

	mu.Lock()
	n, errs := calls, callErrs
	mu.Unlock()
	t.Logf("app calls out: %d, app dials: http1 %d, h2c %d; app stopped at T+%s; ebb exited %s after the last response (T+%s)",
		n, h1.dials.Load(), h2.dials.Load(), appStopped.Sub(trigger).Round(time.Millisecond), exitAt.Sub(r.at).Round(time.Millisecond),
		exitAt.Sub(trigger).Round(time.Millisecond))
	if len(errs) > 0 {
		t.Errorf("%d of %d calls out failed, want 0; first: %s", len(errs), n, strings.Join(errs[:min(len(errs), 5)], "\n"))
	}
	for i, c := range callers {
		if peerCloses[i] != 0 {
			t.Errorf("ebb closed %d of the app's %s connections to the outbound listener while the app was up, want 0", peerCloses[i], c.name)
		}
	}
	// Go's HTTP/1 pool may dial a second connection when a request starts
	// before the previous connection is back in the pool; HTTP/2 has one
	// connection, replaced only after a GOAWAY.
	if d := h2.dials.Load(); d != 1 {
		t.Errorf("the app's h2c client dialled the outbound listener %d times, want 1 (no GOAWAY)", d)
	}
	if code != 0 {
		t.Errorf("exit status %d, want 0 (app gone)", code)
	}
	if d := exitAt.Sub(r.at); d > time.Second {
		t.Errorf("ebb exited %s after the last request in flight finished, want within 1s", d)
	}
	if f := checkDrainEnd(t, e, "app_gone"); f != 0 {
		t.Errorf("forced_closes %v, want 0", f)
	}
}

// ---------------------------------------------------------------------------
// (c) nginx as a WAF

// wafOrigin answers every request with its body, X-Replica: name and the
// X-Request-Id it was sent.
func wafOrigin(name string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, "origin: reading the body: "+err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("X-Replica", name)
		w.Header().Set("X-Request-Id", r.Header.Get("X-Request-Id"))
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(b)
	})
}

// wafHTTPBlock is nginx's http block for the WAF: one upstream group
// listing servers with a keep-alive pool, HTTP/1.1 to the upstreams, and
// nginx's defaults for proxy_next_upstream (error timeout: a POST already
// sent is not retried, so any error ebb causes is a 502 at the client).
func wafHTTPBlock(servers ...string) func(listen string) string {
	return func(listen string) string {
		var list strings.Builder
		for _, s := range servers {
			fmt.Fprintf(&list, "        server %s;\n", s)
		}
		// client_body_buffer_size: bodies stay in memory (nginx sends a
		// body spooled to a temporary file with a ~40ms delayed-ACK stall
		// per request, which would only slow the load down).
		return fmt.Sprintf(`    keepalive_timeout 60s;
    keepalive_requests 1000000;
    client_body_buffer_size 64k;
    upstream replicas {
%s        keepalive 16;
        keepalive_requests 1000000;
    }
    server {
        listen %s;
        location / {
            proxy_pass http://replicas;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }
    }`, list.String(), listen)
	}
}

// postLoad sends POST requests with bodies from several workers, each over
// its own keep-alive connection (Go's HTTP/1 client), until stopped, and
// checks every response byte for byte.
//
// url and bodies are read-only; the rest after mu is guarded by it.
type postLoad struct {
	url      string
	bodies   [][]byte
	stopc    chan struct{}
	wg       sync.WaitGroup
	warm     chan struct{} // closed once each of the replicas answered 3 times
	warmOnce sync.Once

	mu     sync.Mutex
	served map[string][]time.Time // by X-Replica: when each good response completed
	nerr   int
	errs   []string // the first 10
}

func startPostLoad(t *testing.T, url string, workers int, replicas ...string) *postLoad {
	l := &postLoad{
		url:    url,
		bodies: [][]byte{randBytes(11, 1<<10), randBytes(12, 7<<10), randBytes(13, 20<<10)},
		stopc:  make(chan struct{}),
		warm:   make(chan struct{}),
		served: map[string][]time.Time{},
	}
	end := time.Now().Add(stopTimeout)
	for w := range workers {
		tr := &http.Transport{MaxIdleConnsPerHost: 1, ResponseHeaderTimeout: waitTimeout, DisableCompression: true}
		client := &http.Client{Transport: tr, Timeout: waitTimeout}
		l.wg.Go(func() {
			defer tr.CloseIdleConnections()
			for i := 0; ; i++ {
				select {
				case <-l.stopc:
					return
				default:
				}
				if time.Now().After(end) {
					l.fail(fmt.Sprintf("worker %d was not stopped within %s", w, stopTimeout))
					return
				}
				replica, err := l.post(client, w, i)
				if err != nil {
					l.fail(fmt.Sprintf("%s worker %d request %d: %v", time.Now().Format("15:04:05.000"), w, i, err))
					continue
				}
				l.mu.Lock()
				l.served[replica] = append(l.served[replica], time.Now())
				warm := true
				for _, r := range replicas {
					warm = warm && len(l.served[r]) >= 3
				}
				l.mu.Unlock()
				if warm {
					l.warmOnce.Do(func() { close(l.warm) })
				}
			}
		})
	}
	t.Cleanup(l.stop)
	return l
}

func (l *postLoad) post(c *http.Client, w, i int) (string, error) {
	body := l.bodies[(w+i)%len(l.bodies)]
	id := fmt.Sprintf("%d-%d", w, i)
	req, err := http.NewRequest(http.MethodPost, l.url+"/post/"+id, bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("X-Request-Id", id)
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := c.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", fmt.Errorf("status %d, reading the body: %w", resp.StatusCode, err)
	}
	if resp.StatusCode != 200 {
		return "", fmt.Errorf("status %d (X-Replica %q), body %q", resp.StatusCode, resp.Header.Get("X-Replica"), trunc(got))
	}
	if !bytes.Equal(got, body) {
		return "", fmt.Errorf("body differs: %d bytes, want %d", len(got), len(body))
	}
	if g := resp.Header.Get("X-Request-Id"); g != id {
		return "", fmt.Errorf("X-Request-Id %q, want %q", g, id)
	}
	return resp.Header.Get("X-Replica"), nil
}

func (l *postLoad) fail(msg string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.nerr++
	if len(l.errs) < 10 {
		l.errs = append(l.errs, msg)
	}
}

// stop stops the workers and waits for them; safe to call twice.
func (l *postLoad) stop() {
	select {
	case <-l.stopc:
	default:
		close(l.stopc)
	}
	l.wg.Wait()
}

// servedSince returns how many good responses replica gave after t.
func (l *postLoad) servedSince(replica string, t time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, at := range l.served[replica] {
		if at.After(t) {
			n++
		}
	}
	return n
}

func (l *postLoad) total() (ok, errs int, first []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.served {
		ok += len(s)
	}
	return ok, l.nerr, append([]string(nil), l.errs...)
}

// wafVIP is a minimal Service VIP for the WAF scenario: it forwards each
// TCP connection to one backend chosen round-robin among those listed when
// it arrives, and keeps it pinned there (conntrack) when the list changes.
// Half-closes are passed on as half-closes, errors as resets.
//
// ln is read-only; wg counts the accept loop and the forwarding
// goroutines; the rest is guarded by mu.
type wafVIP struct {
	ln *net.TCPListener
	wg sync.WaitGroup

	mu         sync.Mutex
	backends   []string
	next       int
	conns      map[*net.TCPConn]struct{}
	closed     bool
	dialErrors []string
}

func newWAFVIP(t *testing.T, backends ...string) *wafVIP {
	t.Helper()
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	v := &wafVIP{ln: ln, backends: backends, conns: map[*net.TCPConn]struct{}{}}
	v.wg.Go(func() {
		for {
			c, err := ln.AcceptTCP()
			if err != nil {
				return
			}
			v.wg.Go(func() { v.forward(c) })
		}
	})
	t.Cleanup(v.close)
	return v
}

func (v *wafVIP) addr() string { return v.ln.Addr().String() }

// set replaces the backends new connections go to.
func (v *wafVIP) set(backends ...string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.backends = backends
}

// track adds c to the open connections, or reports false once closed.
func (v *wafVIP) track(cs ...*net.TCPConn) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.closed {
		return false
	}
	for _, c := range cs {
		v.conns[c] = struct{}{}
	}
	return true
}

func (v *wafVIP) forward(client *net.TCPConn) {
	defer client.Close()
	v.mu.Lock()
	if len(v.backends) == 0 {
		v.mu.Unlock()
		return
	}
	backend := v.backends[v.next%len(v.backends)]
	v.next++
	v.mu.Unlock()
	nc, err := net.DialTimeout("tcp", backend, waitTimeout)
	if err != nil {
		v.mu.Lock()
		v.dialErrors = append(v.dialErrors, err.Error())
		v.mu.Unlock()
		client.SetLinger(0) // a reset, as a DNAT to a gone pod
		return
	}
	bc := nc.(*net.TCPConn)
	defer bc.Close()
	if !v.track(client, bc) {
		return
	}
	defer func() {
		v.mu.Lock()
		delete(v.conns, client)
		delete(v.conns, bc)
		v.mu.Unlock()
	}()
	done := make(chan struct{})
	go func() {
		defer close(done)
		wafCopy(bc, client)
	}()
	wafCopy(client, bc)
	<-done
}

// wafCopy copies src to dst; src's end of stream becomes dst's
// half-close, an error a reset of dst.
func wafCopy(dst, src *net.TCPConn) {
	if _, err := io.Copy(dst, src); err != nil {
		dst.SetLinger(0)
		dst.Close()
		src.Close()
		return
	}
	dst.CloseWrite()
}

func (v *wafVIP) close() {
	v.mu.Lock()
	v.closed = true
	for c := range v.conns {
		c.Close()
	}
	v.mu.Unlock()
	v.ln.Close()
	v.wg.Wait()
}

// awaitWarm waits until every replica has answered through nginx, failing
// with nginx's error log if nginx exits or the wait takes waitTimeout.
func (l *postLoad) awaitWarm(t *testing.T, ng *nginxProc) {
	t.Helper()
	timeout, stop := after(waitTimeout)
	defer stop()
	select {
	case <-l.warm:
	case <-ng.done:
		t.Fatalf("nginx exited (%v); its error log:\n%s", ng.err, ng.log())
	case <-timeout:
		_, nerr, errs := l.total()
		t.Fatalf("the replicas did not all answer through nginx within %s; %d errors, first:\n%s\nnginx error log:\n%s",
			waitTimeout, nerr, strings.Join(errs, "\n"), ng.log())
	}
}

// wafReplicaYAML is one ebb replica of the WAF scenario.
func wafReplicaYAML(origin string) string {
	return singleClusterYAML(origin) + scenarioDrain(10*time.Second)
}

// TestDrainWAF puts nginx, as a WAF with a keep-alive upstream pool and
// its default proxy_next_upstream (no retry of a POST once sent), in front
// of two ebb replicas, sends POSTs with bodies through it from 6 Go
// workers (keep-alive to nginx), and drains replica A with SIGTERM. Every
// response must be a 200 with the body sent, and A must exit 0 (drained,
// nothing forced). nginx's error log must show no error.
//
//   - direct: nginx's upstream lists both replicas and is never told
//     (nginx OSS cannot drop a server without a reload, and a reload makes
//     nginx itself close idle client connections, which Go's client sees as
//     errors on POSTs whatever the upstream). A keeps getting its share of
//     the POSTs through the whole drain, each new connection told to close
//     after its first response; once the load stops, A exits within
//     quiet plus 1 s.
//   - vip: nginx's upstream is a Service VIP listing both replicas, from
//     which A is removed some time after its trigger (before the end of the
//     announce phase, and after the signal phase): A exits under load.
func TestDrainWAF(t *testing.T) {
	t.Parallel()
	t.Run("direct", func(t *testing.T) {
		t.Parallel()
		a := startEbb(t, wafReplicaYAML(hostPort(newOrigin(t, wafOrigin("A")))))
		b := startEbb(t, wafReplicaYAML(hostPort(newOrigin(t, wafOrigin("B")))))
		ng := startNginx(t, wafHTTPBlock(a.addr("public"), b.addr("public")))
		load := startPostLoad(t, "http://"+ng.addr, 6, "A", "B")
		load.awaitWarm(t, ng)

		exited := exitedAt(a)
		trigger := time.Now()
		a.signal(syscall.SIGTERM)
		stopAt := trigger.Add(scnDelay + scnSpread + 700*time.Millisecond)
		holdUntil(t, stopAt, a.done, "replica A exited while nginx was still sending it requests")
		load.stop()
		stopped := time.Now()
		exitAt := recv(t, exited, "replica A to exit")
		code := a.exit()

		ok, nerr, errs := load.total()
		duringSignal := load.servedSince("A", trigger.Add(scnDelay))
		t.Logf("%d POSTs answered, %d errors; A answered %d after T+%s; A exited %s after the load stopped (T+%s)",
			ok, nerr, duringSignal, scnDelay, exitAt.Sub(stopped).Round(time.Millisecond), exitAt.Sub(trigger).Round(time.Millisecond))
		if nerr != 0 {
			t.Errorf("%d POSTs failed through nginx, want 0; first:\n%s\nnginx error log:\n%s\nreplica A log:\n%s",
				nerr, strings.Join(errs, "\n"), ng.log(), a.logs())
		}
		if duringSignal == 0 {
			t.Errorf("replica A answered no POST after T+%s: the scenario tested nothing", scnDelay)
		}
		if code != 0 {
			t.Errorf("replica A exit status %d, want 0; its log:\n%s", code, a.logs())
		}
		if d := exitAt.Sub(stopped); d > scnQuiet+time.Second {
			t.Errorf("replica A exited %s after the load stopped, want within quiet (%s) + 1s", d, scnQuiet)
		}
		if f := checkDrainEnd(t, a, "drained"); f != 0 {
			t.Errorf("replica A forced_closes %v, want 0", f)
		}
		if l := ng.logErrors(); len(l) > 0 {
			t.Errorf("nginx logged errors:\n%s", strings.Join(l, "\n"))
		}
	})
	for _, removal := range []time.Duration{200 * time.Millisecond, scnDelay + scnSpread + 400*time.Millisecond} {
		t.Run("vip/removed_after_"+removal.String(), func(t *testing.T) {
			t.Parallel()
			a := startEbb(t, wafReplicaYAML(hostPort(newOrigin(t, wafOrigin("A")))))
			b := startEbb(t, wafReplicaYAML(hostPort(newOrigin(t, wafOrigin("B")))))
			v := newWAFVIP(t, a.addr("public"), b.addr("public"))
			ng := startNginx(t, wafHTTPBlock(v.addr()))
			load := startPostLoad(t, "http://"+ng.addr, 6, "A", "B")
			load.awaitWarm(t, ng)

			exited := exitedAt(a)
			trigger := time.Now()
			a.signal(syscall.SIGTERM)
			// A may exit before its removal: nginx's pool to the VIP ends
			// up pinned to B, so no new connection may reach A for quiet,
			// which DRAIN.md counts as drained.
			removeAt := time.NewTimer(time.Until(trigger.Add(removal)))
			select {
			case <-removeAt.C:
			case <-a.done:
				t.Logf("replica A exited at T+%s, before its removal from the VIP (no new connection for quiet)",
					time.Since(trigger).Round(time.Millisecond))
				<-removeAt.C
			}
			v.set(b.addr("public"))
			exitAt := recv(t, exited, "replica A to exit")
			code := a.exit()
			// Nothing may break after A's exit: keep the load a moment.
			holdUntil(t, exitAt.Add(300*time.Millisecond), nil, "")
			load.stop()

			ok, nerr, errs := load.total()
			afterTrigger := load.servedSince("A", trigger)
			t.Logf("%d POSTs answered, %d errors; A answered %d after T; A exited at T+%s",
				ok, nerr, afterTrigger, exitAt.Sub(trigger).Round(time.Millisecond))
			if nerr != 0 {
				t.Errorf("%d POSTs failed through nginx, want 0; first:\n%s\nnginx error log:\n%s\nreplica A log:\n%s",
					nerr, strings.Join(errs, "\n"), ng.log(), a.logs())
			}
			if afterTrigger == 0 {
				t.Errorf("replica A answered no POST after its trigger: the scenario tested nothing")
			}
			if code != 0 {
				t.Errorf("replica A exit status %d, want 0; its log:\n%s", code, a.logs())
			}
			bound := max(removal, scnDelay+scnSpread) + scnIdleClose + scnQuiet + time.Second
			if d := exitAt.Sub(trigger); d > bound {
				t.Errorf("replica A exited at T+%s, want by T+%s (max(removal, delay+spread) + idle_close + quiet + 1s)", d, bound)
			}
			if f := checkDrainEnd(t, a, "drained"); f != 0 {
				t.Errorf("replica A forced_closes %v, want 0", f)
			}
			v.mu.Lock()
			dialErrs := v.dialErrors
			v.mu.Unlock()
			if len(dialErrs) > 0 {
				t.Errorf("the VIP could not reach a replica: %v", dialErrs)
			}
			if l := ng.logErrors(); len(l) > 0 {
				t.Errorf("nginx logged errors:\n%s", strings.Join(l, "\n"))
			}
		})
	}
}

// ---------------------------------------------------------------------------
// (d) The watched application exits

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
	arrived  chan struct{} // a /hold request reached the app
	stopping chan struct{} // the app closed its port on SIGTERM
	release  chan struct{} // closed by releaseHold to let /hold answer
	once     sync.Once
}

// releaseHold lets the held requests answer; safe to call twice.
func (c *appControl) releaseHold() { c.once.Do(func() { close(c.release) }) }

func newAppControl(t *testing.T) *appControl {
	c := &appControl{up: make(chan int, 1), arrived: make(chan struct{}, 1), stopping: make(chan struct{}, 1), release: make(chan struct{})}
	srv := newOrigin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/up":
			pid, _ := strconv.Atoi(r.URL.Query().Get("pid"))
			c.up <- pid
		case "/hold":
			c.arrived <- struct{}{}
			select {
			case <-c.release:
			case <-r.Context().Done():
			}
		case "/stopping":
			c.stopping <- struct{}{}
		}
	}))
	t.Cleanup(c.releaseHold)
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
		ctl := newAppControl(t)
		addr, releasePort := reservePort(t)
		path := writeConfig(t, singleClusterYAML(addr)+scenarioDrain(10*time.Second))
		e := startEbbArgs(t, path, "run", "-config", path, "--", appBin, "-addr", addr, "-ctl", ctl.url)
		pid := recv(t, ctl.up, "the app to start")
		releasePort()
		client := newClient(t)
		if status, body, _ := get(t, client, e.url("public", "/")); status != 200 || string(body) != "app\n" {
			t.Fatalf("GET / through ebb: %d %q, want 200 \"app\\n\"", status, body)
		}
		held := getHeld(client, e.url("public", "/hold"))
		recv(t, ctl.arrived, "the request to reach the app")

		exited := exitedAt(e)
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
		ctl.releaseHold()
		r := recv(t, held, "the held request to finish")
		want := fmt.Sprintf("held, then answered by pid %d\n", pid)
		if r.err != nil || r.status != 200 || r.body != want {
			t.Fatalf("held request: %d %q %v; want 200 %q", r.status, r.body, r.err, want)
		}
		checkAppGoneExit(t, e, exited, r.at)
	})

	t.Run("pid_file", func(t *testing.T) {
		t.Parallel()
		ctl := newAppControl(t)
		extRelease := make(chan struct{})
		extArrived := make(chan struct{}, 1)
		ext := newOrigin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			extArrived <- struct{}{}
			select {
			case <-extRelease:
				io.WriteString(w, "ext finished\n")
			case <-r.Context().Done():
			}
		}))
		var extOnce sync.Once
		releaseExt := func() { extOnce.Do(func() { close(extRelease) }) }
		t.Cleanup(releaseExt)

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
		held := getHeld(newClient(t), e.url("public", "/ext/slow"))
		recv(t, extArrived, "the request to reach the other cluster")

		exited := exitedAt(e)
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
		releaseExt()
		r := recv(t, held, "the held request to finish")
		if r.err != nil || r.status != 200 || r.body != "ext finished\n" {
			t.Fatalf("held request: %d %q %v; want 200 \"ext finished\\n\"", r.status, r.body, r.err)
		}
		checkAppGoneExit(t, e, exited, r.at)
	})

	t.Run("child_ebb_signalled", func(t *testing.T) {
		t.Parallel()
		ctl := newAppControl(t)
		addr, releasePort := reservePort(t)
		path := writeConfig(t, singleClusterYAML(addr)+scenarioDrain(10*time.Second))
		e := startEbbArgs(t, path, "run", "-config", path, "--", appBin, "-addr", addr, "-ctl", ctl.url)
		recv(t, ctl.up, "the app to start")
		releasePort()

		var (
			mu   sync.Mutex
			ok   int
			errs []string
		)
		warm := make(chan struct{}, 3)
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for w := range 3 {
			c := newClient(t)
			wg.Go(func() {
				limit, stopLimit := after(stopTimeout)
				defer stopLimit()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					case <-limit:
						return
					default:
					}
					var status int
					var body []byte
					resp, err := c.Get(e.url("public", "/"))
					if err == nil {
						status = resp.StatusCode
						body, err = io.ReadAll(resp.Body)
						resp.Body.Close()
					}
					mu.Lock()
					if err != nil || status != 200 || string(body) != "app\n" {
						errs = append(errs, fmt.Sprintf("%s worker %d: %d %q %v", time.Now().Format("15:04:05.000"), w, status, body, err))
					} else {
						ok++
					}
					mu.Unlock()
					if i == 4 {
						warm <- struct{}{}
					}
				}
			})
		}
		for range 3 {
			recv(t, warm, "the load to start")
		}
		exited := exitedAt(e)
		trigger := time.Now()
		e.signal(syscall.SIGTERM)
		// Clients keep coming for the announce window, then move away.
		holdUntil(t, trigger.Add(scnDelay), nil, "")
		close(stop)
		wg.Wait()
		exitAt := recv(t, exited, "ebb to exit")
		code := e.exit()
		mu.Lock()
		defer mu.Unlock()
		t.Logf("%d requests answered; ebb exited at T+%s", ok, exitAt.Sub(trigger).Round(time.Millisecond))
		if len(errs) > 0 {
			t.Errorf("%d requests failed in the announce window, want 0; first:\n%s\nebb's log:\n%s",
				len(errs), strings.Join(errs[:min(len(errs), 8)], "\n"), e.logs())
		}
		if code != 0 {
			t.Errorf("exit status %d, want 0", code)
		}
		if d := exitAt.Sub(trigger); d < scnDelay {
			t.Errorf("ebb exited at T+%s, inside its announce window (delay %s)", d, scnDelay)
		}
	})
}

// checkAppGoneCause checks that the drain was started by the application's
// exit.
// checkAppGoneExit checks that ebb, its application gone, exited with
// status 0 (reason app_gone, nothing forced) within 1 s after the request
// in flight completed at the client (at done).
func checkAppGoneExit(t *testing.T, e *ebbProc, exited <-chan time.Time, done time.Time) {
	t.Helper()
	exitAt := recv(t, exited, "ebb to exit after the app")
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

// ---------------------------------------------------------------------------
// (e) The deadline

// TestDrainDeadline holds a stream open through ebb past drain.timeout: an
// HTTP/1 request the origin never answers, the same over HTTP/2 (h2c), and
// a WebSocket. At the deadline ebb closes it (the client sees its
// connection closed, not before the deadline), logs "drain finished" with
// reason deadline and forced_closes ≥ 1, and exits with status 3, within
// 1 s of the deadline.
func TestDrainDeadline(t *testing.T) {
	t.Parallel()
	const timeout = 2 * time.Second
	// An opener starts the stream through e and returns once it is
	// established end to end; the channel reports how it ended. triggered
	// is closed once the drain has begun.
	type opener func(t *testing.T, e *ebbProc, arrived, triggered <-chan struct{}) <-chan heldResult
	hold := func(major int) opener {
		return func(t *testing.T, e *ebbProc, arrived, _ <-chan struct{}) <-chan heldResult {
			var p http.Protocols
			if major == 2 {
				p.SetUnencryptedHTTP2(true)
			} else {
				p.SetHTTP1(true)
			}
			tr := &http.Transport{Protocols: &p, DisableCompression: true}
			t.Cleanup(tr.CloseIdleConnections)
			ch := make(chan heldResult, 1)
			go func() {
				resp, err := (&http.Client{Transport: tr}).Get(e.url("public", "/never"))
				if err != nil {
					ch <- heldResult{err: err, at: time.Now()}
					return
				}
				b, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err == nil && resp.ProtoMajor != major {
					err = fmt.Errorf("answered over %s", resp.Proto)
				}
				ch <- heldResult{status: resp.StatusCode, body: string(b), err: err, at: time.Now()}
			}()
			recv(t, arrived, "the request to reach the origin")
			return ch
		}
	}
	websocketOpener := func(t *testing.T, e *ebbProc, arrived, triggered <-chan struct{}) <-chan heldResult {
		dialer := websocket.Dialer{HandshakeTimeout: waitTimeout}
		c, _, err := dialer.Dial("ws://"+e.addr("public")+"/ws", nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		recv(t, arrived, "the WebSocket to reach the origin")
		c.SetReadDeadline(time.Now().Add(waitTimeout))
		echo := func(msg string) error {
			if err := c.WriteMessage(websocket.TextMessage, []byte(msg)); err != nil {
				return err
			}
			_, got, err := c.ReadMessage()
			if err == nil && string(got) != msg {
				err = fmt.Errorf("echo of %q: %q", msg, got)
			}
			return err
		}
		if err := echo("before the drain"); err != nil {
			t.Fatal(err)
		}
		ch := make(chan heldResult, 1)
		go func() {
			// One echo during the drain (an upgraded connection keeps
			// working), then wait for the connection to end.
			timeout, stop := after(waitTimeout)
			defer stop()
			select {
			case <-triggered:
			case <-timeout:
				ch <- heldResult{err: errors.New("the drain did not begin"), at: time.Now()}
				return
			}
			if err := echo("during the drain"); err != nil {
				ch <- heldResult{err: fmt.Errorf("echo during the drain: %w", err), at: time.Now()}
				return
			}
			_, msg, err := c.ReadMessage()
			ch <- heldResult{body: string(msg), err: err, at: time.Now()}
		}()
		return ch
	}
	cases := []struct {
		name string
		open opener
	}{
		{"h1", hold(1)},
		{"h2c", hold(2)},
		{"websocket", websocketOpener},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			arrived := make(chan struct{}, 1)
			upgrader := websocket.Upgrader{}
			origin := newOrigin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/ws" {
					c, err := upgrader.Upgrade(w, r, nil)
					if err != nil {
						return
					}
					defer c.Close()
					arrived <- struct{}{}
					for {
						typ, msg, err := c.ReadMessage()
						if err != nil {
							return
						}
						if err := c.WriteMessage(typ, msg); err != nil {
							return
						}
					}
				}
				// Never answers within the test.
				arrived <- struct{}{}
				<-r.Context().Done()
			}))
			e := startEbb(t, singleClusterYAML(hostPort(origin))+scenarioDrain(timeout))
			triggered := make(chan struct{})
			held := tc.open(t, e, arrived, triggered)

			exited := exitedAt(e)
			trigger := time.Now()
			e.signal(syscall.SIGTERM)
			if status, body := pollReady(t, e); status != 503 {
				t.Errorf("/ready during the drain: %d %q, want 503", status, body)
			}
			close(triggered)
			r := recv(t, held, "the held stream to end")
			exitAt := recv(t, exited, "ebb to exit at the deadline")
			code := e.exit()
			t.Logf("stream ended at T+%s (%v); ebb exited at T+%s", r.at.Sub(trigger).Round(time.Millisecond), r.err,
				exitAt.Sub(trigger).Round(time.Millisecond))
			if r.err == nil {
				t.Errorf("the held stream ended with %d %q, want its connection closed", r.status, r.body)
			}
			if d := r.at.Sub(trigger); d < timeout {
				t.Errorf("the held stream ended at T+%s, before the deadline (%s): %v", d, timeout, r.err)
			}
			if code != 3 {
				t.Errorf("exit status %d, want 3 (deadline); log:\n%s", code, e.logs())
			}
			if d := exitAt.Sub(trigger); d < timeout || d > timeout+time.Second {
				t.Errorf("ebb exited at T+%s, want between the deadline (%s) and 1s after", d, timeout)
			}
			if f := checkDrainEnd(t, e, "deadline"); f < 1 {
				t.Errorf("forced_closes %v, want ≥ 1", f)
			}
		})
	}
}
