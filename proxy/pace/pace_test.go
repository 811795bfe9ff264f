package pace

import (
	"testing"
	"time"
)

func TestBudget(t *testing.T) {
	const ms = time.Millisecond
	type wait struct {
		d time.Duration
		n int
	}
	for _, tc := range []struct {
		name  string
		rate  int64
		waits []wait
		left  time.Duration
	}{
		{"fresh", 1000, nil, time.Second},
		{"silence spends", 1000, []wait{{400 * ms, 0}, {300 * ms, 0}}, 300 * ms},
		{"at the rate, even", 1000, []wait{{500 * ms, 500}, {500 * ms, 500}}, time.Second},
		{"below the rate, behind", 1000, []wait{{500 * ms, 100}, {500 * ms, 100}}, 200 * ms},
		{"too slow: none left", 1000, []wait{{600 * ms, 100}, {600 * ms, 100}}, 0},
		// Credit is capped: a fast start buys no time for later.
		{"no credit beyond the slack", 1000, []wait{{0, 1 << 20}, {900 * ms, 0}}, 100 * ms},
		{"bytes while nothing waits", 1000, []wait{{800 * ms, 0}, {0, 300}}, 500 * ms},
		// No rate: any byte restores the slack, silence alone is bounded.
		{"no rate, a byte", 0, []wait{{900 * ms, 0}, {50 * ms, 1}}, time.Second},
		{"no rate, silence", 0, []wait{{900 * ms, 0}, {200 * ms, 0}}, -100 * ms},
		{"huge rate", 1 << 40, []wait{{500 * ms, 1000}}, 500*ms + 1000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := New(tc.rate, time.Second)
			for _, w := range tc.waits {
				p.Waited(w.d, w.n)
			}
			if got := p.Left(); got != tc.left {
				t.Fatalf("left %v, want %v", got, tc.left)
			}
		})
	}
	var none Budget
	if some := New(0, time.Second); none.Timed() || !some.Timed() {
		t.Fatal("Timed: want false for the zero Budget, true with a slack")
	}
}
