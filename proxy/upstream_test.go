package proxy

import (
	"bufio"
	"bytes"
	"net"
	"testing"

	"github.com/valyala/fasthttp"
)

// closingOrigin answers one request per connection with keep-alive headers
// and then closes the connection, as an upstream does when its idle timeout
// fires. Each closed connection is reported on the returned channel.
func closingOrigin(t *testing.T) (string, <-chan struct{}) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := make(chan struct{}, 16)
	done := make(chan struct{})
	t.Cleanup(func() { ln.Close(); <-done })
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			br := bufio.NewReader(c)
			for {
				line, err := br.ReadSlice('\n')
				if err != nil || len(bytes.TrimSpace(line)) == 0 {
					break
				}
			}
			c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"))
			c.Close()
			closed <- struct{}{}
		}
	}()
	return ln.Addr().String(), closed
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

func TestStaleConnectionNotRetriedForPost(t *testing.T) {
	origin, closed := closingOrigin(t)
	l := benchProxy(t, origin)
	if ctx := serve(l, "GET", nil); ctx.Response.StatusCode() != 200 {
		t.Fatalf("first GET: %d", ctx.Response.StatusCode())
	}
	<-closed
	// A POST may have been processed: ebb must not send it twice.
	ctx := serve(l, "POST", []byte("pay once"))
	if ctx.Response.StatusCode() != fasthttp.StatusBadGateway {
		t.Fatalf("POST on a stale pooled connection: %d, want 502", ctx.Response.StatusCode())
	}
	select {
	case <-closed:
		t.Fatal("the POST reached the upstream a second time")
	default:
	}
}
