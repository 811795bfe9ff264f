package proxy

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/ebb-proxy/ebb/config"
)

// closingOrigin answers one request per connection with keep-alive headers
// and then closes the connection, as an upstream does when its idle timeout
// fires. Each closed connection is reported on the returned channel.
func closingOrigin(t *testing.T) (string, <-chan struct{}) {
	closed := make(chan struct{}, 16)
	addr := tcpOrigin(t, func(c net.Conn, br *bufio.Reader) {
		readHeader(br)
		c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"))
		c.Close()
		closed <- struct{}{}
	})
	return addr, closed
}

// serve runs one request through l's HTTP/1 handler, its body (if not
// nil) in memory.
func serve(l *listener, method string, body []byte) *fasthttp.RequestCtx {
	return serveRequest(l, method, func(req *fasthttp.Request) {
		if body != nil {
			req.SetBody(body)
		}
	})
}

// serveBody is serve with the body streamed, as fasthttp's server hands
// it over.
func serveBody(l *listener, method string, body []byte) *fasthttp.RequestCtx {
	return serveRequest(l, method, func(req *fasthttp.Request) {
		req.SetBodyStream(bytes.NewReader(body), len(body))
	})
}

func serveRequest(l *listener, method string, setBody func(*fasthttp.Request)) *fasthttp.RequestCtx {
	var ctx fasthttp.RequestCtx
	ctx.Init2(nil, nil, false)
	ctx.Request.Header.SetMethod(method)
	ctx.Request.Header.SetRequestURI("/")
	ctx.Request.Header.SetHost("example.com")
	setBody(&ctx.Request)
	l.handle(&ctx)
	return &ctx
}

func TestStaleConnectionRetriedForIdempotent(t *testing.T) {
	origin, closed := closingOrigin(t)
	l := benchProxy(t, origin)
	if ctx := serve(l, "GET", nil); ctx.Response.StatusCode() != 200 {
		t.Fatalf("first GET: %d", ctx.Response.StatusCode())
	}
	<-closed // the pooled connection is now dead
	ctx := serve(l, "GET", nil)
	if ctx.Response.StatusCode() != 200 || string(ctx.Response.Body()) != "ok" {
		t.Fatalf("GET on a stale pooled connection: %d %q", ctx.Response.StatusCode(), ctx.Response.Body())
	}
}

func TestStaleConnectionCheckedBeforePost(t *testing.T) {
	origin, closed := closingOrigin(t)
	l := benchProxy(t, origin)
	if ctx := serve(l, "GET", nil); ctx.Response.StatusCode() != 200 {
		t.Fatalf("first GET: %d", ctx.Response.StatusCode())
	}
	<-closed
	// The POST cannot be sent twice, so the pooled connection is checked
	// first, found closed, and a new one is used.
	ctx := serve(l, "POST", []byte("pay once"))
	if ctx.Response.StatusCode() != 200 {
		t.Fatalf("POST after the upstream closed its idle connection: %d", ctx.Response.StatusCode())
	}
}

// silentOrigin reads one request per connection and closes it without
// answering, reporting each request it received.
func silentOrigin(t *testing.T) (string, <-chan struct{}) {
	got := make(chan struct{}, 16)
	addr := tcpOrigin(t, func(c net.Conn, br *bufio.Reader) {
		readHeader(br)
		got <- struct{}{}
	})
	return addr, got
}

func TestPostNeverSentTwice(t *testing.T) {
	origin, got := silentOrigin(t)
	l := benchProxy(t, origin)
	// The upstream received the POST and died without a word: it may have
	// processed it, so ebb answers 502 and does not send it again.
	ctx := serve(l, "POST", []byte("pay once"))
	if ctx.Response.StatusCode() != fasthttp.StatusBadGateway {
		t.Fatalf("status %d, want 502", ctx.Response.StatusCode())
	}
	<-got
	select {
	case <-got:
		t.Fatal("the POST reached the upstream twice")
	default:
	}
	// A GET in the same situation on a fresh connection is not retried
	// either: only a reused connection failing is the keep-alive race.
	if ctx := serve(l, "GET", nil); ctx.Response.StatusCode() != fasthttp.StatusBadGateway {
		t.Fatalf("GET status %d, want 502", ctx.Response.StatusCode())
	}
	<-got
	select {
	case <-got:
		t.Fatal("the GET on a fresh connection was retried")
	default:
	}
}

// recordingOrigin answers each request with response and reports the raw
// request header it received, and each new connection.
func recordingOrigin(t *testing.T, response string) (addr string, heads <-chan string, conns <-chan struct{}) {
	h, c := make(chan string, 16), make(chan struct{}, 16)
	addr = tcpOrigin(t, func(conn net.Conn, br *bufio.Reader) {
		c <- struct{}{}
		for {
			var head strings.Builder
			for {
				line, err := br.ReadString('\n')
				if err != nil {
					return
				}
				head.WriteString(line)
				if line == "\r\n" {
					break
				}
			}
			if n := contentLength(head.String()); n > 0 {
				io.CopyN(io.Discard, br, int64(n))
			}
			h <- head.String()
			if _, err := io.WriteString(conn, response); err != nil {
				return
			}
		}
	})
	return addr, h, c
}

func contentLength(head string) int {
	for line := range strings.SplitSeq(head, "\r\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.EqualFold(k, "Content-Length") {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return 0
}

func TestHTTP10UpstreamAnsweredAsHTTP11(t *testing.T) {
	origin, _, _ := recordingOrigin(t, "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok")
	l := benchProxy(t, origin)
	ctx := serve(l, "GET", nil)
	if ctx.Response.StatusCode() != 200 || !strings.HasPrefix(ctx.Response.String(), "HTTP/1.1 200") || string(ctx.Response.Body()) != "ok" {
		t.Fatalf("got %s", ctx.Response.String())
	}
}

func TestNoBodyResponsesKeepTheConnection(t *testing.T) {
	origin, _, conns := recordingOrigin(t, "HTTP/1.1 204 No Content\r\n\r\n")
	l := benchProxy(t, origin)
	for range 5 {
		if ctx := serve(l, "OPTIONS", nil); ctx.Response.StatusCode() != 204 {
			t.Fatalf("status %d", ctx.Response.StatusCode())
		}
	}
	<-conns
	select {
	case <-conns:
		t.Fatal("a 204 without Content-Length retired its upstream connection")
	default:
	}
}

func TestRequestHeadersNotInvented(t *testing.T) {
	origin, heads, _ := recordingOrigin(t, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
	l := benchProxy(t, origin)
	var ctx fasthttp.RequestCtx
	ctx.Init2(nil, nil, false)
	ctx.Request.Header.SetMethod("POST")
	ctx.Request.Header.SetRequestURI("/")
	ctx.Request.Header.SetHost("example.com")
	ctx.Request.Header.Set("Forwarded", "for=6.6.6.6")
	ctx.Request.SetBody([]byte("x"))
	l.handle(&ctx)
	head := <-heads
	for _, bad := range []string{"Content-Type", "Forwarded", "User-Agent"} {
		if strings.Contains(head, bad+":") {
			t.Errorf("the upstream got a %s header:\n%s", bad, head)
		}
	}
}

func TestHTTP10WithoutHost(t *testing.T) {
	origin, heads, _ := recordingOrigin(t, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
	l := benchProxy(t, origin)
	var ctx fasthttp.RequestCtx
	ctx.Init2(nil, nil, false)
	ctx.Request.Header.SetMethod("GET")
	ctx.Request.Header.SetRequestURI("/")
	ctx.Request.Header.SetProtocol("HTTP/1.0")
	l.handle(&ctx)
	if ctx.Response.StatusCode() != 200 {
		t.Fatalf("status %d", ctx.Response.StatusCode())
	}
	if head := <-heads; !strings.Contains(head, "Host: "+origin) {
		t.Fatalf("upstream request without the endpoint as Host:\n%s", head)
	}
}

// keepAliveOrigin answers each request (reading its body) with "ok" on a
// kept-alive connection, reports each request on got, and hands each new
// connection's server side to conns.
func keepAliveOrigin(t *testing.T) (addr string, got <-chan string, conns <-chan net.Conn) {
	g, cs := make(chan string, 16), make(chan net.Conn, 16)
	addr = tcpOrigin(t, func(c net.Conn, br *bufio.Reader) {
		cs <- c
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			body, err := io.ReadAll(req.Body)
			if err != nil {
				return
			}
			g <- req.Method + " " + string(body)
			if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"); err != nil {
				return
			}
		}
	})
	return addr, g, cs
}

// TestUnreceivedPostSentAgain: the upstream closes a pooled connection (as
// its idle timeout does) after ebb checked it and before the POST reaches
// it. Its TCP stack acknowledged none of the POST, so the POST cannot have
// been processed: with its body buffered, it is sent again on a new
// connection, and the upstream gets it once. With retries.buffer_body 0
// the body streams, cannot be sent again, and the client gets the 502.
func TestUnreceivedPostSentAgain(t *testing.T) {
	for _, buffer := range []config.Size{config.DefaultRetryBufferBody, 0} {
		origin, got, conns := keepAliveOrigin(t)
		l := clusterProxy(t, func(c *config.Cluster) { c.Retries.BufferBody = buffer }, origin)
		if ctx := serve(l, "GET", nil); ctx.Response.StatusCode() != 200 {
			t.Fatalf("first GET: %d", ctx.Response.StatusCode())
		}
		first := <-conns
		if r := <-got; r != "GET " {
			t.Fatalf("origin got %q", r)
		}
		testHookChecked = func() {
			testHookChecked = func() {}
			first.Close() // returns once the socket is closed: the FIN is out
		}
		t.Cleanup(func() { testHookChecked = func() {} })
		ctx := serveBody(l, "POST", []byte("pay once"))
		if buffer == 0 {
			if ctx.Response.StatusCode() != fasthttp.StatusBadGateway {
				t.Fatalf("streamed POST racing the upstream's idle close: %d %q, want 502", ctx.Response.StatusCode(), ctx.Response.Body())
			}
			select {
			case r := <-got:
				t.Fatalf("origin got %q", r)
			default:
			}
			continue
		}
		if ctx.Response.StatusCode() != 200 || string(ctx.Response.Body()) != "ok" {
			t.Fatalf("POST racing the upstream's idle close: %d %q", ctx.Response.StatusCode(), ctx.Response.Body())
		}
		if r := <-got; r != "POST pay once" {
			t.Fatalf("origin got %q", r)
		}
		select {
		case r := <-got:
			t.Fatalf("origin got another request: %q", r)
		default:
		}
	}
}

// unansweringOrigin answers the first request on each connection, reads
// the second whole and closes the connection without a word, reporting
// each request it read.
func unansweringOrigin(t *testing.T) (addr string, got <-chan string) {
	g := make(chan string, 16)
	addr = tcpOrigin(t, func(c net.Conn, br *bufio.Reader) {
		for i := range 2 {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			body, _ := io.ReadAll(req.Body)
			g <- req.Method + " " + string(body)
			if i == 0 {
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
			}
		}
	})
	return addr, g
}

// TestReceivedPostNotSentAgain: on a reused connection, an upstream that
// read a request and closed without answering may have processed it. A
// POST gets the 502, and is not sent again; a GET is sent again.
func TestReceivedPostNotSentAgain(t *testing.T) {
	origin, got := unansweringOrigin(t)
	l := benchProxy(t, origin)
	if ctx := serve(l, "GET", nil); ctx.Response.StatusCode() != 200 {
		t.Fatalf("first GET: %d", ctx.Response.StatusCode())
	}
	<-got
	if ctx := serve(l, "POST", []byte("pay once")); ctx.Response.StatusCode() != fasthttp.StatusBadGateway {
		t.Fatalf("POST: status %d, want 502", ctx.Response.StatusCode())
	}
	if r := <-got; r != "POST pay once" {
		t.Fatalf("origin got %q", r)
	}
	select {
	case r := <-got:
		t.Fatalf("the POST was sent again: origin got %q", r)
	default:
	}

	// A GET the same way: the first connection is reused and dies, a new
	// one answers.
	if ctx := serve(l, "GET", nil); ctx.Response.StatusCode() != 200 {
		t.Fatalf("GET: status %d", ctx.Response.StatusCode())
	}
	if ctx := serve(l, "GET", []byte{}); ctx.Response.StatusCode() != 200 {
		t.Fatalf("GET on the reused connection: status %d, want 200", ctx.Response.StatusCode())
	}
	for range 3 {
		if r := <-got; r != "GET " {
			t.Fatalf("origin got %q", r)
		}
	}
}
