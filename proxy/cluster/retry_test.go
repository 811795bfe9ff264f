package cluster

import (
	"testing"
	"time"
)

// TestRetryBudget: retries are allowed up to the budget's fraction of the
// window's requests plus the floor, and the window rolls over.
func TestRetryBudget(t *testing.T) {
	b := budget{ratio: 0.2}
	now := time.Now()
	for range 100 {
		b.request(now)
	}
	allowed := 0
	for range 100 {
		if b.allow() {
			allowed++
		}
	}
	if want := 100*2/10 + retryFloor; allowed != want {
		t.Fatalf("%d retries allowed after 100 requests, want %d", allowed, want)
	}
	b.request(now.Add(retryWindow + time.Second)) // a new window
	allowed = 0
	for range 100 {
		if b.allow() {
			allowed++
		}
	}
	if allowed != retryFloor {
		t.Fatalf("%d retries allowed in a new window with 1 request, want the floor %d", allowed, retryFloor)
	}
}
