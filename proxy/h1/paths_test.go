package h1_test

import (
	"net"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/ebb-proxy/ebb/drain"
	"github.com/ebb-proxy/ebb/proxy/internal/enginetest"
	"github.com/ebb-proxy/ebb/proxy/paths"
	"github.com/ebb-proxy/ebb/proxy/proxytest"
	"github.com/ebb-proxy/ebb/proxy/route"
)

// benchmarkGetNormalized is BenchmarkHandlerGet's plain case with the
// listener's paths block all on and a path it rewrites, which then goes
// upstream rewritten (the client's kept for the access log): the rewrite
// allocates nothing either.
func benchmarkGetNormalized(b *testing.B) {
	origin := proxytest.RawOrigin(b, []byte(proxytest.BenchResponse))
	e := enginetest.New(b, nil, origin)
	snap := *e.Listener.Snapshot.Load()
	t := *snap.Tables[0]
	t.Paths = paths.Options{Normalize: true, MergeSlashes: true, EscapedSlashes: paths.DecodeEscaped}
	snap.Tables = []*route.Table{&t}
	e.Listener.Snapshot.Store(&snap)
	client, server := net.Pipe()
	defer client.Close()
	reg := drain.NewRegistry()
	conn := reg.Track(&enginetest.AddrConn{Conn: server}, "bench", true, nil)
	var ctx fasthttp.RequestCtx
	ctx.Init2(conn, nil, false)
	req := func() {
		ctx.Request.Reset()
		ctx.Response.Reset()
		ctx.Request.Header.SetMethod("GET")
		ctx.Request.Header.SetRequestURI("/static/./img/..//index.html?q=1")
		ctx.Request.Header.SetHost("example.com")
		ctx.Request.Header.Set("User-Agent", "bench")
		ctx.Request.Header.Set("Accept", "*/*")
	}
	for range 100 {
		req()
		e.H1.Handle(&ctx)
	}
	if ctx.Response.StatusCode() != 200 || len(ctx.Response.Body()) != 64 {
		b.Fatalf("got %d with %d bytes", ctx.Response.StatusCode(), len(ctx.Response.Body()))
	}
	if got := string(ctx.Request.Header.RequestURI()); got != "/static/index.html?q=1" {
		b.Fatalf("the request went upstream as %q, want /static/index.html?q=1", got)
	}
	b.ReportAllocs()
	for b.Loop() {
		req()
		e.H1.Handle(&ctx)
	}
}
