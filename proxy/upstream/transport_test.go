package upstream_test

import (
	"strings"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/ebb-proxy/ebb/config"
	"github.com/ebb-proxy/ebb/proxy/internal/enginetest"
	"github.com/ebb-proxy/ebb/proxy/proxytest"
	"github.com/ebb-proxy/ebb/proxy/upstream"
)

func TestStaleConnectionRetriedForIdempotent(t *testing.T) {
	origin, closed := proxytest.ClosingOrigin(t)
	e := enginetest.New(t, nil, origin)
	if ctx := e.Serve("GET", nil); ctx.Response.StatusCode() != 200 {
		t.Fatalf("first GET: %d", ctx.Response.StatusCode())
	}
	<-closed // the pooled connection is now dead
	ctx := e.Serve("GET", nil)
	if ctx.Response.StatusCode() != 200 || string(ctx.Response.Body()) != "ok" {
		t.Fatalf("GET on a stale pooled connection: %d %q", ctx.Response.StatusCode(), ctx.Response.Body())
	}
}

func TestStaleConnectionCheckedBeforePost(t *testing.T) {
	origin, closed := proxytest.ClosingOrigin(t)
	e := enginetest.New(t, nil, origin)
	if ctx := e.Serve("GET", nil); ctx.Response.StatusCode() != 200 {
		t.Fatalf("first GET: %d", ctx.Response.StatusCode())
	}
	<-closed
	// The POST cannot be sent twice, so the pooled connection is checked
	// first, found closed, and a new one is used.
	ctx := e.Serve("POST", []byte("pay once"))
	if ctx.Response.StatusCode() != 200 {
		t.Fatalf("POST after the upstream closed its idle connection: %d", ctx.Response.StatusCode())
	}
}

func TestPostNeverSentTwice(t *testing.T) {
	origin, got := proxytest.SilentOrigin(t)
	e := enginetest.New(t, nil, origin)
	// The upstream received the POST and died without a word: it may have
	// processed it, so ebb answers 502 and does not send it again.
	ctx := e.Serve("POST", []byte("pay once"))
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
	if ctx := e.Serve("GET", nil); ctx.Response.StatusCode() != fasthttp.StatusBadGateway {
		t.Fatalf("GET status %d, want 502", ctx.Response.StatusCode())
	}
	<-got
	select {
	case <-got:
		t.Fatal("the GET on a fresh connection was retried")
	default:
	}
}

func TestHTTP10UpstreamAnsweredAsHTTP11(t *testing.T) {
	origin, _, _ := proxytest.RecordingOrigin(t, "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok")
	e := enginetest.New(t, nil, origin)
	ctx := e.Serve("GET", nil)
	if ctx.Response.StatusCode() != 200 || !strings.HasPrefix(ctx.Response.String(), "HTTP/1.1 200") || string(ctx.Response.Body()) != "ok" {
		t.Fatalf("got %s", ctx.Response.String())
	}
}

func TestNoBodyResponsesKeepTheConnection(t *testing.T) {
	origin, _, conns := proxytest.RecordingOrigin(t, "HTTP/1.1 204 No Content\r\n\r\n")
	e := enginetest.New(t, nil, origin)
	for range 5 {
		if ctx := e.Serve("OPTIONS", nil); ctx.Response.StatusCode() != 204 {
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
	origin, heads, _ := proxytest.RecordingOrigin(t, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
	e := enginetest.New(t, nil, origin)
	var ctx fasthttp.RequestCtx
	ctx.Init2(nil, nil, false)
	ctx.Request.Header.SetMethod("POST")
	ctx.Request.Header.SetRequestURI("/")
	ctx.Request.Header.SetHost("example.com")
	ctx.Request.Header.Set("Forwarded", "for=6.6.6.6")
	ctx.Request.SetBody([]byte("x"))
	e.H1.Handle(&ctx)
	head := <-heads
	for _, bad := range []string{"Content-Type", "Forwarded", "User-Agent"} {
		if strings.Contains(head, bad+":") {
			t.Errorf("the upstream got a %s header:\n%s", bad, head)
		}
	}
}

func TestHTTP10WithoutHost(t *testing.T) {
	origin, heads, _ := proxytest.RecordingOrigin(t, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
	e := enginetest.New(t, nil, origin)
	var ctx fasthttp.RequestCtx
	ctx.Init2(nil, nil, false)
	ctx.Request.Header.SetMethod("GET")
	ctx.Request.Header.SetRequestURI("/")
	ctx.Request.Header.SetProtocol("HTTP/1.0")
	e.H1.Handle(&ctx)
	if ctx.Response.StatusCode() != 200 {
		t.Fatalf("status %d", ctx.Response.StatusCode())
	}
	if head := <-heads; !strings.Contains(head, "Host: "+origin) {
		t.Fatalf("upstream request without the endpoint as Host:\n%s", head)
	}
}

// TestUnreceivedPostSentAgain: the upstream closes a pooled connection (as
// its idle timeout does) after ebb checked it and before the POST reaches
// it. Its TCP stack acknowledged none of the POST, so the POST cannot have
// been processed: with its body buffered, it is sent again on a new
// connection, and the upstream gets it once. With retries.buffer_body 0
// the body streams, cannot be sent again, and the client gets the 502.
func TestUnreceivedPostSentAgain(t *testing.T) {
	for _, buffer := range []config.Size{config.DefaultRetryBufferBody, 0} {
		origin, got, conns := proxytest.KeepAliveOrigin(t)
		e := enginetest.New(t, func(c *config.Cluster) { c.Retries.BufferBody = buffer }, origin)
		if ctx := e.Serve("GET", nil); ctx.Response.StatusCode() != 200 {
			t.Fatalf("first GET: %d", ctx.Response.StatusCode())
		}
		first := <-conns
		if r := <-got; r != "GET " {
			t.Fatalf("origin got %q", r)
		}
		*upstream.TestHookChecked = func() {
			*upstream.TestHookChecked = func() {}
			first.Close() // returns once the socket is closed: the FIN is out
		}
		t.Cleanup(func() { *upstream.TestHookChecked = func() {} })
		ctx := e.ServeBody("POST", []byte("pay once"))
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

// TestReceivedPostNotSentAgain: on a reused connection, an upstream that
// read a request and closed without answering may have processed it. A
// POST gets the 502, and is not sent again; a GET is sent again.
func TestReceivedPostNotSentAgain(t *testing.T) {
	origin, got := proxytest.UnansweringOrigin(t)
	e := enginetest.New(t, nil, origin)
	if ctx := e.Serve("GET", nil); ctx.Response.StatusCode() != 200 {
		t.Fatalf("first GET: %d", ctx.Response.StatusCode())
	}
	<-got
	if ctx := e.Serve("POST", []byte("pay once")); ctx.Response.StatusCode() != fasthttp.StatusBadGateway {
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
	if ctx := e.Serve("GET", nil); ctx.Response.StatusCode() != 200 {
		t.Fatalf("GET: status %d", ctx.Response.StatusCode())
	}
	if ctx := e.Serve("GET", []byte{}); ctx.Response.StatusCode() != 200 {
		t.Fatalf("GET on the reused connection: status %d, want 200", ctx.Response.StatusCode())
	}
	for range 3 {
		if r := <-got; r != "GET " {
			t.Fatalf("origin got %q", r)
		}
	}
}
