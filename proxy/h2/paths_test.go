package h2_test

import (
	"testing"

	"github.com/ebb-proxy/ebb/proxy/internal/enginetest"
	"github.com/ebb-proxy/ebb/proxy/paths"
	"github.com/ebb-proxy/ebb/proxy/proxytest"
	"github.com/ebb-proxy/ebb/proxy/route"
)

// BenchmarkStreamGetNormalized is BenchmarkStreamGet with the listener's
// paths block all on and a :path it rewrites, which then goes upstream
// rewritten: the rewrite allocates nothing either.
func BenchmarkStreamGetNormalized(b *testing.B) {
	origin := proxytest.RawOrigin(b, []byte(proxytest.BenchResponse))
	e := enginetest.New(b, nil, origin)
	e.SetTable(func(t *route.Table) {
		t.Paths = paths.Options{Normalize: true, MergeSlashes: true, EscapedSlashes: paths.DecodeEscaped}
	})
	runStreamGet(b, e, "/static/./img/..//index.html?q=1")
}
