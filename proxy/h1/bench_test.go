package h1_test

import (
	"bufio"
	"bytes"
	"context"
	"net"
	"os"
	"testing"

	"github.com/valyala/fasthttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/ebb-proxy/ebb/config"
	"github.com/ebb-proxy/ebb/proxy/access"
	"github.com/ebb-proxy/ebb/proxy/downstream"
	"github.com/ebb-proxy/ebb/proxy/headers"
	"github.com/ebb-proxy/ebb/proxy/internal/enginetest"
	"github.com/ebb-proxy/ebb/proxy/proxytest"
	"github.com/ebb-proxy/ebb/proxy/route"
	"github.com/ebb-proxy/ebb/proxy/tracing"
)

// BenchmarkHandlerGet measures ebb's HTTP/1 request path: routing, header
// rules, the balancer, the upstream exchange over a pooled loopback
// connection, and metrics. Its allocs/op is the figure the design holds at
// zero.
func BenchmarkHandlerGet(b *testing.B) {
	b.Run("plain", func(b *testing.B) { benchmarkGet(b, false, -1) })
	// With the listener's paths block all on, and a path it rewrites.
	b.Run("paths-normalized", benchmarkGetNormalized)
	// With the defaults' request id (a new one per request) and access
	// log (JSON, here to /dev/null): what they add per request.
	b.Run("access-log", func(b *testing.B) { benchmarkGet(b, true, -1) })
	// Tracing on, every trace sampled and 1 in 100 (a server span and a
	// client span per sampled request, batched to an exporter that drops
	// them): what tracing adds.
	b.Run("tracing-100%", func(b *testing.B) { benchmarkGet(b, false, 1) })
	b.Run("tracing-1%", func(b *testing.B) { benchmarkGet(b, false, 0.01) })
}

// benchmarkGet is BenchmarkHandlerGet with the access log (logged) and
// tracing at a sampling ratio (negative: off).
func benchmarkGet(b *testing.B, logged bool, ratio float64) {
	origin := proxytest.RawOrigin(b, []byte(proxytest.BenchResponse))
	e := enginetest.New(b, nil, origin)
	if ratio >= 0 {
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()),
			sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio))))
		b.Cleanup(func() { tp.Shutdown(context.Background()) })
		snap := *e.Listener.Snapshot.Load()
		snap.Tracer = tracing.New(tp)
		e.Listener.Snapshot.Store(&snap)
	}
	if logged {
		sink, err := access.OpenSink(os.DevNull, nil, nil)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { sink.Close() })
		e.SetTable(func(t *route.Table) { t.RequestID = headers.RequestIDTrusted })
		snap := *e.Listener.Snapshot.Load()
		snap.Access = access.New(access.FormatJSON, sink)
		e.Listener.Snapshot.Store(&snap)
	}
	runGet(b, e, "/index.html?q=1", nil)
}

// runGet measures GETs of uri through e's HTTP/1 engine, on a client
// connection of the registry's, check (if not nil) looking at the request
// once the pools are warm.
func runGet(b *testing.B, e *enginetest.Engine, uri string, check func(*fasthttp.RequestCtx)) {
	client, server := net.Pipe()
	defer client.Close()
	reg := downstream.NewRegistry()
	conn := reg.Track(&enginetest.AddrConn{Conn: server}, "bench", true, nil)
	var ctx fasthttp.RequestCtx
	ctx.Init2(conn, nil, false)
	req := func() {
		ctx.Request.Reset()
		ctx.Response.Reset()
		ctx.Request.Header.SetMethod("GET")
		ctx.Request.Header.SetRequestURI(uri)
		ctx.Request.Header.SetHost("example.com")
		ctx.Request.Header.Set("User-Agent", "bench")
		ctx.Request.Header.Set("Accept", "*/*")
	}
	// Warm up pools and the upstream connection.
	for range 100 {
		req()
		e.H1.Handle(&ctx)
	}
	if ctx.Response.StatusCode() != 200 || len(ctx.Response.Body()) != 64 {
		b.Fatalf("got %d with %d bytes", ctx.Response.StatusCode(), len(ctx.Response.Body()))
	}
	if check != nil {
		check(&ctx)
	}
	b.ReportAllocs()
	for b.Loop() {
		req()
		e.H1.Handle(&ctx)
	}
}

// BenchmarkHandlerPost is BenchmarkHandlerGet for a POST with a 1 KiB body,
// which ebb buffers (so that it can be sent again) or streams
// (retries.buffer_body 0).
func BenchmarkHandlerPost(b *testing.B) {
	const size = 1024
	body := bytes.Repeat([]byte("x"), size)
	response := []byte("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok")
	origin := proxytest.Origin(b, func(c net.Conn, br *bufio.Reader) {
		for proxytest.ReadHeader(br) {
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
			e := enginetest.New(b, func(c *config.Cluster) { c.Retries.BufferBody = bc.buffer }, origin)
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
				e.H1.Handle(&ctx)
			}
			if ctx.Response.StatusCode() != 200 {
				b.Fatalf("got %d", ctx.Response.StatusCode())
			}
			b.ReportAllocs()
			for b.Loop() {
				req()
				e.H1.Handle(&ctx)
			}
		})
	}
}
