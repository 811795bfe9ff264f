package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// Drain scenario (b), an outbound listener used by the local app through
// the drain. The helpers the scenarios share are in
// drain_scenarios_test.go.

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
	warm := make(chan struct{}, len(callers)) // a loop's fifth call is done
	stopCalls := make(chan struct{})
	var loops sync.WaitGroup
	for _, c := range callers {
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
					warm <- struct{}{}
				}
				select {
				case <-tick.C:
				case <-stopCalls:
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
	var stopOnce sync.Once
	stopCalling := func() {
		stopOnce.Do(func() { close(stopCalls) })
		loops.Wait()
	}
	t.Cleanup(stopCalling)
	for range callers {
		recv(t, warm, "the app's first calls out")
	}

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
	held := getHeld(t, inboundClient, e.url("inbound", "/work"), 0)
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
	exitAt := awaitExit(t, e, "ebb to exit once the app is gone")
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
