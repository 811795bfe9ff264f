package e2e

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/ebb-proxy/ebb/examples/grpcecho"
	"github.com/ebb-proxy/ebb/examples/loadgen"
)

// The gRPC upstream going away under load (ebb issue 38): two grpc-go
// servers behind an h2c cluster, gRPC calls from grpc-go's client (unary,
// and bidirectional streams) and HTTP/1.1 and h2c requests from loadgen's
// clients, and one server stopped while they run. GracefulStop (GOAWAY,
// its calls in flight finished) must cost no call at all; a hard Stop
// costs exactly the calls in flight on it, each answered as ebb's retry
// policy says (docs/REQUESTS.md, Retries), and nothing else.
//
// A gRPC server answers only gRPC, so loadgen's clients make gRPC calls
// too: a POST of one length-prefixed message to the unary method, whose
// answer is the same bytes (the grpc-status trailer is not looked at; an
// error status has no message, so it shows as a body other than the one
// expected). The test service (upstreamDesc) is registered on grpcecho's
// server, with its codec, rather than grpcecho's own service: its handlers
// count the calls each server answers, by kind, and hold the calls the test
// wants in flight (grpcecho's unary handler ignores server interceptors).
//
// The cluster balances round robin, so that an endpoint gets its share of
// the calls whatever it holds (p2c would steer calls away from a server
// holding some), and after its stop is picked again at once: the calls
// ebb then sends it are refused a connection and go to the other one.
// Gateway errors do not eject (outlier_detection), or the held calls that
// the stop breaks would eject the endpoint before any call met the refused
// connection this test is about.

const (
	upstreamService = "ebb.e2e.Upstream"
	upstreamUnary   = "/" + upstreamService + "/Unary"
	upstreamEcho    = "/" + upstreamService + "/Echo"
)

// The kinds of call of the load. The first word of a call's (first)
// message names its kind, the second its worker ("w3").
const (
	kindUnary = "grpc-unary"
	kindBidi  = "grpc-bidi"
)

var (
	// httpKinds are loadgen's clients: HTTP/1.1 (Go's, strict) and h2c.
	httpKinds = []loadgen.Kind{loadgen.GoHTTP1, loadgen.StrictHTTP1, loadgen.GoHTTP2}
	// callKinds are every kind of call.
	callKinds = []string{kindUnary, kindBidi, loadgen.GoHTTP1.Name, loadgen.StrictHTTP1.Name, loadgen.GoHTTP2.Name}
)

// The load's size and the counts the tests wait for.
const (
	unaryWorkers = 3 // gRPC unary callers
	bidiWorkers  = 2 // gRPC callers opening a bidi stream after another
	httpWorkers  = 2 // per kind of loadgen's clients
	loadCallers  = unaryWorkers + bidiWorkers + httpWorkers*3
	// warmCalls of each kind answered by each server before the stop;
	// moreCalls of each kind answered by the other one after a step.
	warmCalls = 5
	moreCalls = 10
	// loadLimit bounds the loads: no call starts after it.
	loadLimit = time.Minute
)

// upstreamDesc is the test service:
//
//	Unary  unary: answers the request.
//	Echo   bidi:  sends back each message as it arrives.
var upstreamDesc = grpc.ServiceDesc{
	ServiceName: upstreamService,
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Unary",
		Handler: func(srv any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			return srv.(*upstreamServer).unary(ctx, dec)
		},
	}},
	Streams: []grpc.StreamDesc{{
		StreamName:    "Echo",
		ServerStreams: true,
		ClientStreams: true,
		Handler: func(srv any, stream grpc.ServerStream) error {
			return srv.(*upstreamServer).echo(stream)
		},
	}},
}

// TestGRPCUpstreamGracefulStop stops one of two gRPC endpoints with
// GracefulStop while calls of every kind run through ebb, with a call of
// each kind in flight on it (held by its handler) across its final
// GOAWAY. Not one call may fail: the held ones are answered after the
// GOAWAY, the ones ebb sends it after the GOAWAY go to the other endpoint
// (its listener is closed: a connect failure, retried whatever the
// method), and the load goes on through the other endpoint alone.
func TestGRPCUpstreamGracefulStop(t *testing.T) {
	t.Parallel()
	a, b := startUpstreamServer(t), startUpstreamServer(t)
	e := startEbb(t, twoEndpointsYAML(a.addr, b.addr))
	conn := dialGRPC(t, e.addr("public"), insecure.NewCredentials())
	gl := startGRPCLoad(t, conn, nil)
	hl := startHTTPLoad(t, e.addr("public"), nil)
	recv(t, a.reached(eachKind(nil, warmCalls)), "server a to answer calls of every kind")
	recv(t, b.reached(eachKind(nil, warmCalls)), "server b to answer calls of every kind")

	b.arm()
	for range callKinds {
		recv(t, b.heldc, "server b to hold a call of each kind")
	}
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		b.gs.GracefulStop()
	}()
	t.Cleanup(func() {
		b.releaseHeld()
		<-stopped
	})
	recv(t, b.lis.allGoneAway(), "server b to write its final GOAWAY on every connection")
	select {
	case <-stopped:
		t.Fatal("GracefulStop returned while server b held calls")
	default:
	}
	// ebb opens no stream on a connection after its GOAWAY, and b's
	// listener is closed: the calls of every kind go on through a, b's
	// held calls still in flight.
	recv(t, a.reached(eachKind(a.counts(), moreCalls)), "server a to answer calls of every kind after b's GOAWAY")
	b.releaseHeld()
	recv(t, stopped, "GracefulStop to return once b's held calls were answered")
	bCounts := b.counts()
	if n := b.active(); n != 0 {
		t.Errorf("GracefulStop returned with %d calls active on server b", n)
	}
	recv(t, a.reached(eachKind(a.counts(), moreCalls)), "server a to answer calls of every kind after b's GracefulStop")
	gl.stop()
	hl.Stop()

	if fails := gl.failures(); len(fails) != 0 {
		t.Errorf("%d gRPC calls failed, want 0:\n%s", len(fails), formatGRPCFailures(fails))
	}
	res := hl.Results()
	if len(res.Fails) != 0 || res.OK != res.Requests {
		t.Errorf("loadgen: %d requests, %d answered correctly, %d failed, want 0 failed; the first:\n%s",
			res.Requests, res.OK, len(res.Fails), formatFailures(res.Fails, hl.Began(), 20))
	}
	if got := b.counts(); !maps.Equal(got, bCounts) {
		t.Errorf("server b answered %v after GracefulStop returned, %v when it did", got, bCounts)
	}
	checkUpstreamErrors(t, e, b.addr, 0)
	checkRetried(t, e)
	if t.Failed() {
		t.Logf("ebb's log:\n%s", e.logs())
	}
}

// TestGRPCUpstreamHardStop stops one of two gRPC endpoints with Stop
// (its connections closed at once, no GOAWAY) while it holds a call of
// each kind. Those calls, sent and not answered, are not sent again: each
// is a POST the endpoint may have processed, so ebb answers 502, which
// grpc-go's client reports as Unavailable. Every other call succeeds,
// those ebb sends the stopped endpoint afterwards included (refused a
// connection, not processed: sent to the other one).
//
// A call ebb has just sent the endpoint and the endpoint has not read yet
// would fail too, for the same reason, and no test could name it in
// advance. So the load pauses for the stop (every caller waits at a gate
// before its next call) until the only calls in flight are the held ones,
// and goes on after it.
func TestGRPCUpstreamHardStop(t *testing.T) {
	t.Parallel()
	a, b := startUpstreamServer(t), startUpstreamServer(t)
	e := startEbb(t, twoEndpointsYAML(a.addr, b.addr))
	conn := dialGRPC(t, e.addr("public"), insecure.NewCredentials())
	g := newCallGate(t)
	gl := startGRPCLoad(t, conn, g)
	hl := startHTTPLoad(t, e.addr("public"), g)
	recv(t, a.reached(eachKind(nil, warmCalls)), "server a to answer calls of every kind")
	recv(t, b.reached(eachKind(nil, warmCalls)), "server b to answer calls of every kind")

	b.arm()
	held := map[heldCall]bool{}
	for range callKinds {
		held[recv(t, b.heldc, "server b to hold a call of each kind")] = true
	}
	g.shut()
	recv(t, g.waiting(loadCallers-len(held)), "every caller but the held ones to wait at the gate")
	if n := b.active(); n != len(held) {
		t.Fatalf("server b has %d calls active at its stop, want the %d it holds", n, len(held))
	}
	if n := a.active(); n != 0 {
		t.Fatalf("server a has %d calls active at b's stop, want 0", n)
	}
	b.gs.Stop()
	recv(t, g.waiting(loadCallers), "the held calls to end and their callers to wait at the gate")
	bCounts := b.counts()

	// Exactly the held calls failed, each as the policy says.
	checkHeldFailures(t, gl.failures(), hl.Results().Fails, held)
	g.open()
	recv(t, a.reached(eachKind(a.counts(), moreCalls)), "server a to answer calls of every kind after b's stop")
	gl.stop()
	hl.Stop()

	// Nothing failed after the stop, and b answered nothing more.
	checkHeldFailures(t, gl.failures(), hl.Results().Fails, held)
	if got := b.counts(); !maps.Equal(got, bCounts) {
		t.Errorf("server b answered %v after its stop, %v at it", got, bCounts)
	}
	checkUpstreamErrors(t, e, b.addr, len(held))
	checkRetried(t, e)
	if t.Failed() {
		t.Logf("ebb's log:\n%s", e.logs())
	}
}

// checkHeldFailures checks that the failed calls are exactly the held
// ones, each answered 502 by ebb (Unavailable to grpc-go's client).
func checkHeldFailures(t *testing.T, grpcFails []grpcFailure, httpFails []loadgen.Failure, held map[heldCall]bool) {
	t.Helper()
	failed := map[heldCall]bool{}
	for _, f := range grpcFails {
		c := heldCall{kind: f.kind, worker: f.worker}
		st, _ := status.FromError(f.err)
		if !held[c] || failed[c] || st.Code() != codes.Unavailable ||
			!strings.Contains(st.Message(), "HTTP status code received from server: 502") {
			t.Errorf("%s worker %d failed with %v; want Unavailable (ebb's 502) for a call held at the stop, once", f.kind, f.worker, f.err)
		}
		failed[c] = true
	}
	want502 := fmt.Sprintf(": 502 %q, want 200", "ebb: upstream failed\n")
	for _, f := range httpFails {
		c := heldCall{kind: f.Kind, worker: f.Worker}
		if !held[c] || failed[c] || f.Err == nil || !strings.Contains(f.Err.Error(), want502) {
			t.Errorf("%s worker %d failed with %v; want ebb's 502 for a call held at the stop, once", f.Kind, f.Worker, f.Err)
		}
		failed[c] = true
	}
	for c := range held {
		if !failed[c] {
			t.Errorf("%s worker %d, held at the stop, did not fail", c.kind, c.worker)
		}
	}
}

// checkUpstreamErrors checks, by ebb's counters and its log, that ebb
// answered exactly n upstream failures, all of kind broken (a 502) on
// endpoint addr, and no other failure.
func checkUpstreamErrors(t *testing.T, e *ebbProc, addr string, n int) {
	t.Helper()
	m := scrape(t, e)
	for kind := range strings.FieldsSeq("connect overloaded timeout broken refused invalid") {
		want := 0
		if kind == "broken" {
			want = n
		}
		if v, ok := metricValue(m, "ebb_upstream_errors_total", map[string]string{"cluster": "app", "kind": kind}); !ok || v != float64(want) {
			t.Errorf("ebb_upstream_errors_total{kind=%q} = %v (present %v), want %d", kind, v, ok, want)
		}
	}
	if v, ok := metricValue(m, "ebb_upstream_retry_budget_exhausted_total", map[string]string{"cluster": "app"}); !ok || v != 0 {
		t.Errorf("ebb_upstream_retry_budget_exhausted_total = %v (present %v), want 0", v, ok)
	}
	recs := e.logRecords("upstream error")
	for _, rec := range recs {
		if rec["endpoint"] != addr || rec["kind"] != "broken" || rec["status"] != float64(http.StatusBadGateway) {
			t.Errorf("upstream error logged: %v; want endpoint %s, kind broken, status 502", rec, addr)
		}
	}
	if len(recs) != n {
		t.Errorf("%d upstream errors logged, want %d", len(recs), n)
	}
}

// checkRetried checks that ebb sent a call again: round robin picks the
// stopped endpoint again after its stop (or its GOAWAY), within two
// calls, and ebb is refused a connection to it and sends the call to the
// other endpoint. Passive health then takes it out of the choice for a
// second, longer than the test lasts: how many calls went again is
// therefore a few, not a number the test can know.
func checkRetried(t *testing.T, e *ebbProc) {
	t.Helper()
	m := scrape(t, e)
	if v, ok := metricValue(m, "ebb_upstream_retries_total", map[string]string{"cluster": "app"}); !ok || v < 1 {
		t.Errorf("ebb_upstream_retries_total = %v (present %v): no call picked for the stopped endpoint went to the other", v, ok)
	}
}

// twoEndpointsYAML is a configuration with one listener ("public") that
// sends everything to an h2c cluster ("app") of the endpoints a and b,
// balanced round robin.
func twoEndpointsYAML(a, b string) string {
	return fmt.Sprintf(`
admin: { address: 127.0.0.1:0 }
listeners:
  - name: public
    address: 127.0.0.1:0
    routes:
      - match: { path_prefix: "/" }
        cluster: app
clusters:
  - name: app
    protocol: h2c
    balancer: round_robin
    outlier_detection: { consecutive_gateway_errors: 0 }
    discovery: { static: [%q, %q] }
`, a, b)
}

// heldCall names a call a server held: its kind and worker.
type heldCall struct {
	kind   string
	worker int
}

// upstreamServer is one gRPC endpoint: grpcecho's server with the test
// service, on a goAwayListener.
//
// addr, gs, lis, release and heldc are set before it serves; the rest is
// guarded by mu.
type upstreamServer struct {
	addr        string
	gs          *grpc.Server
	lis         *goAwayListener
	release     chan struct{} // closed: held calls go on
	releaseOnce sync.Once     // closes release
	heldc       chan heldCall // a call held, as it is

	mu       sync.Mutex
	begun    int             // calls whose handler started
	ended    int             // ... and returned
	answered map[string]int  // calls answered without error, by kind
	hold     map[string]bool // kinds whose next call is held
	waiters  []countWaiter
}

// countWaiter is closed once every kind in want has been answered as
// often.
type countWaiter struct {
	want map[string]int
	c    chan struct{}
}

// startUpstreamServer serves the test service on 127.0.0.1:0, plain-text
// HTTP/2, until the test ends.
func startUpstreamServer(t *testing.T) *upstreamServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &upstreamServer{addr: ln.Addr().String(), lis: &goAwayListener{Listener: ln},
		release: make(chan struct{}), heldc: make(chan heldCall, len(callKinds)),
		answered: map[string]int{}, hold: map[string]bool{}}
	s.gs = grpcecho.NewServer(grpc.Creds(insecure.NewCredentials()))
	s.gs.RegisterService(&upstreamDesc, s)
	served := make(chan error, 1)
	go func() { served <- s.gs.Serve(s.lis) }()
	t.Cleanup(func() {
		s.releaseHeld()
		s.gs.Stop()
		if err := <-served; err != nil {
			t.Errorf("gRPC server: %v", err)
		}
	})
	return s
}

func (s *upstreamServer) unary(ctx context.Context, dec func(any) error) (_ any, err error) {
	var kind string
	s.begin()
	defer func() { s.end(kind, err) }()
	var req []byte
	if err := dec(&req); err != nil {
		return nil, err
	}
	if kind, err = s.arrived(ctx, req); err != nil {
		return nil, err
	}
	return req, nil
}

func (s *upstreamServer) echo(stream grpc.ServerStream) (err error) {
	var kind string
	s.begin()
	defer func() { s.end(kind, err) }()
	for first := true; ; first = false {
		m, err := recvBytes(stream)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if first {
			if kind, err = s.arrived(stream.Context(), m); err != nil {
				return err
			}
		}
		if err := stream.SendMsg(m); err != nil {
			return err
		}
	}
}

// begin counts a call's start.
func (s *upstreamServer) begin() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.begun++
}

// arrived returns the kind of a call whose first message is m, holding
// the call first if its kind is to be held, until released or ended.
func (s *upstreamServer) arrived(ctx context.Context, m []byte) (string, error) {
	kind, rest, _ := strings.Cut(string(m), " ")
	c := heldCall{kind: kind}
	fmt.Sscanf(rest, "w%d", &c.worker)
	s.mu.Lock()
	hold := s.hold[kind]
	delete(s.hold, kind)
	s.mu.Unlock()
	if !hold {
		return kind, nil
	}
	s.heldc <- c
	select {
	case <-s.release:
		return kind, nil
	case <-ctx.Done():
		return kind, status.FromContextError(ctx.Err()).Err()
	}
}

// end counts a call's end, and its answer if err is nil.
func (s *upstreamServer) end(kind string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ended++
	if err != nil {
		return
	}
	s.answered[kind]++
	s.waiters = slices.DeleteFunc(s.waiters, func(w countWaiter) bool {
		if !s.reachedLocked(w.want) {
			return false
		}
		close(w.c)
		return true
	})
}

// reachedLocked reports whether the server has answered as many calls of
// each kind as want says.
func (s *upstreamServer) reachedLocked(want map[string]int) bool {
	for k, n := range want {
		if s.answered[k] < n {
			return false
		}
	}
	return true
}

// arm has the server hold the next call of each kind (reported on heldc)
// until releaseHeld, or the call's end.
func (s *upstreamServer) arm() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range callKinds {
		s.hold[k] = true
	}
}

// releaseHeld lets the held calls go on; safe to call more than once.
func (s *upstreamServer) releaseHeld() { s.releaseOnce.Do(func() { close(s.release) }) }

// active returns how many calls the server's handlers are in.
func (s *upstreamServer) active() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.begun - s.ended
}

// counts returns how many calls of each kind the server has answered.
func (s *upstreamServer) counts() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.answered)
}

// reached returns a channel closed once the server has answered as many
// calls of each kind as want says.
func (s *upstreamServer) reached(want map[string]int) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := countWaiter{want: want, c: make(chan struct{})}
	if s.reachedLocked(want) {
		close(w.c)
	} else {
		s.waiters = append(s.waiters, w)
	}
	return w.c
}

// eachKind returns base's count of each kind of call plus n.
func eachKind(base map[string]int, n int) map[string]int {
	want := map[string]int{}
	for _, k := range callKinds {
		want[k] = base[k] + n
	}
	return want
}

// goAwayListener follows the frames the server writes on each connection
// it accepts (HTTP/2 frames from the first byte: a server sends no
// preface of its own), so that a test knows when the server has written
// its final GOAWAY (last stream id below 2^31-1: grpc-go's first, sent as
// GracefulStop begins, has 2^31-1) on every connection.
//
// accepted, settled and waiter are guarded by mu.
type goAwayListener struct {
	net.Listener

	mu       sync.Mutex
	accepted int           // connections accepted
	settled  int           // ... that wrote their final GOAWAY or closed
	waiter   chan struct{} // closed once settled == accepted; nil: none
}

func (l *goAwayListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	l.accepted++
	l.mu.Unlock()
	return &goAwayConn{Conn: c, l: l}, nil
}

// allGoneAway returns a channel closed once every connection accepted so
// far has written its final GOAWAY or been closed.
func (l *goAwayListener) allGoneAway() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	waiter := make(chan struct{})
	l.waiter = waiter
	l.notifyLocked()
	return waiter
}

func (l *goAwayListener) settle() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.settled++
	l.notifyLocked()
}

func (l *goAwayListener) notifyLocked() {
	if l.waiter != nil && l.settled == l.accepted {
		close(l.waiter)
		l.waiter = nil
	}
}

// goAwayConn is a connection of a goAwayListener. The fields of the frame
// being written are guarded by mu (grpc-go writes from one goroutine at a
// time, but not always the same one).
type goAwayConn struct {
	net.Conn
	l    *goAwayListener
	once sync.Once // settles the connection

	mu     sync.Mutex
	head   [9]byte // the header of the frame being written
	nhead  int
	left   int     // bytes of the frame's payload still to come
	goAway bool    // the frame is a GOAWAY
	last   [4]byte // its last stream id
	nlast  int
}

func (c *goAwayConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.scan(p[:n])
	return n, err
}

func (c *goAwayConn) Close() error {
	c.once.Do(c.l.settle)
	return c.Conn.Close()
}

// scan follows the frames in p, the next bytes written.
func (c *goAwayConn) scan(p []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(p) > 0 {
		if c.nhead < len(c.head) {
			k := copy(c.head[c.nhead:], p)
			c.nhead += k
			p = p[k:]
			if c.nhead == len(c.head) {
				c.left = int(c.head[0])<<16 | int(c.head[1])<<8 | int(c.head[2])
				c.goAway = c.head[3] == 0x7 // RFC 9113 §6.8
				c.nlast = 0
				if c.left == 0 {
					c.nhead = 0
				}
			}
			continue
		}
		k := min(c.left, len(p))
		if c.goAway && c.nlast < len(c.last) {
			c.nlast += copy(c.last[c.nlast:], p[:k])
			if c.nlast == len(c.last) && binary.BigEndian.Uint32(c.last[:])&(1<<31-1) != 1<<31-1 {
				c.once.Do(c.l.settle)
			}
		}
		c.left -= k
		p = p[k:]
		if c.left == 0 {
			c.nhead = 0
		}
	}
}

// callGate lets the load's callers through before each call while open;
// while shut they wait, and a test learns when a number of them wait.
//
// All fields but done are guarded by mu.
type callGate struct {
	done <-chan struct{} // the test's end: nobody waits any more

	mu      sync.Mutex
	opened  chan struct{} // closed when the gate opens; nil while open
	nwait   int           // callers waiting
	want    int
	reached chan struct{} // closed once nwait >= want; nil: none
}

func newCallGate(t *testing.T) *callGate {
	return &callGate{done: t.Context().Done()}
}

// pass waits while the gate is shut. A nil gate is always open.
func (g *callGate) pass() {
	if g == nil {
		return
	}
	g.mu.Lock()
	opened := g.opened
	if opened == nil {
		g.mu.Unlock()
		return
	}
	g.nwait++
	g.notifyLocked()
	g.mu.Unlock()
	select {
	case <-opened:
	case <-g.done:
	}
	g.mu.Lock()
	g.nwait--
	g.mu.Unlock()
}

func (g *callGate) shut() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.opened == nil {
		g.opened = make(chan struct{})
	}
}

func (g *callGate) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.opened != nil {
		close(g.opened)
		g.opened = nil
	}
}

// waiting returns a channel closed once n callers wait at the gate.
func (g *callGate) waiting(n int) <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	reached := make(chan struct{})
	g.want, g.reached = n, reached
	g.notifyLocked()
	return reached
}

func (g *callGate) notifyLocked() {
	if g.reached != nil && g.nwait >= g.want {
		close(g.reached)
		g.reached = nil
	}
}

// startHTTPLoad starts loadgen's clients (httpKinds) sending gRPC calls
// to the unary method through addr, each worker passing g before each
// call; stopped at cleanup.
func startHTTPLoad(t *testing.T, addr string, g *callGate) *loadgen.Load {
	t.Helper()
	var groups []loadgen.Group
	for _, kind := range httpKinds {
		groups = append(groups, loadgen.Group{Kind: kind, Addr: addr, Workers: httpWorkers,
			Request: func(w, i int, last bool) loadgen.Request {
				g.pass()
				body := string(grpcFrame(fmt.Sprintf("%s w%d i%d", kind.Name, w, i)))
				return loadgen.Request{Method: http.MethodPost, Path: upstreamUnary, Body: body,
					ContentType: "application/grpc", Want: body, Last: last}
			}})
	}
	l, err := loadgen.Start(loadgen.Spec{Groups: groups, Limit: loadLimit})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	return l
}

// grpcFrame is m as the body of a gRPC request or response: a
// length-prefixed message, uncompressed.
func grpcFrame(m string) []byte {
	b := make([]byte, 5, 5+len(m))
	binary.BigEndian.PutUint32(b[1:], uint32(len(m)))
	return append(b, m...)
}

// grpcLoad is grpc-go's client's share of the load: unary callers, and
// callers opening one bidi stream after another, every call checked.
//
// conn and stopc are set before the callers start; the rest is guarded by
// mu.
type grpcLoad struct {
	conn  *grpc.ClientConn
	stopc chan struct{}
	once  sync.Once
	wg    sync.WaitGroup

	mu    sync.Mutex
	fails []grpcFailure
}

// grpcFailure is a failed call, or (no kind) the load running into its
// limit.
type grpcFailure struct {
	kind   string
	worker int
	err    error
}

// startGRPCLoad starts the gRPC callers on conn, each passing g before
// each call; stopped at cleanup.
func startGRPCLoad(t *testing.T, conn *grpc.ClientConn, g *callGate) *grpcLoad {
	t.Helper()
	l := &grpcLoad{conn: conn, stopc: make(chan struct{})}
	end := time.Now().Add(loadLimit)
	ctx := t.Context()
	for w := range unaryWorkers {
		l.wg.Go(func() { l.run(ctx, g, end, kindUnary, w, unaryCall) })
	}
	for w := range bidiWorkers {
		l.wg.Go(func() { l.run(ctx, g, end, kindBidi, w, bidiCall) })
	}
	t.Cleanup(l.stop)
	return l
}

// run is caller w of kind: it calls until stopped. A call does not
// start past end: the caller records that the load was not stopped in
// time, and ends.
func (l *grpcLoad) run(ctx context.Context, g *callGate, end time.Time, kind string, w int,
	call func(ctx context.Context, conn *grpc.ClientConn, w, i int) error) {
	for i := 0; ; i++ {
		select {
		case <-l.stopc:
			return
		default:
		}
		g.pass()
		if time.Now().After(end) {
			l.record(grpcFailure{err: fmt.Errorf("the gRPC load was not stopped within %s", loadLimit)})
			return
		}
		callCtx, cancel := context.WithTimeout(ctx, waitTimeout)
		err := call(callCtx, l.conn, w, i)
		cancel()
		if err != nil {
			l.record(grpcFailure{kind: kind, worker: w, err: err})
		}
	}
}

func (l *grpcLoad) record(f grpcFailure) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.fails = append(l.fails, f)
}

// stop stops the callers and waits for them; safe to call more than once.
func (l *grpcLoad) stop() {
	l.once.Do(func() { close(l.stopc) })
	l.wg.Wait()
}

// failures returns the calls that failed so far.
func (l *grpcLoad) failures() []grpcFailure {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.fails)
}

func formatGRPCFailures(fails []grpcFailure) string {
	var b strings.Builder
	for _, f := range fails[:min(20, len(fails))] {
		fmt.Fprintf(&b, "  %s worker %d: %v\n", f.kind, f.worker, f.err)
	}
	return b.String()
}

// unaryCall makes call i of unary caller w.
func unaryCall(ctx context.Context, conn *grpc.ClientConn, w, i int) error {
	req := fmt.Appendf(nil, "%s w%d i%d", kindUnary, w, i)
	resp, err := invoke(ctx, conn, upstreamUnary, req)
	if err != nil {
		return err
	}
	if !bytes.Equal(resp, req) {
		return fmt.Errorf("answered %q, want %q", resp, req)
	}
	return nil
}

// bidiCall makes call i of bidi caller w: a stream of three messages,
// each echoed before the next is sent.
func bidiCall(ctx context.Context, conn *grpc.ClientConn, w, i int) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := conn.NewStream(ctx, &upstreamDesc.Streams[0], upstreamEcho)
	if err != nil {
		return err
	}
	for j := range 3 {
		m := fmt.Appendf(nil, "%s w%d i%d m%d", kindBidi, w, i, j)
		if err := s.SendMsg(m); err != nil {
			if errors.Is(err, io.EOF) {
				// The stream ended: RecvMsg says how.
				_, err = recvBytes(s)
			}
			return fmt.Errorf("sending message %d: %w", j, err)
		}
		got, err := recvBytes(s)
		if err != nil {
			return fmt.Errorf("receiving message %d: %w", j, err)
		}
		if !bytes.Equal(got, m) {
			return fmt.Errorf("echo of %q is %q", m, got)
		}
	}
	if err := s.CloseSend(); err != nil {
		return err
	}
	if m, err := recvBytes(s); !errors.Is(err, io.EOF) {
		return fmt.Errorf("after CloseSend: got %q, %v; want io.EOF", m, err)
	}
	return nil
}
