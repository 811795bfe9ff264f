package cluster

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/ebb-proxy/ebb/config"
	"github.com/ebb-proxy/ebb/discovery"
	"github.com/ebb-proxy/ebb/proxy/downstream"
	"github.com/ebb-proxy/ebb/proxy/metrics"
	"github.com/ebb-proxy/ebb/proxy/proxytest"
)

func testCluster(balancer string, addrs ...string) *Cluster {
	return New(config.Cluster{Name: "c", Balancer: balancer, MaxConnsPerEndpoint: 1,
		Discovery: config.Discovery{Static: addrs}}, nil, downstream.NewRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)))
}

func TestRoundRobin(t *testing.T) {
	c := testCluster(config.BalancerRoundRobin, "a:1", "b:1", "c:1")
	var got []string
	for range 6 {
		got = append(got, c.Pick().addr)
	}
	want := []string{"a:1", "b:1", "c:1", "a:1", "b:1", "c:1"}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("picks = %v, want %v", got, want)
		}
	}
}

func TestP2CPrefersLessLoaded(t *testing.T) {
	c := testCluster(config.BalancerP2C, "busy:1", "free:1")
	eps := *c.endpoints.Load()
	eps[0].inflight.Store(10)
	// With two endpoints p2c always compares both.
	for range 100 {
		if ep := c.Pick(); ep.addr != "free:1" {
			t.Fatalf("picked %s with 10 in flight over an idle endpoint", ep.addr)
		}
	}
	// Among many, the most loaded is never picked: it loses every pair.
	c = testCluster(config.BalancerP2C, "a:1", "b:1", "c:1", "d:1")
	(*c.endpoints.Load())[2].inflight.Store(5)
	for range 1000 {
		if ep := c.Pick(); ep.addr == "c:1" {
			t.Fatal("picked the most loaded endpoint")
		}
	}
}

func TestPickEmpty(t *testing.T) {
	c := testCluster(config.BalancerP2C)
	if ep := c.Pick(); ep != nil {
		t.Fatalf("picked %s from an empty cluster", ep.addr)
	}
}

func TestSetEndpointsKeepsSurvivors(t *testing.T) {
	c := testCluster(config.BalancerP2C, "a:1", "b:1")
	a := (*c.endpoints.Load())[0]
	a.inflight.Store(3)
	c.setEndpoints(discovery.Set{Endpoints: []discovery.Endpoint{{Address: "c:1"}, {Address: "a:1"}}})
	eps := *c.endpoints.Load()
	if len(eps) != 2 || eps[0].addr != "c:1" || eps[1] != a || a.inflight.Load() != 3 {
		t.Fatalf("after update: %v", eps)
	}
}

// TestTerminatingEndpointsOnlyAsLastResort: endpoints that are terminating
// but still serving take requests only while no ready endpoint is left;
// /endpoints shows every endpoint with its state.
func TestTerminatingEndpointsOnlyAsLastResort(t *testing.T) {
	c := testCluster(config.BalancerRoundRobin, "a:1")
	set := func(eps ...discovery.Endpoint) { c.setEndpoints(discovery.Set{Endpoints: eps}) }
	picks := func() map[string]bool {
		got := map[string]bool{}
		for range 10 {
			if ep := c.Pick(); ep != nil {
				got[ep.addr] = true
			}
		}
		return got
	}
	set(discovery.Endpoint{Address: "a:1", State: discovery.Serving}, discovery.Endpoint{Address: "b:1"})
	if got := picks(); len(got) != 1 || !got["b:1"] {
		t.Fatalf("with b ready and a terminating, picked %v; want only b", got)
	}
	if n := len(*c.all.Load()); n != 2 {
		t.Fatalf("%d endpoints known, want 2", n)
	}
	set(discovery.Endpoint{Address: "a:1", State: discovery.Serving}, discovery.Endpoint{Address: "b:1", State: discovery.Serving})
	if got := picks(); len(got) != 2 {
		t.Fatalf("with every endpoint terminating, picked %v; want both", got)
	}
	set(discovery.Endpoint{Address: "a:1"}, discovery.Endpoint{Address: "b:1", State: discovery.Serving})
	if got := picks(); len(got) != 1 || !got["a:1"] {
		t.Fatalf("with a ready again, picked %v; want only a", got)
	}
}

// TestRemovedEndpointClosesConnectionsAfterLastExchange: a connection busy
// when its endpoint leaves discovery is closed once its exchange ends,
// not left in the pool until the idle timeout.
func TestRemovedEndpointClosesConnectionsAfterLastExchange(t *testing.T) {
	arrived, answer, closed := make(chan struct{}), make(chan struct{}), make(chan struct{})
	origin := proxytest.Origin(t, func(c net.Conn, br *bufio.Reader) {
		for proxytest.ReadHeader(br) {
			arrived <- struct{}{}
			<-answer
			if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"); err != nil {
				return
			}
		}
		close(closed) // ebb closed the connection
	})
	c := New(proxytest.Cluster(origin), nil, downstream.NewRegistry(), proxytest.Discard())
	t.Cleanup(c.Close)
	done := make(chan int)
	go func() {
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		defer fasthttp.ReleaseRequest(req)
		defer fasthttp.ReleaseResponse(resp)
		req.SetRequestURI("http://example.com/")
		if _, err := c.ExchangeH1(context.Background(), c.Pick(), req, resp, new(Trip), proxytest.Discard()); err != nil {
			t.Error(err)
		}
		done <- resp.StatusCode()
	}()
	<-arrived
	c.Update(discovery.Set{Endpoints: []discovery.Endpoint{{Address: "127.0.0.1:1"}}})
	// Until its exchange ends, the endpoint is listed as removed: a
	// backend waiting for it to go from /endpoints is not stopped early.
	if got := endpointStates(c); got != "127.0.0.1:1=ready/0 "+origin+"=removed/1" {
		t.Fatalf("state while the exchange is in flight: %s", got)
	}
	close(answer)
	if status := <-done; status != 200 {
		t.Fatalf("the request in flight got %d", status)
	}
	if got := endpointStates(c); got != "127.0.0.1:1=ready/0" {
		t.Fatalf("state after the last exchange: %s", got)
	}
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("the removed endpoint's connection stayed open after its last exchange")
	}
}

// endpointStates renders c.State's endpoints as address=state/in-flight.
func endpointStates(c *Cluster) string {
	var b strings.Builder
	for i, ep := range c.State().Endpoints {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s=%s/%d", ep.Address, ep.State, ep.InFlight)
	}
	return b.String()
}

// TestClaimSkipsRemovedEndpoint: an exchange whose endpoint discovery
// removed between the pick and the send goes to one still listed, so
// that nothing reaches a backend after /endpoints stopped listing it.
// With no other endpoint left it keeps the one it picked.
func TestClaimSkipsRemovedEndpoint(t *testing.T) {
	c := testCluster(config.BalancerRoundRobin, "a:1", "b:1")
	SetRoundRobin(c, 0)
	a := c.Pick()
	if a.addr != "a:1" {
		t.Fatalf("picked %s first", a.addr)
	}
	c.setEndpoints(discovery.Set{Endpoints: []discovery.Endpoint{{Address: "b:1"}}})
	got := c.claim(a)
	if got.addr != "b:1" || a.inflight.Load() != 0 || got.inflight.Load() != 1 {
		t.Fatalf("claim of a removed endpoint: got %s (%d in flight), a has %d", got.addr, got.inflight.Load(), a.inflight.Load())
	}
	if s := endpointStates(c); s != "b:1=ready/1" {
		t.Fatalf("state: %s (a removed endpoint with nothing in flight is not listed)", s)
	}
	got.Release()

	b := got
	c.setEndpoints(discovery.Set{})
	if got := c.claim(b); got != b || b.inflight.Load() != 1 {
		t.Fatalf("claim with no endpoint left: got %s, %d in flight", got.addr, b.inflight.Load())
	}
	if s := endpointStates(c); s != "b:1=removed/1" {
		t.Fatalf("state: %s", s)
	}
	b.Release()
	if s := endpointStates(c); s != "" {
		t.Fatalf("state after the last exchange: %s", s)
	}
}

// TestEmptyUpdate: a source that listed endpoints and then lists none is
// counted, and its empty set kept or applied as discovery.on_empty says.
func TestEmptyUpdate(t *testing.T) {
	for _, onEmpty := range []string{config.OnEmptyKeep, config.OnEmptyApply} {
		reader := sdkmetric.NewManualReader()
		m, err := metrics.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)).Meter("test"), downstream.NewRegistry())
		if err != nil {
			t.Fatal(err)
		}
		cfg := config.Cluster{Name: "c", MaxConnsPerEndpoint: 1,
			Discovery: config.Discovery{Static: []string{"a:1", "b:1"}, OnEmpty: onEmpty}}
		c := New(cfg, m.ForCluster("c"), downstream.NewRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)))
		c.Update(discovery.Set{Source: "file"})
		want := 2
		if onEmpty == config.OnEmptyApply {
			want = 0
		}
		if n := len(*c.endpoints.Load()); n != want {
			t.Errorf("on_empty %s: %d endpoints after an empty update, want %d", onEmpty, n, want)
		}
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(context.Background(), &rm); err != nil {
			t.Fatal(err)
		}
		var counted int64
		for _, sm := range rm.ScopeMetrics {
			for _, mt := range sm.Metrics {
				if mt.Name == "ebb.discovery.empty_updates" {
					for _, dp := range mt.Data.(metricdata.Sum[int64]).DataPoints {
						counted += dp.Value
					}
				}
			}
		}
		if counted != 1 {
			t.Errorf("on_empty %s: ebb.discovery.empty_updates = %d, want 1", onEmpty, counted)
		}
	}
}
