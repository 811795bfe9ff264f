package cluster

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ebb-proxy/ebb/config"
	"github.com/ebb-proxy/ebb/proxy/h2client"
	"github.com/ebb-proxy/ebb/proxy/upstream"
)

// refused is a failed connect, as the transports report it.
var refused = &upstream.Error{Kind: upstream.KindConnect, Err: syscall.ECONNREFUSED}

// TestEjection: a failed connect ejects an endpoint for its backoff
// (doubling while the failures go on), five 5xx in a row do too, a
// success ends the streak, and the last available endpoint is never
// ejected.
func TestEjection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := testCluster(config.BalancerRoundRobin, "a:1", "b:1")
		eps := *c.endpoints.Load()
		a, b := eps[0], eps[1]
		picks := func() map[string]int {
			got := map[string]int{}
			for range 10 {
				got[c.Pick().addr]++
			}
			return got
		}
		c.outcome(a, refused, 0, 0)
		if got := picks(); got["a:1"] != 0 {
			t.Fatalf("picked %v right after a's failed connect", got)
		}
		c.outcome(b, refused, 0, 0) // b is the last available: not ejected
		if b.health.ejected.Load() {
			t.Fatal("the last available endpoint was ejected")
		}
		time.Sleep(time.Second) // fake time: a's first ejection ends
		if got := picks(); got["a:1"] == 0 {
			t.Fatalf("picked %v after a's ejection ended", got)
		}
		c.outcome(a, refused, 0, 0) // fails again: twice as long
		time.Sleep(time.Second)     // fake time: moves the bubble's clock
		if got := picks(); got["a:1"] != 0 {
			t.Fatalf("picked %v during a's second, longer ejection", got)
		}
		time.Sleep(time.Second)   // fake time
		c.outcome(a, nil, 200, 0) // back: the streak ends
		if a.health.streak.Load() != 0 || a.health.ejections.Load() != 2 {
			t.Fatalf("streak %d, ejections %d after a success", a.health.streak.Load(), a.health.ejections.Load())
		}
		for i := range 5 {
			if a.health.ejected.Load() {
				t.Fatalf("ejected after %d 5xx", i)
			}
			c.outcome(a, nil, 503, 0)
		}
		if !a.health.ejected.Load() {
			t.Fatalf("not ejected after %d 5xx in a row", 5)
		}
	})
}

// TestAllEjectedUsesAll: when every endpoint is ejected (each was the
// other's fallback at some point), the balancer uses them all.
func TestAllEjectedUsesAll(t *testing.T) {
	c := testCluster(config.BalancerP2C, "a:1", "b:1")
	for _, ep := range *c.endpoints.Load() {
		ep.health.eject(time.Second, 30*time.Second)
	}
	if ep := c.Pick(); ep == nil {
		t.Fatal("no endpoint picked while all are ejected")
	}
}

// odCluster is a round-robin cluster of addrs with outlier detection od.
func odCluster(od config.OutlierDetection, addrs ...string) *Cluster {
	c := testCluster(config.BalancerRoundRobin, addrs...)
	c.cfg.OutlierDetection = od
	return c
}

// TestOutlierDetectionSettings: consecutive gateway errors (a broken
// answer, a timeout, a 504) eject after their count and 5xx after theirs,
// either count 0 turns its rule off, and the ejection lasts
// base_ejection_time, doubling up to max_ejection_time.
func TestOutlierDetectionSettings(t *testing.T) {
	broken := &upstream.Error{Kind: upstream.KindBroken, Err: syscall.ECONNRESET}
	timeout := &upstream.Error{Kind: upstream.KindTimeout, Err: syscall.ETIMEDOUT}
	synctest.Test(t, func(t *testing.T) {
		od := config.OutlierDetection{Consecutive5xx: 0, ConsecutiveGatewayErrors: 3,
			BaseEjectionTime: 2 * time.Second, MaxEjectionTime: 3 * time.Second, MaxEjectedPercent: 100}
		c := odCluster(od, "a:1", "b:1")
		a := (*c.endpoints.Load())[0]
		for range 10 {
			c.outcome(a, nil, 500, 0) // 5xx: off
		}
		if !a.health.available(nowNano) {
			t.Fatal("ejected by 500s with consecutive_5xx 0")
		}
		// Not the upstream's: the client went away, a gRPC call's own
		// deadline passed.
		for range 10 {
			c.outcome(a, &upstream.Error{Kind: upstream.KindBroken, Err: context.Canceled}, 0, 0)
			c.outcome(a, h2client.ErrDeadline, 0, 0)
		}
		if !a.health.available(nowNano) {
			t.Fatal("ejected for failures that were not the upstream's")
		}
		if _, counts := ewmaOutcome(context.Canceled, 0); counts {
			t.Error("ewma counts a client's going away")
		}
		c.outcome(a, broken, 0, 0)
		c.outcome(a, timeout, 0, 0)
		if !a.health.available(nowNano) {
			t.Fatal("ejected after 2 gateway errors of 3")
		}
		c.outcome(a, nil, 504, 0)
		if a.health.available(nowNano) {
			t.Fatal("not ejected after 3 gateway errors")
		}
		time.Sleep(2*time.Second - time.Millisecond) // the bubble's clock
		if a.health.available(nowNano) {
			t.Fatal("back before base_ejection_time")
		}
		time.Sleep(time.Millisecond)
		if !a.health.available(nowNano) {
			t.Fatal("still ejected after base_ejection_time")
		}
		for range 3 {
			c.outcome(a, nil, 502, 0)
		}
		time.Sleep(3*time.Second - time.Millisecond) // doubled, but at most 3 s
		if a.health.available(nowNano) {
			t.Fatal("back before max_ejection_time")
		}
		time.Sleep(time.Millisecond)
		if !a.health.available(nowNano) {
			t.Fatal("still ejected after max_ejection_time")
		}
		// A success between errors ends the count.
		c.outcome(a, nil, 200, 0)
		for range 2 {
			c.outcome(a, broken, 0, 0)
			c.outcome(a, nil, 200, 0)
		}
		if !a.health.available(nowNano) {
			t.Fatal("ejected although successes came between the errors")
		}
	})
}

// TestMaxEjectedPercent: with max_ejected_percent 50, two of four
// endpoints are ejected at most; with 0, none; one may always be.
func TestMaxEjectedPercent(t *testing.T) {
	for _, c := range []struct {
		percent, endpoints, want int
	}{{50, 4, 2}, {0, 4, 0}, {10, 4, 1}, {100, 4, 3}} {
		od := config.DefaultOutlierDetection()
		od.MaxEjectedPercent = c.percent
		var addrs []string
		for i := range c.endpoints {
			addrs = append(addrs, fmt.Sprintf("e%d:1", i))
		}
		cl := odCluster(od, addrs...)
		for _, ep := range *cl.endpoints.Load() {
			cl.outcome(ep, refused, 0, 0)
		}
		ejected := 0
		for _, ep := range *cl.endpoints.Load() {
			if !ep.health.available(nowNano) {
				ejected++
			}
		}
		if ejected != c.want {
			t.Errorf("max_ejected_percent %d of %d endpoints, all failing: %d ejected, want %d", c.percent, c.endpoints, ejected, c.want)
		}
	}
}
