package h2_test

import (
	"testing"

	"github.com/ebb-proxy/ebb/proxy/h2"
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
	snap := *e.Listener.Snapshot.Load()
	t := *snap.Tables[0]
	t.Paths = paths.Options{Normalize: true, MergeSlashes: true, EscapedSlashes: paths.DecodeEscaped}
	snap.Tables = []*route.Table{&t}
	e.Listener.Snapshot.Store(&snap)
	cl := startBench(b, &h2.Server{Handler: h2.Forwarder(e.Listener)}, e.Registry)
	first, again := cl.blocks([][2]string{
		{":method", "GET"}, {":scheme", "http"}, {":authority", "example.com"},
		{":path", "/static/./img/..//index.html?q=1"}, {"user-agent", "bench"}, {"accept", "*/*"},
	})
	if status, n := cl.roundTrip(first, true); status != 200 || n != 64 {
		b.Fatalf("got %d with %d bytes", status, n)
	}
	for range 100 {
		if _, n := cl.roundTrip(again, false); n != 64 {
			b.Fatalf("got %d body bytes", n)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, n := cl.roundTrip(again, false); n != 64 {
			b.Fatalf("got %d body bytes", n)
		}
	}
}
