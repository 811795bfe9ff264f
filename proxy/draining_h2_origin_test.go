package proxy

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/ebb-proxy/ebb/proxy/h2"
	"github.com/ebb-proxy/ebb/proxy/proxytest"
)

// An HTTP/2 upstream that drains tells ebb which streams it will not
// process: those above the last stream id of its GOAWAY, and those it
// resets with REFUSED_STREAM (RFC 9113 §8.7). ebb sends those again,
// whatever their method, and the streams the upstream keeps end as they
// would have: their clients see no error at all.

// h2Req is what a raw h2c origin received on one stream.
type h2Req struct {
	id           uint32
	method, path string
	body         []byte
	ended        bool
}

// echo is what an echoing origin answers r with.
func (r *h2Req) echo() string { return r.method + " " + r.path + " " + string(r.body) }

// drainConn is one connection of a drainOrigin.
type drainConn struct {
	*proxytest.H2CConn
	n      int // 1 for the origin's first connection, and so on
	reqs   map[uint32]*h2Req
	served chan<- servedReq
}

// servedReq is a request a drainOrigin's echo answered, and the
// connection it came on.
type servedReq struct {
	conn int
	req  string
}

// take follows f into the request of its stream, which it returns (nil:
// f is no request's, or the stream is forgotten).
func (d *drainConn) take(f http2.Frame) *h2Req {
	switch f := f.(type) {
	case *http2.MetaHeadersFrame:
		r := &h2Req{id: f.StreamID, method: f.PseudoValue("method"), path: f.PseudoValue("path"), ended: f.StreamEnded()}
		d.reqs[f.StreamID] = r
		return r
	case *http2.DataFrame:
		r := d.reqs[f.StreamID]
		if r != nil {
			r.body = append(r.body, f.Data()...)
			r.ended = f.StreamEnded()
		}
		return r
	}
	return nil
}

// answer writes a 200 response with body on stream id, in DATA frames of
// at most 4 KiB.
func (d *drainConn) answer(id uint32, body string) error {
	err := d.Fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, EndHeaders: true, EndStream: body == "",
		BlockFragment: d.Block([][2]string{{":status", "200"}, {"content-length", strconv.Itoa(len(body))}})})
	for len(body) > 0 && err == nil {
		n := min(len(body), 4<<10)
		err = d.Fr.WriteData(id, n == len(body), []byte(body[:n]))
		body = body[n:]
	}
	return err
}

// serve answers r with its echo, and reports it.
func (d *drainConn) serve(r *h2Req) bool {
	d.served <- servedReq{d.n, r.echo()}
	delete(d.reqs, r.id)
	return d.answer(r.id, r.echo()) == nil
}

// drainOrigin is a raw h2c origin that hands play every frame of every
// connection (past the SETTINGS and PINGs H2CFrames answers) with the
// request it belongs to (nil: none), on the connection's goroutine; play
// returning false ends the connection.
func drainOrigin(t *testing.T, play func(d *drainConn, r *h2Req, f http2.Frame) bool) (addr string, served <-chan servedReq) {
	ch := make(chan servedReq, 64) // more than a test sends: a send never blocks
	var (
		mu    sync.Mutex
		conns = map[*proxytest.H2CConn]*drainConn{}
	)
	addr = proxytest.H2CFrames(t, true, func(c *proxytest.H2CConn, f http2.Frame) bool {
		mu.Lock()
		d := conns[c]
		if d == nil {
			d = &drainConn{H2CConn: c, n: len(conns) + 1, reqs: map[uint32]*h2Req{}, served: ch}
			conns[c] = d
		}
		mu.Unlock()
		return play(d, d.take(f), f)
	})
	return addr, ch
}

// drained returns what was sent on ch so far.
func drained[T any](ch <-chan T) []T {
	var out []T
	for {
		select {
		case v := <-ch:
			out = append(out, v)
		default:
			return out
		}
	}
}

// drainClient returns a client of ebb speaking down.
func drainClient(t *testing.T, down proxytest.Downstream) *http.Client {
	return proxytest.ModeClient(t, proxytest.Mode{Down: down}, nil)
}

// drainExchange sends method path with body ("": none) through c to ebb
// at addr, bounded by hostileGuard.
func drainExchange(t *testing.T, c *http.Client, addr, method, path, body string) (int, string, error) {
	ctx, cancel := context.WithTimeout(t.Context(), hostileGuard)
	defer cancel()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://"+addr+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	return exchangeWith(c, req)
}

var drainDowns = []struct {
	name string
	down proxytest.Downstream
}{{"h1", proxytest.DownH1}, {"h2c", proxytest.DownH2C}}

var drainBodies = []struct{ name, body string }{{"body", "pay once"}, {"no-body", ""}}

// TestHostileH2OriginDraining plays an h2c upstream that stops processing
// streams: the requests it did not process are sent again and answered,
// those it kept are answered by it, and no client sees an error.
func TestHostileH2OriginDraining(t *testing.T) {
	for _, dn := range drainDowns {
		for _, b := range drainBodies {
			t.Run("goaway-below-open-stream/"+dn.name+"/"+b.name, func(t *testing.T) {
				t.Parallel()
				goAwayBelowOpenStream(t, dn.down, b.body)
			})
			t.Run("refused-stream/"+dn.name+"/"+b.name, func(t *testing.T) {
				t.Parallel()
				refusedStream(t, dn.down, b.body)
			})
		}
	}
	for _, twoPhase := range []bool{false, true} {
		name := map[bool]string{false: "one-phase", true: "two-phase"}[twoPhase]
		t.Run("goaway-keeps-open-streams/"+name, func(t *testing.T) {
			t.Parallel()
			goAwayKeepsOpenStreams(t, twoPhase)
		})
	}
	t.Run("graceful-shutdown-under-load/go", func(t *testing.T) {
		t.Parallel()
		addr, shutdown := proxytest.H2CServerShutdown(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, err := io.ReadAll(r.Body)
			if err != nil {
				return
			}
			io.WriteString(w, r.Method+" "+r.URL.Path+" "+string(body))
		}))
		drainUnderLoad(t, addr, shutdown)
	})
	t.Run("graceful-shutdown-under-load/ebb-two-phase", func(t *testing.T) {
		t.Parallel()
		addr, drain := ebbH2Upstream(t, h2.HandlerFunc(func(st *h2.Stream) {
			body, err := io.ReadAll(st.Body())
			if err != nil || st.WriteHeader(http.StatusOK, false) != nil {
				return
			}
			if _, err := io.WriteString(st, string(st.Method())+" "+string(st.Path())+" "+string(body)); err == nil {
				st.End()
			}
		}))
		drainUnderLoad(t, addr, drain)
	})
}

// goAwayBelowOpenStream: the upstream holds the answer to a GET on its
// first connection; ebb opens a second stream there for a POST; the
// upstream goes away with the GET's stream as the last, answers the GET
// and closes. The POST was not processed: it goes again, on a new
// connection, and its client gets the answer to it, once.
func goAwayBelowOpenStream(t *testing.T, down proxytest.Downstream, body string) {
	events := make(chan string, 4)
	var held *h2Req // the first connection's
	origin, served := drainOrigin(t, func(d *drainConn, r *h2Req, f http2.Frame) bool {
		if d.n > 1 {
			return r == nil || !r.ended || d.serve(r)
		}
		if _, ok := f.(*http2.MetaHeadersFrame); !ok {
			return true
		}
		if held == nil {
			held = r
			events <- "held"
			return true
		}
		events <- fmt.Sprintf("GOAWAY %d with stream %d open", held.id, r.id)
		d.Fr.WriteGoAway(held.id, http2.ErrCodeNo, nil)
		d.answer(held.id, "held")
		closeGracefully(d.Conn, d.Reader)
		return false
	})
	e := startEbb(t, oneClusterYAML(origin, nil, []string{"protocol: h2c"}))
	type result struct {
		code int
		body string
		err  error
	}
	first := make(chan result, 1)
	var clients sync.WaitGroup
	defer clients.Wait()
	clients.Go(func() {
		code, body, err := drainExchange(t, newClient(t), e.addr("public"), http.MethodGet, "/hold", "")
		first <- result{code, body, err}
	})
	within(t, events, hostileGuard, "the upstream to hold the first request")
	code, got, err := drainExchange(t, drainClient(t, down), e.addr("public"), http.MethodPost, "/post", body)
	if want := "POST /post " + body; err != nil || code != http.StatusOK || got != want {
		t.Errorf("the POST got %d %q (%v), want 200 %q", code, got, err, want)
	}
	if r := within(t, first, hostileGuard, "the first request's answer"); r.err != nil || r.code != http.StatusOK || r.body != "held" {
		t.Errorf("the GET kept by the GOAWAY got %d %q (%v), want 200 \"held\"", r.code, r.body, r.err)
	}
	if ev := drained(events); !slices.Equal(ev, []string{"GOAWAY 1 with stream 3 open"}) {
		t.Errorf("the upstream's first connection: %q, want the POST on stream 3 above a GOAWAY's last stream 1", ev)
	}
	if s := drained(served); !slices.Equal(s, []servedReq{{2, "POST /post " + body}}) {
		t.Errorf("the upstream served %v, want the POST once, on its second connection", s)
	}
}

// refusedStream: the upstream refuses the POST's stream
// (RST_STREAM(REFUSED_STREAM)) and serves every other; the POST goes
// again and its client gets the answer to it, once.
func refusedStream(t *testing.T, down proxytest.Downstream, body string) {
	var refused atomic.Int32
	origin, served := drainOrigin(t, func(d *drainConn, r *h2Req, f http2.Frame) bool {
		if r == nil {
			return true
		}
		if _, ok := f.(*http2.MetaHeadersFrame); ok && r.method == http.MethodPost && refused.Add(1) == 1 {
			delete(d.reqs, r.id) // its DATA frames are ignored
			return d.Fr.WriteRSTStream(r.id, http2.ErrCodeRefusedStream) == nil
		}
		return !r.ended || d.serve(r)
	})
	e := startEbb(t, oneClusterYAML(origin, nil, []string{"protocol: h2c"}))
	code, got, err := drainExchange(t, drainClient(t, down), e.addr("public"), http.MethodPost, "/post", body)
	if want := "POST /post " + body; err != nil || code != http.StatusOK || got != want {
		t.Errorf("the POST got %d %q (%v), want 200 %q", code, got, err, want)
	}
	if n := refused.Load(); n != 2 {
		t.Errorf("the upstream saw the POST's HEADERS %d times, want 2 (refused, then served)", n)
	}
	var reqs []string
	for _, s := range drained(served) {
		reqs = append(reqs, s.req)
	}
	if !slices.Equal(reqs, []string{"POST /post " + body}) {
		t.Errorf("the upstream served %q, want the POST once", reqs)
	}
}

// drainPing is the PING of goAwayKeepsOpenStreams' two-phase GOAWAY.
var drainPing = [8]byte{'d', 'r', 'a', 'i', 'n'}

// goAwayKeepsOpenStreams: the upstream holds a GET (an HTTP/1.1 client's)
// and a POST (an h2c client's) on its first connection, goes away with
// the POST's stream as the last (at once, or in two phases: a GOAWAY
// with the largest stream id and a PING, the final GOAWAY once the PING
// is acknowledged), and then answers both, 16 KiB each. Both clients get
// those answers, and nothing is sent again.
func goAwayKeepsOpenStreams(t *testing.T, twoPhase bool) {
	events := make(chan string, 4)
	long := func(r *h2Req) string { return strings.Repeat(r.echo()+"\n", (16<<10)/(len(r.echo())+1)) }
	var held []*h2Req // the first connection's
	origin, served := drainOrigin(t, func(d *drainConn, r *h2Req, f http2.Frame) bool {
		if d.n > 1 {
			return r == nil || !r.ended || d.serve(r)
		}
		final := func() bool {
			d.Fr.WriteGoAway(held[1].id, http2.ErrCodeNo, nil)
			for _, h := range held {
				if d.answer(h.id, long(h)) != nil {
					return false
				}
			}
			closeGracefully(d.Conn, d.Reader)
			return false
		}
		if p, ok := f.(*http2.PingFrame); ok && p.IsAck() && p.Data == drainPing && len(held) == 2 {
			return final()
		}
		if r == nil || !r.ended {
			return true
		}
		held = append(held, r)
		events <- "got " + r.path
		switch {
		case len(held) < 2:
			return true
		case twoPhase:
			return d.Fr.WriteGoAway(1<<31-1, http2.ErrCodeNo, nil) == nil && d.Fr.WritePing(false, drainPing) == nil
		}
		return final()
	})
	e := startEbb(t, oneClusterYAML(origin, nil, []string{"protocol: h2c"}))
	type result struct {
		code int
		body string
		err  error
	}
	results := make(chan result, 2)
	var clients sync.WaitGroup
	defer clients.Wait()
	clients.Go(func() {
		code, body, err := drainExchange(t, newClient(t), e.addr("public"), http.MethodGet, "/a", "")
		results <- result{code, body, err}
	})
	within(t, events, hostileGuard, "the upstream to hold the GET")
	h2c := drainClient(t, proxytest.DownH2C)
	clients.Go(func() {
		code, body, err := drainExchange(t, h2c, e.addr("public"), http.MethodPost, "/b", "pay once")
		results <- result{code, body, err}
	})
	want := map[string]bool{long(&h2Req{method: "GET", path: "/a"}): true, long(&h2Req{method: "POST", path: "/b", body: []byte("pay once")}): true}
	for range 2 {
		r := within(t, results, hostileGuard, "an answer")
		if r.err != nil || r.code != http.StatusOK || !want[r.body] {
			t.Errorf("a client got %d, %d bytes (%v), want 200 and the upstream's answer to it", r.code, len(r.body), r.err)
		}
		delete(want, r.body)
	}
	if s := drained(served); len(s) != 0 {
		t.Errorf("requests went to the upstream again: %v", s)
	}
}

// drainUnderLoad runs HTTP/1.1 keep-alive clients and h2c clients
// through ebb to a cluster of two h2c endpoints, drain's and another, and
// drains the first while they run: every request is answered, its own
// answer, with no error.
func drainUnderLoad(t *testing.T, draining string, drain func(ctx context.Context) error) {
	other, _ := proxytest.H2CServerShutdown(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		io.WriteString(w, r.Method+" "+r.URL.Path+" "+string(body))
	}))
	e := startEbb(t, fmt.Sprintf(`
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
    discovery: { static: [%q, %q] }
    timeouts: { connect: 1s, response: %s }
`, draining, other, hostileResponse))
	const (
		perKind   = 3  // clients of each kind
		perClient = 40 // requests of each client
		total     = 2 * perKind * perClient
		drainAt   = total / 4 // requests answered when the drain begins
	)
	var (
		mu       sync.Mutex
		failures []string
		answered atomic.Int32
	)
	begin := make(chan struct{})
	finished := make(chan struct{})
	var load sync.WaitGroup
	for i := range 2 * perKind {
		down := proxytest.DownH1
		if i%2 == 1 {
			down = proxytest.DownH2C
		}
		c := drainClient(t, down)
		load.Go(func() {
			for j := range perClient {
				path := fmt.Sprintf("/c%d/%d", i, j)
				method, body := http.MethodGet, ""
				switch j % 3 {
				case 1:
					method, body = http.MethodPost, fmt.Sprintf("body of %d/%d", i, j)
				case 2:
					method = http.MethodPost
				}
				code, got, err := drainExchange(t, c, e.addr("public"), method, path, body)
				if want := method + " " + path + " " + body; err != nil || code != http.StatusOK || got != want {
					mu.Lock()
					failures = append(failures, fmt.Sprintf("%s %s: %d %q (%v)", method, path, code, got, err))
					mu.Unlock()
				}
				if answered.Add(1) == drainAt {
					close(begin)
				}
			}
		})
	}
	drainErr := make(chan error, 1)
	var drainer sync.WaitGroup
	drainer.Go(func() {
		select {
		case <-begin:
		case <-finished:
			drainErr <- fmt.Errorf("the load ended before the drain began")
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), hostileGuard)
		defer cancel()
		drainErr <- drain(ctx)
	})
	load.Wait()
	close(finished)
	drainer.Wait()
	if err := <-drainErr; err != nil {
		t.Errorf("draining the endpoint: %v", err)
	}
	if n := answered.Load(); n != total {
		t.Fatalf("%d requests answered, want %d", n, total)
	}
	if len(failures) != 0 {
		t.Errorf("%d of %d requests failed while an endpoint drained, want 0; the first: %q", len(failures), total, failures[:min(len(failures), 5)])
	}
}

// ebbH2Upstream serves h with ebb's own HTTP/2 engine (proxy/h2), h2c,
// on a loopback port: an upstream whose drain is the two-phase GOAWAY of
// RFC 9113 §6.8 (h2.Conn.GoAway). drain stops accepting, starts each
// connection's GoAway (1 s of grace for the PING's acknowledgement) and
// returns once every connection has ended.
func ebbH2Upstream(t *testing.T, h h2.Handler) (addr string, drain func(ctx context.Context) error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &h2.Server{Handler: h}
	var (
		mu       sync.Mutex
		conns    = map[*h2.Conn]net.Conn{}
		live     int
		draining bool
		ended    = make(chan struct{}) // closed when draining and no connection is left
		endOnce  sync.Once
	)
	endLocked := func() {
		if draining && live == 0 {
			endOnce.Do(func() { close(ended) })
		}
	}
	goAway := func(c *h2.Conn) { c.GoAway(time.Second, 100*time.Millisecond) }
	var serving sync.WaitGroup
	serving.Go(func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			live++
			mu.Unlock()
			serving.Go(func() {
				var conn *h2.Conn
				srv.Serve(context.Background(), nc, func(c *h2.Conn) {
					mu.Lock()
					defer mu.Unlock()
					conn, conns[c] = c, nc
					if draining {
						goAway(c)
					}
				})
				nc.Close()
				mu.Lock()
				defer mu.Unlock()
				delete(conns, conn)
				live--
				endLocked()
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, nc := range conns {
			nc.Close()
		}
		mu.Unlock()
		serving.Wait()
	})
	return ln.Addr().String(), func(ctx context.Context) error {
		ln.Close()
		mu.Lock()
		draining = true
		for c := range conns {
			goAway(c)
		}
		endLocked()
		mu.Unlock()
		select {
		case <-ended:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("connections still open: %w", ctx.Err())
		}
	}
}
