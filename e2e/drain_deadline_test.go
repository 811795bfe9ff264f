package e2e

import (
	"net/http"
	"syscall"
	"testing"
	"time"
)

// Drain scenario (e), the deadline. The helpers the scenarios share are
// in drain_scenarios_test.go.

// TestDrainDeadline holds a stream open through ebb past drain.timeout: an
// HTTP/1 request the origin never answers, and the same over HTTP/2 (h2c).
// (A WebSocket no longer lasts that long: it is told to go away, see
// TestWebSocketDrain.) At the deadline ebb closes it (the client sees its
// connection closed, not before the deadline), logs "drain finished" with
// reason deadline and forced_closes ≥ 1, and exits with status 3, within
// 1 s of the deadline.
func TestDrainDeadline(t *testing.T) {
	t.Parallel()
	const timeout = 2 * time.Second
	// An opener starts the stream through e and returns once it is
	// established end to end; the channel reports how it ended.
	type opener func(t *testing.T, e *ebbProc, arrived <-chan struct{}) <-chan heldResult
	hold := func(major int) opener {
		return func(t *testing.T, e *ebbProc, arrived <-chan struct{}) <-chan heldResult {
			var p http.Protocols
			if major == 2 {
				p.SetUnencryptedHTTP2(true)
			} else {
				p.SetHTTP1(true)
			}
			tr := &http.Transport{Protocols: &p, DisableCompression: true}
			t.Cleanup(tr.CloseIdleConnections)
			ch := getHeld(t, &http.Client{Transport: tr}, e.url("public", "/never"), major)
			recv(t, arrived, "the request to reach the origin")
			return ch
		}
	}
	cases := []struct {
		name string
		open opener
	}{
		{"h1", hold(1)},
		{"h2c", hold(2)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			arrived := make(chan struct{}, 1)
			origin := newOrigin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				// Never answers within the test.
				arrived <- struct{}{}
				<-r.Context().Done()
			}))
			e := startEbb(t, singleClusterYAML(hostPort(origin))+scenarioDrain(timeout))
			held := tc.open(t, e, arrived)

			trigger := time.Now()
			e.signal(syscall.SIGTERM)
			if status, body := pollReady(t, e); status != 503 {
				t.Errorf("/ready during the drain: %d %q, want 503", status, body)
			}
			r := recv(t, held, "the held stream to end")
			exitAt := awaitExit(t, e, "ebb to exit at the deadline")
			code := e.exit()
			t.Logf("stream ended at T+%s (%v); ebb exited at T+%s", r.at.Sub(trigger).Round(time.Millisecond), r.err,
				exitAt.Sub(trigger).Round(time.Millisecond))
			if r.err == nil {
				t.Errorf("the held stream ended with %d %q, want its connection closed", r.status, r.body)
			}
			if d := r.at.Sub(trigger); d < timeout {
				t.Errorf("the held stream ended at T+%s, before the deadline (%s): %v", d, timeout, r.err)
			}
			if code != 3 {
				t.Errorf("exit status %d, want 3 (deadline); log:\n%s", code, e.logs())
			}
			if d := exitAt.Sub(trigger); d < timeout || d > timeout+time.Second {
				t.Errorf("ebb exited at T+%s, want between the deadline (%s) and 1s after", d, timeout)
			}
			if f := checkDrainEnd(t, e, "deadline"); f < 1 {
				t.Errorf("forced_closes %v, want ≥ 1", f)
			}
		})
	}
}
