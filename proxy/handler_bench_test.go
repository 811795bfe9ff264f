package proxy

import (
	"bufio"
	"bytes"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/sdk/metric"

	"github.com/ebb-proxy/ebb/config"
	"github.com/ebb-proxy/ebb/drain"
)

// tcpOrigin is an upstream speaking raw HTTP/1.1 over TCP: serve is called
// for each accepted connection, in a goroutine, and the connection is
// closed when it returns. The origin stops with the test.
func tcpOrigin(tb testing.TB, serve func(c net.Conn, br *bufio.Reader)) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	var wg sync.WaitGroup
	tb.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				serve(c, bufio.NewReader(c))
			})
		}
	})
	return ln.Addr().String()
}

// readHeader consumes one request header (the tests' requests have no
// body, or one the origin ignores), reporting false when the connection
// ended first.
func readHeader(br *bufio.Reader) bool {
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return false
		}
		if len(bytes.TrimSpace(line)) == 0 {
			return true
		}
	}
}

// rawOrigin answers every request with fixed bytes, allocating nothing, so
// that a benchmark's allocations are ebb's alone.
func rawOrigin(tb testing.TB, response []byte) string {
	return tcpOrigin(tb, func(c net.Conn, br *bufio.Reader) {
		for readHeader(br) {
			if _, err := c.Write(response); err != nil {
				return
			}
		}
	})
}

func benchProxy(tb testing.TB, origin string) *listener {
	tb.Helper()
	return clusterProxy(tb, nil, origin)
}

// clusterProxy is benchProxy with several endpoints and the cluster's
// configuration adjusted by set (if not nil).
func clusterProxy(tb testing.TB, set func(*config.Cluster), origins ...string) *listener {
	tb.Helper()
	cfg := config.Default()
	l := config.Listener{Name: "bench", Address: "127.0.0.1:0",
		Routes: []config.Route{{Match: config.Match{PathPrefix: "/"}, Cluster: "origin"}}}
	c := config.Cluster{Name: "origin", Discovery: config.Discovery{Static: origins}}
	// Apply the element defaults the loader would.
	l.Limits.MaxHeaderBytes = config.DefaultMaxHeaderBytes
	l.Timeouts = config.ListenerTimeouts{Header: time.Second, Idle: time.Minute, Write: time.Minute}
	c.Balancer = config.BalancerP2C
	c.MaxConnsPerEndpoint = 16
	c.Timeouts = config.ClusterTimeouts{Connect: time.Second, Response: 5 * time.Second, Idle: time.Minute}
	c.Retries = config.Retries{Attempts: config.DefaultRetryAttempts, Budget: config.DefaultRetryBudget, BufferBody: config.DefaultRetryBufferBody}
	if set != nil {
		set(&c)
	}
	cfg.Listeners = []config.Listener{l}
	cfg.Clusters = []config.Cluster{c}
	meter := metric.NewMeterProvider().Meter("bench")
	p, err := New(cfg, drain.NewRegistry(), meter, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { p.closeUpstreams() })
	return p.listeners[0]
}

// BenchmarkHandlerGet measures ebb's HTTP/1 request path: routing, header
// rules, the balancer, the upstream exchange over a pooled loopback
// connection, and metrics. Its allocs/op is the figure the design holds at
// zero.
func BenchmarkHandlerGet(b *testing.B) {
	// Like most servers, the origin says "Connection: keep-alive", which
	// ebb must strip on every response.
	origin := rawOrigin(b, []byte("HTTP/1.1 200 OK\r\nServer: raw\r\nContent-Type: text/plain\r\nConnection: keep-alive\r\nContent-Length: 64\r\n\r\n"+
		"0123456789012345678901234567890123456789012345678901234567890123"))
	l := benchProxy(b, origin)
	client, server := net.Pipe()
	defer client.Close()
	reg := drain.NewRegistry()
	conn := reg.Track(&addrConn{Conn: server}, "bench", true)
	var ctx fasthttp.RequestCtx
	ctx.Init2(conn, nil, false)
	req := func() {
		ctx.Request.Reset()
		ctx.Response.Reset()
		ctx.Request.Header.SetMethod("GET")
		ctx.Request.Header.SetRequestURI("/index.html?q=1")
		ctx.Request.Header.SetHost("example.com")
		ctx.Request.Header.Set("User-Agent", "bench")
		ctx.Request.Header.Set("Accept", "*/*")
	}
	// Warm up pools and the upstream connection.
	for range 100 {
		req()
		l.handle(&ctx)
	}
	if ctx.Response.StatusCode() != 200 || len(ctx.Response.Body()) != 64 {
		b.Fatalf("got %d with %d bytes", ctx.Response.StatusCode(), len(ctx.Response.Body()))
	}
	b.ReportAllocs()
	for b.Loop() {
		req()
		l.handle(&ctx)
	}
}

// addrConn gives a net.Pipe end a TCP peer address, as accepted sockets have.
type addrConn struct{ net.Conn }

func (addrConn) RemoteAddr() net.Addr {
	return &net.TCPAddr{IP: net.IPv4(10, 1, 2, 3), Port: 40000}
}

// BenchmarkHandlerPost is BenchmarkHandlerGet for a POST with a 1 KiB body,
// which ebb buffers (so that it can be sent again) or streams
// (retries.buffer_body 0). Either way a POST on a pooled connection costs
// a system call more than a GET: the check that the connection is still
// open (its three allocations are net's SyscallConn and the check's
// closure).
func BenchmarkHandlerPost(b *testing.B) {
	const size = 1024
	body := bytes.Repeat([]byte("x"), size)
	response := []byte("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok")
	origin := tcpOrigin(b, func(c net.Conn, br *bufio.Reader) {
		for readHeader(br) {
			if _, err := br.Discard(size); err != nil {
				return
			}
			if _, err := c.Write(response); err != nil {
				return
			}
		}
	})
	for _, bc := range []struct {
		name   string
		buffer config.Size
	}{{"buffered", config.DefaultRetryBufferBody}, {"streamed", 0}} {
		b.Run(bc.name, func(b *testing.B) {
			l := clusterProxy(b, func(c *config.Cluster) { c.Retries.BufferBody = bc.buffer }, origin)
			var ctx fasthttp.RequestCtx
			ctx.Init2(nil, nil, false)
			var src bytes.Reader
			req := func() {
				ctx.Request.Reset()
				ctx.Response.Reset()
				ctx.Request.Header.SetMethod("POST")
				ctx.Request.Header.SetRequestURI("/upload")
				ctx.Request.Header.SetHost("example.com")
				src.Reset(body)
				ctx.Request.SetBodyStream(&src, size)
			}
			for range 100 {
				req()
				l.handle(&ctx)
			}
			if ctx.Response.StatusCode() != 200 {
				b.Fatalf("got %d", ctx.Response.StatusCode())
			}
			b.ReportAllocs()
			for b.Loop() {
				req()
				l.handle(&ctx)
			}
		})
	}
}
