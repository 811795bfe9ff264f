package proxy

import (
	"bufio"
	"net"
	"testing"

	"github.com/valyala/fasthttp"
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

func serve(l *listener, method string, body []byte) *fasthttp.RequestCtx {
	var ctx fasthttp.RequestCtx
	ctx.Init2(nil, nil, false)
	ctx.Request.Header.SetMethod(method)
	ctx.Request.Header.SetRequestURI("/")
	ctx.Request.Header.SetHost("example.com")
	if body != nil {
		ctx.Request.SetBody(body)
	}
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
