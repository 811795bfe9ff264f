// Package enginetest builds the engines over a real snapshot of routes
// and clusters, without sockets of their own, for the tests of the
// packages above the engines.
package enginetest

import (
	"bytes"
	"net"
	"sync/atomic"
	"testing"

	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/sdk/metric"

	"github.com/ebb-proxy/ebb/config"
	"github.com/ebb-proxy/ebb/proxy/cluster"
	"github.com/ebb-proxy/ebb/proxy/downstream"
	"github.com/ebb-proxy/ebb/proxy/forward"
	"github.com/ebb-proxy/ebb/proxy/h1"
	"github.com/ebb-proxy/ebb/proxy/metrics"
	"github.com/ebb-proxy/ebb/proxy/proxytest"
	"github.com/ebb-proxy/ebb/proxy/route"
)

// Engine is one listener's engines over one cluster "origin".
type Engine struct {
	Listener *forward.Listener
	H1       *h1.Server
	Registry *downstream.Registry
	Cluster  *cluster.Cluster
}

// New builds the engines of proxytest.Listener's listener in front of
// proxytest.Cluster(origins...), its configuration adjusted by set (if
// not nil). The cluster's idle connections close with the test.
func New(tb testing.TB, set func(*config.Cluster), origins ...string) *Engine {
	tb.Helper()
	cfg := config.Default()
	c := proxytest.Cluster(origins...)
	if set != nil {
		set(&c)
	}
	cfg.Listeners = []config.Listener{proxytest.Listener()}
	cfg.Clusters = []config.Cluster{c}
	reg := downstream.NewRegistry()
	m, err := metrics.New(metric.NewMeterProvider().Meter("test"), reg)
	if err != nil {
		tb.Fatal(err)
	}
	snap := &atomic.Pointer[route.Snapshot]{}
	snap.Store(route.Build(cfg, m, reg, proxytest.Discard(), nil))
	tb.Cleanup(snap.Load().Close)
	l := &forward.Listener{Config: cfg.Listeners[0], Snapshot: snap, Registry: reg, Log: proxytest.Discard()}
	return &Engine{Listener: l, H1: h1.New(l), Registry: reg, Cluster: snap.Load().Clusters["origin"]}
}

// Serve runs one request through the HTTP/1 engine, its body (if not
// nil) in memory.
func (e *Engine) Serve(method string, body []byte) *fasthttp.RequestCtx {
	return e.ServeRequest(method, func(req *fasthttp.Request) {
		if body != nil {
			req.SetBody(body)
		}
	})
}

// ServeBody is Serve with the body streamed, as fasthttp's server hands
// it over.
func (e *Engine) ServeBody(method string, body []byte) *fasthttp.RequestCtx {
	return e.ServeRequest(method, func(req *fasthttp.Request) {
		req.SetBodyStream(bytesReader(body), len(body))
	})
}

// ServeRequest runs one request for "/" on host example.com, set up by
// setBody, through the HTTP/1 engine, on no connection.
func (e *Engine) ServeRequest(method string, setBody func(*fasthttp.Request)) *fasthttp.RequestCtx {
	var ctx fasthttp.RequestCtx
	ctx.Init2(nil, nil, false)
	ctx.Request.Header.SetMethod(method)
	ctx.Request.Header.SetRequestURI("/")
	ctx.Request.Header.SetHost("example.com")
	setBody(&ctx.Request)
	e.H1.Handle(&ctx)
	return &ctx
}

// SetTable changes the listener's routing table as set says, on a copy
// published in a new snapshot, as a reload would.
func (e *Engine) SetTable(set func(*route.Table)) {
	snap := *e.Listener.Snapshot.Load()
	t := *snap.Tables[0]
	set(&t)
	snap.Tables = []*route.Table{&t}
	e.Listener.Snapshot.Store(&snap)
}

// AddrConn gives a net.Pipe end a TCP peer address, as accepted sockets
// have.
type AddrConn struct{ net.Conn }

// RemoteAddr returns a fixed TCP address.
func (AddrConn) RemoteAddr() net.Addr {
	return &net.TCPAddr{IP: net.IPv4(10, 1, 2, 3), Port: 40000}
}

func bytesReader(b []byte) *bytes.Reader { return bytes.NewReader(b) }
