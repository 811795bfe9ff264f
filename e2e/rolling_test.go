package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ebb-proxy/ebb/examples/loadgen"
)

// The load of the rolling scenarios.
const (
	// rollingWorkers keep-alive workers per client kind send requests back
	// to back through ebb.
	rollingWorkers = 4
	// rollingEnough requests served by a backend show that ebb sends it
	// its share of the load.
	rollingEnough = 50
	// rollingAfterKill requests, started after a backend was killed,
	// show what ebb does with the endpoint left dead in discovery.
	rollingAfterKill = 300
	// rollingLimit bounds the load whatever happens.
	rollingLimit = 3 * time.Minute
)

// TestRollingRestart replaces the three backends of a cluster one by one
// under keep-alive GET and POST load, as a Deployment's rolling update
// does: each leaves ebb's discovery file first, is stopped with
// http.Server.Shutdown once /endpoints no longer lists it (ebb has
// applied the change and ended its last exchange there), and its
// replacement (on a new port) then joins the file. Every client (Go's
// HTTP/1.1 client, a strict HTTP/1.1 client that never retries, Go's
// HTTP/2 client) sees exactly zero errors, and every replacement serves.
// The upstream protocol is HTTP/1.1, then h2c.
func TestRollingRestart(t *testing.T) {
	t.Parallel()
	for _, protocol := range []string{"http1", "h2c"} {
		t.Run(protocol, func(t *testing.T) {
			t.Parallel()
			runRollingRestart(t, protocol)
		})
	}
}

func runRollingRestart(t *testing.T, protocol string) {
	h2c := protocol == "h2c"
	backends := []*rollingBackend{
		newRollingBackend(t, "b0", h2c), newRollingBackend(t, "b1", h2c), newRollingBackend(t, "b2", h2c),
	}
	eps := filepath.Join(t.TempDir(), "eps.yaml")
	writeBackendFile(t, eps, backends)
	e := startEbb(t, fileClusterYAML(eps, protocol))
	load := startRollingLoad(t, e.addr("public"))
	for _, b := range backends {
		recv(t, b.enough, fmt.Sprintf("backend %s to serve %d requests", b.name, rollingEnough))
	}

	t0 := time.Now()
	var replacements []*rollingBackend
	for i, old := range backends {
		writeBackendFile(t, eps, slices.Delete(slices.Clone(backends), i, i+1))
		awaitEndpoint(t, e, old.addr, false)
		removed := time.Since(t0)
		handlers, conns := old.shutdown(t)
		repl := newRollingBackend(t, old.name+"'", h2c)
		backends[i] = repl
		replacements = append(replacements, repl)
		writeBackendFile(t, eps, backends)
		awaitEndpoint(t, e, repl.addr, true)
		t.Logf("T+%v: %s (%s) left discovery; shut down with %d requests in its handlers and %d connections open; T+%v: stopped after serving %d; T+%v: %s (%s) joined",
			removed.Round(time.Millisecond), old.name, old.addr, handlers, conns, old.stoppedAt.Sub(t0).Round(time.Millisecond),
			old.servedCount(), time.Since(t0).Round(time.Millisecond), repl.name, repl.addr)
	}
	for _, b := range replacements {
		recv(t, b.enough, fmt.Sprintf("replacement %s to serve %d requests", b.name, rollingEnough))
	}
	load.Stop()

	res := load.Results()
	byMethod, fails := res.ByMethod, res.Fails
	t.Logf("%d requests (GET %d, POST %d) in %v; replacements served %d, %d, %d",
		byMethod[http.MethodGet]+byMethod[http.MethodPost], byMethod[http.MethodGet], byMethod[http.MethodPost],
		time.Since(load.Began()).Round(time.Millisecond),
		replacements[0].servedCount(), replacements[1].servedCount(), replacements[2].servedCount())
	if len(fails) > 0 {
		t.Errorf("%d requests failed during the rolling restart, want 0; the first:\n%s",
			len(fails), formatFailures(fails, t0, 20))
	}
	checkEveryKindSent(t, load)
}

// TestBackendKilled kills one of three backends hard under keep-alive GET
// and POST load, without removing it from discovery first: its listener
// and every connection are closed with a reset, as a crashed node's peer
// sees it. Issue 5: only requests in flight on it fail, and only those that
// could not be retried. So:
//   - no request the clients started after the kill fails (it was never in
//     flight on the dead backend: a connect failure is retried on another
//     endpoint);
//   - no more requests fail than the connections open on the backend at
//     the kill (an HTTP/1.1 connection carries one request at a time);
//   - no GET fails: it is idempotent and bodiless, and the backend writes
//     each response whole at the end of its handler, so none died after a
//     response byte (RFC 9110 §9.2.2).
func TestBackendKilled(t *testing.T) {
	t.Parallel()
	backends := []*rollingBackend{
		newRollingBackend(t, "b0", false), newRollingBackend(t, "b1", false), newRollingBackend(t, "b2", false),
	}
	eps := filepath.Join(t.TempDir(), "eps.yaml")
	writeBackendFile(t, eps, backends)
	e := startEbb(t, fileClusterYAML(eps, "http1"))
	load := startRollingLoad(t, e.addr("public"))
	for _, b := range backends {
		recv(t, b.enough, fmt.Sprintf("backend %s to serve %d requests", b.name, rollingEnough))
	}

	victim := backends[0]
	// Kill it while a request is in its handler.
	select {
	case <-victim.entered:
	default:
	}
	recv(t, victim.entered, "a request to reach "+victim.name)
	killStart := time.Now()
	at := victim.kill()
	killed := time.Now()
	afterKill := load.Watch(killed, rollingAfterKill)
	recv(t, afterKill, fmt.Sprintf("%d requests started after the kill to end", rollingAfterKill))
	load.Stop()

	res := load.Results()
	byMethod, fails := res.ByMethod, res.Fails
	var before, after []loadgen.Failure
	failedBy := map[string]int{}
	for _, f := range fails {
		failedBy[f.Method]++
		if f.Start.Before(killed) {
			before = append(before, f)
		} else {
			after = append(after, f)
		}
	}
	t.Logf("kill of %s took %v; at the kill it had %d connections (%d active, %d idle, %d new) and %d handlers running",
		victim.addr, killed.Sub(killStart).Round(time.Microsecond), at.conns, at.active, at.idle, at.fresh, at.handlers)
	t.Logf("%d requests (GET %d, POST %d); %d failed (GET %d, POST %d): %d started before the kill ended, %d after; by class: %s",
		byMethod[http.MethodGet]+byMethod[http.MethodPost], byMethod[http.MethodGet], byMethod[http.MethodPost],
		len(fails), failedBy[http.MethodGet], failedBy[http.MethodPost], len(before), len(after), failureClasses(fails))
	samples := scrape(t, e)
	retries, _ := metricValue(samples, "ebb_upstream_retries_total", map[string]string{"cluster": "app"})
	t.Logf("ebb's upstream errors answered, by endpoint and kind: %s; retries on another endpoint: %v",
		upstreamErrorKinds(e), retries)
	if len(after) > 0 {
		last := after[len(after)-1]
		t.Errorf("%d requests started after the kill failed (of %d started after it), the last at T%+v: ebb still picks the dead endpoint, and a failed connect was answered instead of retried elsewhere; the first:\n%s",
			len(after), load.SinceCount(), last.End.Sub(killed).Round(time.Millisecond), formatFailures(after, killed, 10))
	}
	if len(fails) > at.conns {
		t.Errorf("%d requests failed, more than the %d connections open on the killed backend (so more than the requests in flight on it)",
			len(fails), at.conns)
	}
	if n := failedBy[http.MethodGet]; n > 0 {
		var gets []loadgen.Failure
		for _, f := range fails {
			if f.Method == http.MethodGet {
				gets = append(gets, f)
			}
		}
		t.Errorf("%d GET requests failed, want 0 (idempotent and bodiless: retryable on another endpoint); the first:\n%s",
			n, formatFailures(gets, killed, 10))
	}
	if len(before) > 0 {
		t.Logf("failures of requests started before the kill ended:\n%s", formatFailures(before, killed, 10))
	}
	checkEveryKindSent(t, load)
}

// writeBackendFile lists the backends' addresses in the endpoint file
// path (writeEndpointFile).
func writeBackendFile(t *testing.T, path string, backends []*rollingBackend) {
	t.Helper()
	var addrs []string
	for _, b := range backends {
		addrs = append(addrs, b.addr)
	}
	writeEndpointFile(t, path, addrs...)
}

// awaitEndpoint polls ebb's /endpoints until the cluster app lists addr
// (present) or no longer does, failing the test after waitTimeout.
func awaitEndpoint(t *testing.T, e *ebbProc, addr string, present bool) {
	t.Helper()
	timeout, stop := after(waitTimeout)
	defer stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		status, body, _ := get(t, adminClient, e.adminURL("/endpoints"))
		if status != http.StatusOK {
			t.Fatalf("/endpoints: status %d: %s", status, body)
		}
		var clusters []struct {
			Cluster   string `json:"cluster"`
			Endpoints []struct {
				Address string `json:"address"`
			} `json:"endpoints"`
		}
		if err := json.Unmarshal(body, &clusters); err != nil {
			t.Fatalf("/endpoints: %v: %s", err, body)
		}
		listed := false
		for _, c := range clusters {
			for _, ep := range c.Endpoints {
				listed = listed || (c.Cluster == "app" && ep.Address == addr)
			}
		}
		if listed == present {
			return
		}
		select {
		case <-tick.C:
		case <-timeout:
			t.Fatalf("after %s, /endpoints still shows listed=%v for %s: %s", waitTimeout, listed, addr, body)
		}
	}
}

// rollingBackend is an application replica: a net/http server on
// 127.0.0.1:0 with HTTP/1.1 keep-alive (and h2c if asked) that answers
// every GET with "get PATH\n" and every POST with "post PATH BODY\n", as
// mixedOrigin does, after a delay of 1 to 5ms so that requests are in flight
// at any moment. It stops gracefully (shutdown) or is killed (kill).
//
// name, addr, srv, ln, enough, entered and serveErr are set before the
// server starts; stoppedAt belongs to the test goroutine; the rest is
// guarded by mu.
type rollingBackend struct {
	name      string
	addr      string
	srv       *http.Server
	ln        net.Listener
	enough    chan struct{} // closed once served reaches rollingEnough
	entered   chan struct{} // a handler began (buffered, never blocks)
	serveErr  chan error    // what Serve returned
	stoppedAt time.Time     // when shutdown returned

	mu       sync.Mutex
	conns    map[net.Conn]http.ConnState
	handlers int // handlers running
	served   int // responses written whole
	killed   bool
}

// killStats is what a killed backend had open when it died.
type killStats struct {
	conns, active, idle, fresh int
	handlers                   int
}

func newRollingBackend(t *testing.T, name string, h2c bool) *rollingBackend {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &rollingBackend{name: name, addr: ln.Addr().String(), ln: ln, enough: make(chan struct{}),
		entered: make(chan struct{}, 1), serveErr: make(chan error, 1), conns: map[net.Conn]http.ConnState{}}
	b.srv = &http.Server{Handler: b, ConnState: b.connState, ReadHeaderTimeout: waitTimeout}
	if h2c {
		var p http.Protocols
		p.SetHTTP1(true)
		p.SetUnencryptedHTTP2(true)
		b.srv.Protocols = &p
	}
	go func() { b.serveErr <- b.srv.Serve(ln) }()
	t.Cleanup(func() {
		b.srv.Close()
		<-b.serveErr // Serve's goroutine is over
	})
	return b
}

func (b *rollingBackend) connState(c net.Conn, s http.ConnState) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch s {
	case http.StateClosed, http.StateHijacked:
		delete(b.conns, c)
		return
	}
	if b.killed {
		// Accepted just before the kill closed the listener.
		c.(*net.TCPConn).SetLinger(0)
		c.Close()
		return
	}
	b.conns[c] = s
}

func (b *rollingBackend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b.mu.Lock()
	b.handlers++
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		b.handlers--
		b.mu.Unlock()
	}()
	select {
	case b.entered <- struct{}{}:
	default:
	}
	var body []byte
	if r.Method == http.MethodPost {
		var err error
		if body, err = io.ReadAll(r.Body); err != nil {
			http.Error(w, "backend: reading the body: "+err.Error(), http.StatusBadRequest)
			return
		}
	}
	delay := time.NewTimer(time.Duration(1+rand.IntN(5)) * time.Millisecond)
	defer delay.Stop()
	select {
	case <-delay.C:
	case <-r.Context().Done():
		return // the connection is gone
	}
	switch r.Method {
	case http.MethodGet:
		io.WriteString(w, "get "+r.URL.Path+"\n")
	case http.MethodPost:
		io.WriteString(w, "post "+r.URL.Path+" "+string(body)+"\n")
	default:
		http.Error(w, "backend: unexpected method", http.StatusMethodNotAllowed)
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.served++
	if b.served == rollingEnough {
		close(b.enough)
	}
}

func (b *rollingBackend) servedCount() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.served
}

// shutdown stops the backend gracefully: no new connection, idle ones
// closed, requests in flight finished. It returns the handlers running
// and the connections open when it began.
func (b *rollingBackend) shutdown(t *testing.T) (handlers, conns int) {
	t.Helper()
	b.mu.Lock()
	handlers, conns = b.handlers, len(b.conns)
	b.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	defer cancel()
	if err := b.srv.Shutdown(ctx); err != nil {
		t.Fatalf("shutting down backend %s: %v", b.name, err)
	}
	if err := <-b.serveErr; !errors.Is(err, http.ErrServerClosed) {
		t.Fatalf("backend %s: Serve returned %v, want http.ErrServerClosed", b.name, err)
	}
	b.serveErr <- http.ErrServerClosed // for the cleanup
	b.stoppedAt = time.Now()
	return handlers, conns
}

// kill closes the listener and resets every connection at once, as the
// peer of a crashed node sees it, and returns what was open.
func (b *rollingBackend) kill() killStats {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.killed = true
	st := killStats{conns: len(b.conns), handlers: b.handlers}
	b.ln.Close()
	for c, s := range b.conns {
		switch s {
		case http.StateActive:
			st.active++
		case http.StateIdle:
			st.idle++
		case http.StateNew:
			st.fresh++
		}
		c.(*net.TCPConn).SetLinger(0) // close sends a reset
		c.Close()
	}
	return st
}

// startRollingLoad starts the keep-alive load of the rolling scenarios
// towards addr: rollingWorkers workers for each client kind, each worker
// sending GET and POST alternately, back to back, until stopped.
func startRollingLoad(t *testing.T, addr string) *loadgen.Load {
	return startLoad(t, loadSpec{addr: addr, kinds: loadgen.Kinds, workers: rollingWorkers, request: mixedRequest, limit: rollingLimit})
}

// failureClasses counts the failures by what the client saw: ebb's own
// answer, or a transport error.
func failureClasses(fails []loadgen.Failure) string {
	classes := map[string]int{}
	for _, f := range fails {
		msg := f.Err.Error()
		class := "other: " + msg
		for _, c := range []string{"upstream connect failed", "upstream failed", "upstream timed out", "no upstream endpoint"} {
			if strings.Contains(msg, c) {
				class = f.Method + " " + c
				break
			}
		}
		classes[class]++
	}
	return fmt.Sprint(classes)
}

// upstreamErrorKinds counts ebb's "upstream error" log lines by endpoint
// and kind.
func upstreamErrorKinds(e *ebbProc) string {
	kinds := map[string]int{}
	for _, rec := range e.logRecords("upstream error") {
		kinds[fmt.Sprintf("%v %v", rec["endpoint"], rec["kind"])]++
	}
	return fmt.Sprint(kinds)
}
