package cluster

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/ebb-proxy/ebb/config"
)

// TestEWMAObserve: a slower answer is believed at once; faster ones bring
// the estimate down by minWeight of the difference; time brings it down
// by e in ewmaDecay; a failure costs at least failureFloor and
// failureFactor times the estimate; an estimate left alone decays.
func TestEWMAObserve(t *testing.T) {
	var e ewma
	const s = int64(time.Second)
	now := 100 * s
	if got := e.cost(now); got != 0 {
		t.Fatalf("new estimate %v, want 0", got)
	}
	e.observe(now, 2*time.Millisecond, false)
	if got := e.cost(now); got != float64(2*time.Millisecond) {
		t.Fatalf("after one answer of 2ms: %v", time.Duration(got))
	}
	e.observe(now, 20*time.Millisecond, false) // the peak, at once
	if got := e.cost(now); got != float64(20*time.Millisecond) {
		t.Fatalf("after a 20ms answer: %v, want 20ms", time.Duration(got))
	}
	e.observe(now, time.Millisecond, false) // same instant: minWeight
	if got, want := e.cost(now), 0.95*20e6+0.05*1e6; got != want {
		t.Fatalf("a fast answer in the same instant: %v, want %v", time.Duration(got), time.Duration(want))
	}
	before := e.cost(now)
	e.observe(now+int64(ewmaDecay), time.Millisecond, false) // decayed by e, then moved by minWeight
	want := before/2.718281828459045*0.95 + 0.05*1e6
	if got := e.cost(now + int64(ewmaDecay)); got > want*1.0001 || got < want*0.9999 {
		t.Fatalf("ewmaDecay later: %v, want %v", time.Duration(got), time.Duration(want))
	}
	var f ewma
	f.observe(now, 100*time.Microsecond, true) // a fast failure
	if got := f.cost(now); got != float64(failureFloor) {
		t.Fatalf("a fast failure costs %v, want %v", time.Duration(got), failureFloor)
	}
	f.observe(now, 100*time.Microsecond, true)
	if got := f.cost(now); got != float64(failureFactor*failureFloor) {
		t.Fatalf("a second failure costs %v, want %v", time.Duration(got), failureFactor*failureFloor)
	}
	if got, want := f.cost(now+int64(ewmaDecay)), float64(failureFactor*failureFloor)/2.718281828459045; got > want*1.0001 || got < want*0.9999 {
		t.Fatalf("left alone for ewmaDecay: %v, want %v", time.Duration(got), time.Duration(want))
	}
}

// serveSequentially sends n requests one after another through c's
// balancer, each answered after the time and with the status that
// answer gives its endpoint, and counts the requests each endpoint got.
func serveSequentially(c *Cluster, n int, answer func(addr string) (time.Duration, int)) map[string]int {
	got := map[string]int{}
	for range n {
		ep := c.claim(c.Pick())
		took, status := answer(ep.addr)
		time.Sleep(took) // the fake clock of the bubble
		ep.Release()
		c.outcome(ep, nil, status, took)
		got[ep.addr]++
	}
	return got
}

// TestEWMAAvoidsSlowEndpoint: among three endpoints, one answering in
// 20 ms and two in 1 ms, ewma sends the slow one under 10 % of 3,000
// requests; least_request, blind to latency, a third.
func TestEWMAAvoidsSlowEndpoint(t *testing.T) {
	answer := func(addr string) (time.Duration, int) {
		if addr == "slow:1" {
			return 20 * time.Millisecond, 200
		}
		return time.Millisecond, 200
	}
	synctest.Test(t, func(t *testing.T) {
		c := testCluster(config.BalancerEWMA, "a:1", "slow:1", "b:1")
		got := serveSequentially(c, 3000, answer)
		if got["slow:1"] >= 300 {
			t.Errorf("ewma: the slow endpoint got %d of 3000 requests (%v), want under 10 %%", got["slow:1"], got)
		}
		t.Logf("ewma: %v", got)
	})
	synctest.Test(t, func(t *testing.T) {
		c := testCluster(config.BalancerLeastRequest, "a:1", "slow:1", "b:1")
		got := serveSequentially(c, 3000, answer)
		if got["slow:1"] < 800 {
			t.Errorf("least_request: the slow endpoint got %d of 3000 requests (%v), want about a third", got["slow:1"], got)
		}
	})
}

// TestEWMADoesNotFavourFastFailures: an endpoint that answers 503 at once
// (in 0.1 ms, where the others take 1 ms) gets under 10 % of the
// requests, not the most.
func TestEWMADoesNotFavourFastFailures(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := testCluster(config.BalancerEWMA, "a:1", "failing:1", "b:1")
		got := serveSequentially(c, 3000, func(addr string) (time.Duration, int) {
			if addr == "failing:1" {
				return 100 * time.Microsecond, 503
			}
			return time.Millisecond, 200
		})
		if got["failing:1"] >= 300 {
			t.Errorf("the fast-failing endpoint got %d of 3000 requests (%v), want under 10 %%", got["failing:1"], got)
		}
		t.Logf("%v", got)
	})
}

// TestEWMATriesAgain: an endpoint out of favour is tried again once its
// estimate has decayed below the others', and wins back its share when it
// has become fast.
func TestEWMATriesAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := testCluster(config.BalancerEWMA, "a:1", "b:1")
		slow := true
		answer := func(addr string) (time.Duration, int) {
			if addr == "b:1" && slow {
				return 50 * time.Millisecond, 200
			}
			return time.Millisecond, 200
		}
		serveSequentially(c, 1000, answer)
		slow = false
		// a's estimate stays at 1 ms; b's 50 ms decays below it after
		// ewmaDecay × ln 50, about 39 s (39,000 requests here), and b,
		// tried again, is fast: from then on they share.
		serveSequentially(c, 45000, answer)
		got := serveSequentially(c, 20000, answer)
		t.Logf("%v", got)
		if got["b:1"] < 8000 {
			t.Errorf("b, fast again, got %d of 20000 requests (%v), want about half", got["b:1"], got)
		}
	})
}
