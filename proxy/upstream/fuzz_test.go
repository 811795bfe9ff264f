//go:build linux

package upstream_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"golang.org/x/sys/unix"

	"github.com/ebb-proxy/ebb/proxy/proxytest"
	"github.com/ebb-proxy/ebb/proxy/upstream"
)

// The bounds FuzzH1UpstreamResponse holds the transport to.
const (
	// maxBufferedBody is the transport's own bound on a body it reads
	// whole (upstream.maxBufferedBody).
	maxBufferedBody = 64 << 10
	// fuzzStreamRead is as much of a streamed body as the test reads
	// before it closes the stream.
	fuzzStreamRead = 256 << 10
	// fuzzResponseTimeout is the cluster's timeouts.response while
	// fuzzing: what an origin that leaves an answer unfinished costs an
	// execution, which is most of the fuzzing's time. A loopback exchange
	// takes well under a millisecond; one that takes longer only fails,
	// which the checks allow.
	fuzzResponseTimeout = 5 * time.Millisecond
)

// smuggledResponse is a whole response a broken origin writes where none
// is due: if it ever reaches a request, that request got another one's
// answer.
const smuggledResponse = "HTTP/1.1 200 OK\r\nContent-Length: 8\r\nX-Smuggled: yes\r\n\r\nSMUGGLED"

// FuzzH1UpstreamResponse has an origin answer the transport's first
// request with the fuzzer's bytes, in one write or two (the second once
// the transport has returned the response to the test, as bytes that
// arrive later), the connection then closed or kept as the fuzzer says;
// any other request it answers properly, with a body of its own that the
// fuzzer cannot know (a token drawn per execution). Request 1 (GET, HEAD
// or POST) is read as a client would, a streamed body through a bounded
// read; then request 2 goes through the same transport. Whatever the
// bytes: no panic; request 1 gets no interim status as its final one, no
// body where none can be (HEAD, 204, 304), a header within the read
// buffer and a buffered body within 64 KiB; request 2 gets an error or
// exactly its own answer; each exchange ends once, and every connection
// the transport opened is closed once its pool is. The seeds are the
// framings a proxy gets wrong (h1Seeds); testdata/fuzz holds what fuzzing
// found beyond them.
func FuzzH1UpstreamResponse(f *testing.F) {
	for _, s := range h1Seeds() {
		f.Add(s.method, s.split, s.close, []byte(s.answer))
	}
	o := newH1FuzzOrigin(f)
	// The fuzzing must reach the paths it is for: a sound answer keeps its
	// connection for request 2, and one followed by bytes that arrive
	// later loses it.
	if dials := o.exchange(f, time.Second, fuzzGET, 0, false, []byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")); dials != 1 {
		f.Fatalf("a sound answer: %d connections, want 1 (reused)", dials)
	}
	late := "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok" + smuggledResponse
	if dials := o.exchange(f, time.Second, fuzzGET, uint32(len(late)-len(smuggledResponse)), false, []byte(late)); dials != 2 {
		f.Fatalf("an answer with bytes after it later: %d connections, want 2", dials)
	}
	f.Fuzz(func(t *testing.T, method uint8, split uint32, closeAfter bool, answer []byte) {
		if len(answer) > 1<<20 {
			return
		}
		o.exchange(t, fuzzResponseTimeout, method, split, closeAfter, answer)
	})
}

// Request 1's method is the fuzzer's method byte modulo 3.
const (
	fuzzGET = iota
	fuzzHEAD
	fuzzPOST
)

type h1Seed struct {
	method uint8
	split  uint32 // 0: one write
	close  bool
	answer string
}

// h1Seeds are the answers that broke, or could break, the framing of the
// transport.
func h1Seeds() []h1Seed {
	ok := "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"
	at := func(s, sep string) uint32 { return uint32(strings.Index(s, sep) + len(sep)) }
	chunkedTrailers := "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-T\r\n\r\n5\r\nhello\r\n0\r\nX-T: 1\r\n\r\n"
	head204 := "HTTP/1.1 204 No Content\r\nContent-Length: 63\r\n\r\n"
	chunked204 := "HTTP/1.1 204 No Content\r\nTransfer-Encoding: chunked\r\n\r\n"
	headOK := "HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\n"
	big := "HTTP/1.1 200 OK\r\nContent-Length: 65537\r\n\r\n" + strings.Repeat("b", 65537)
	return []h1Seed{
		{answer: ok},
		{method: fuzzPOST, answer: ok, close: true},
		{answer: "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok"},
		// RFC 9112 §6.3: no body after a 204 or a HEAD answer, whatever
		// the fields say; the body is there at once, or arrives later.
		{answer: head204 + smuggledResponse},
		{answer: head204 + smuggledResponse, split: uint32(len(head204))},
		{answer: "HTTP/1.1 304 Not Modified\r\nContent-Length: 8\r\n\r\nSMUGGLED"},
		{answer: chunked204 + "3c\r\n" + smuggledResponse + "\r\n0\r\n\r\n", split: uint32(len(chunked204))},
		{method: fuzzHEAD, answer: headOK + "SMUGGLED"},
		{method: fuzzHEAD, answer: headOK + "SMUGGLED", split: uint32(len(headOK))},
		{method: fuzzHEAD, answer: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n8\r\nSMUGGLED\r\n0\r\n\r\n"},
		// RFC 9112 §6.3: both framings.
		{answer: "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + smuggledResponse},
		{answer: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 48\r\n\r\n0\r\n\r\n" + smuggledResponse},
		{answer: "HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"},
		{answer: "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 8\r\n\r\nok" + "SMUGGLED"},
		// A 101 nobody asked for: what follows is not HTTP.
		{answer: "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n" + smuggledResponse},
		// Interim answers before the final one, and too many of them.
		{method: fuzzPOST, answer: "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>; rel=preload\r\n\r\n" + ok},
		{answer: strings.Repeat("HTTP/1.1 100 Continue\r\n\r\n", 17) + ok},
		// Bytes beyond the body's end, at once or later.
		{answer: "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok" + smuggledResponse},
		{answer: ok + smuggledResponse, split: uint32(len(ok))},
		{answer: ok + smuggledResponse, split: uint32(len(ok)), close: true},
		{answer: chunkedTrailers},
		{answer: chunkedTrailers + smuggledResponse, split: uint32(len(chunkedTrailers))},
		{answer: chunkedTrailers + smuggledResponse, split: at(chunkedTrailers, "hello")},
		{answer: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\nzz\r\n\r\n"},
		{answer: "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n"},
		// A body that ends with the connection.
		{answer: "HTTP/1.1 200 OK\r\n\r\nuntil the end", close: true},
		{answer: "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok"},
		// What fasthttp's parser tolerates and the transport must not.
		{answer: "HTTP/1.1 200 OK\r\nX-A: 1\r\n folded\r\nContent-Length: 2\r\n\r\nok"},
		{answer: "HTTP/1.1 200 OK\r\nTransfer Encoding: chunked\r\nContent-Length: 2\r\n\r\nok"},
		{answer: "HTTP/1.1 200 OK\r\nContent-Length : 2\r\n\r\nok"},
		{answer: "HTTP/1.1 200 OK\nContent-Length: 2\n\nok"},
		{answer: "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-A: a\rb\r\n\r\nok"},
		{answer: "\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"},
		{answer: "HTTP/2.0 200 OK\r\nContent-Length: 2\r\n\r\nok"},
		{answer: "HTTP/1.1 000 Zero\r\nContent-Length: 2\r\n\r\nok"},
		{answer: "HTTP/1.1 999 Big\r\nContent-Length: 2\r\n\r\nok"},
		{answer: "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\nok"},
		// An answer cut short, and a head larger than the read buffer.
		{answer: "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhello", close: true},
		{answer: "HTTP/1.1 200 OK\r\nX-Big: " + strings.Repeat("x", upstream.ReadBufferSize) + "\r\n\r\n"},
		// A body too large to be buffered, streamed.
		{answer: big},
		{answer: big + smuggledResponse, split: uint32(len(big) - 10)},
	}
}

// h1FuzzOrigin is the origin of FuzzH1UpstreamResponse (see
// proxytest.FuzzOrigin and proxytest.FuzzExec): it answers request 1 of
// the current execution with the execution's bytes.
type h1FuzzOrigin struct {
	*proxytest.FuzzOrigin
	cur atomic.Pointer[h1Exec]
	n   atomic.Uint64 // executions so far
}

// h1Exec is one execution: what the origin answers, and the transport's
// connections. The fields above mu are read-only once the execution is
// current; conns is shared by the test and the origin's goroutines.
type h1Exec struct {
	*proxytest.FuzzExec
	answer     []byte
	late       []byte // written once Release is closed (nil: none)
	closeAfter bool

	mu    sync.Mutex
	conns map[string]*net.TCPConn // the transport's connections, by local address
}

func newH1FuzzOrigin(tb testing.TB) *h1FuzzOrigin {
	o := &h1FuzzOrigin{}
	o.FuzzOrigin = proxytest.NewFuzzOrigin(tb, o.serve)
	return o
}

func (o *h1FuzzOrigin) serve(c net.Conn, br *bufio.Reader) {
	sent := 0 // bytes written on c
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return // the transport closed the connection
		}
		if _, err := io.Copy(io.Discard, req.Body); err != nil {
			return
		}
		x := o.cur.Load()
		var n int
		var ok bool
		if x != nil {
			n, ok = x.Request(req.URL.Path)
		}
		switch {
		case !ok:
			return
		case n == 1 && x.Take():
			if !x.answerFirst(c, sent) {
				return
			}
		default:
			body := x.Token + req.URL.Path
			n, err := fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
			sent += n
			if err != nil {
				return
			}
		}
	}
}

// answerFirst writes the answer to request 1 on c, which carried sent
// bytes before, its late part once the test has its response, and the
// connection's end if it ends; delivered is closed once all of it has
// reached the transport's socket. keep reports that the connection
// carries on.
func (x *h1Exec) answerFirst(c net.Conn, sent int) (keep bool) {
	defer x.Deliver()
	n, err := c.Write(x.answer)
	sent += n
	if x.late != nil {
		<-x.Release
		if err == nil {
			n, err = c.Write(x.late)
			sent += n
		}
	}
	if err == nil && x.closeAfter {
		err = c.(*net.TCPConn).CloseWrite()
	}
	if err == nil {
		x.waitReceived(c.RemoteAddr().String(), uint64(sent), x.closeAfter)
	}
	return err == nil && !x.closeAfter
}

// waitReceived waits until the transport's socket at addr has received
// sent bytes, and the origin's FIN if fin, so that the transport's check
// of an idle connection sees them; or until that socket is closed, or
// proxytest.WaitTimeout has passed. It asks the receiving socket
// (TCP_INFO's bytes_received and state) rather than wait for the
// acknowledgement, which the receiver may delay by 40 ms.
func (x *h1Exec) waitReceived(addr string, sent uint64, fin bool) {
	x.mu.Lock()
	peer := x.conns[addr]
	x.mu.Unlock()
	if peer == nil {
		return
	}
	raw, err := peer.SyscallConn()
	if err != nil {
		return
	}
	var tick *time.Ticker
	deadline := time.Now().Add(proxytest.WaitTimeout)
	for time.Now().Before(deadline) {
		done := true
		if raw.Control(func(fd uintptr) {
			info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
			done = err != nil || info.Bytes_received >= sent && (!fin || info.State != unix.BPF_TCP_ESTABLISHED)
		}) != nil || done {
			return
		}
		if tick == nil {
			tick = time.NewTicker(100 * time.Microsecond)
			defer tick.Stop()
		}
		<-tick.C
	}
}

// countedConn counts the closes of the transport's connections.
type countedConn struct {
	*net.TCPConn
	once   sync.Once
	closes *atomic.Int32
}

func (c *countedConn) Close() error {
	c.once.Do(func() { c.closes.Add(1) })
	return c.TCPConn.Close()
}

// exchange runs one execution, the cluster's timeouts.response being
// timeout: request 1 (method) answered with answer, split at split (0: in
// one write), the connection then closed or not; then request 2. It
// returns the connections the transport opened.
func (o *h1FuzzOrigin) exchange(tb testing.TB, timeout time.Duration, method uint8, split uint32, closeAfter bool, answer []byte) (dials int32) {
	tb.Helper()
	x := &h1Exec{FuzzExec: proxytest.NewFuzzExec(o.n.Add(1)), answer: answer, closeAfter: closeAfter, conns: map[string]*net.TCPConn{}}
	if s := int(split); s > 0 && s < len(answer) {
		x.answer, x.late = answer[:s], answer[s:]
	}
	o.cur.Store(x)
	defer o.cur.CompareAndSwap(x, nil)
	defer x.ReleaseFirst() // whatever happens: the origin waits for it

	var opened, closes, done atomic.Int32
	cfg := proxytest.Cluster(o.Addr)
	cfg.Timeouts.Response = timeout
	// A new transport per execution, so that each is reproducible: its
	// pool's cleaner ends that long after its last connection closed.
	cfg.Timeouts.Idle = time.Second
	tr := upstream.NewH1(o.Addr, &cfg, func() (net.Conn, error) {
		nc, err := net.DialTimeout("tcp", o.Addr, cfg.Timeouts.Connect)
		if err != nil {
			return nil, err
		}
		opened.Add(1)
		tc := nc.(*net.TCPConn)
		x.mu.Lock()
		x.conns[tc.LocalAddr().String()] = tc
		x.mu.Unlock()
		return upstream.NewConn(&countedConn{TCPConn: tc, closes: &closes}, cfg.Timeouts.Response), nil
	}, func() { done.Add(1) })
	defer tr.CloseIdle()
	input := func() string {
		return fmt.Sprintf("method %d, split %d, close %v, answer %q", method%3, split, closeAfter, answer)
	}

	// Request 1.
	var req fasthttp.Request
	var resp fasthttp.Response
	req.Header.SetHost("example.com")
	req.SetRequestURI(fmt.Sprintf("/%d/1", x.ID))
	switch method % 3 {
	case fuzzGET:
		req.Header.SetMethod(fasthttp.MethodGet)
	case fuzzHEAD:
		req.Header.SetMethod(fasthttp.MethodHead)
	case fuzzPOST:
		req.Header.SetMethod(fasthttp.MethodPost)
		req.SetBodyString("hello")
	}
	err := tr.RoundTrip(context.Background(), &req, &resp)
	x.ReleaseFirst()
	if err == nil {
		checkFirst(tb, method%3 == fuzzHEAD, &resp, input)
	}
	if n := done.Load(); n != 1 {
		tb.Fatalf("exchange 1 ended %d times, want once (err %v), for %s", n, err, input())
	}
	if x.PastFirst() {
		select {
		case <-x.Delivered:
		case <-time.After(proxytest.WaitTimeout):
			tb.Fatalf("the origin never finished its answer, for %s", input())
		}
	}

	// Request 2: an error, or its own answer.
	req.Reset()
	resp.Reset()
	req.Header.SetHost("example.com")
	path := fmt.Sprintf("/%d/2", x.ID)
	req.SetRequestURI(path)
	if err := tr.RoundTrip(context.Background(), &req, &resp); err == nil {
		body := resp.Body()
		if resp.IsBodyStream() {
			b, _ := io.ReadAll(io.LimitReader(resp.BodyStream(), fuzzStreamRead))
			resp.CloseBodyStream()
			body = b
		}
		if want := x.Token + path; resp.StatusCode() != 200 || string(body) != want {
			tb.Fatalf("request 2 got %d %q, want 200 %q, for %s", resp.StatusCode(), body, want, input())
		}
	}
	if n := done.Load(); n != 2 {
		tb.Fatalf("exchanges ended %d times, want twice, for %s", n, input())
	}
	tr.CloseIdle()
	if o, c := opened.Load(), closes.Load(); o != c {
		tb.Fatalf("%d connections opened, %d closed once the pool was emptied, for %s", o, c, input())
	}
	return opened.Load()
}

// checkFirst checks the response to request 1 as the transport returned
// it, and reads its body as a client would, a streamed one up to
// fuzzStreamRead.
func checkFirst(tb testing.TB, head bool, resp *fasthttp.Response, input func() string) {
	tb.Helper()
	status := resp.StatusCode()
	if status < 200 {
		tb.Fatalf("an interim status %d as the final answer, for %s", status, input())
	}
	size := 0
	for k, v := range resp.Header.All() {
		size += len(k) + len(v)
	}
	if size > upstream.ReadBufferSize {
		tb.Fatalf("a header of %d bytes, beyond the read buffer's %d, for %s", size, upstream.ReadBufferSize, input())
	}
	noBody := head || status == fasthttp.StatusNoContent || status == fasthttp.StatusNotModified
	if !resp.IsBodyStream() {
		if n := len(resp.Body()); n > maxBufferedBody || noBody && n > 0 {
			tb.Fatalf("status %d (HEAD %v) with a buffered body of %d bytes, for %s", status, head, n, input())
		}
		return
	}
	if cl := resp.Header.ContentLength(); noBody || cl >= 0 && cl <= maxBufferedBody {
		tb.Fatalf("status %d (HEAD %v) with a body of length %d streamed, for %s", status, head, cl, input())
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.BodyStream(), fuzzStreamRead))
	_ = resp.CloseBodyStream()
}
