package cluster

import (
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ebb-proxy/ebb/config"
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
		time.Sleep(ejectBase) // fake time: a's first ejection ends
		if got := picks(); got["a:1"] == 0 {
			t.Fatalf("picked %v after a's ejection ended", got)
		}
		c.outcome(a, refused, 0, 0) // fails again: twice as long
		time.Sleep(ejectBase)       // fake time: moves the bubble's clock
		if got := picks(); got["a:1"] != 0 {
			t.Fatalf("picked %v during a's second, longer ejection", got)
		}
		time.Sleep(ejectBase)     // fake time
		c.outcome(a, nil, 200, 0) // back: the streak ends
		if a.health.streak.Load() != 0 || a.health.ejections.Load() != 2 {
			t.Fatalf("streak %d, ejections %d after a success", a.health.streak.Load(), a.health.ejections.Load())
		}
		for i := range ejectAfter5xx {
			if a.health.ejected.Load() {
				t.Fatalf("ejected after %d 5xx", i)
			}
			c.outcome(a, nil, 503, 0)
		}
		if !a.health.ejected.Load() {
			t.Fatalf("not ejected after %d 5xx in a row", ejectAfter5xx)
		}
	})
}

// TestAllEjectedUsesAll: when every endpoint is ejected (each was the
// other's fallback at some point), the balancer uses them all.
func TestAllEjectedUsesAll(t *testing.T) {
	c := testCluster(config.BalancerP2C, "a:1", "b:1")
	for _, ep := range *c.endpoints.Load() {
		ep.health.eject()
	}
	if ep := c.Pick(); ep == nil {
		t.Fatal("no endpoint picked while all are ejected")
	}
}
