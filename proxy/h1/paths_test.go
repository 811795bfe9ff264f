package h1_test

import (
	"testing"

	"github.com/valyala/fasthttp"

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
	e.SetTable(func(t *route.Table) {
		t.Paths = paths.Options{Normalize: true, MergeSlashes: true, EscapedSlashes: paths.DecodeEscaped}
	})
	runGet(b, e, "/static/./img/..//index.html?q=1", func(ctx *fasthttp.RequestCtx) {
		if got := string(ctx.Request.Header.RequestURI()); got != "/static/index.html?q=1" {
			b.Fatalf("the request went upstream as %q, want /static/index.html?q=1", got)
		}
	})
}
