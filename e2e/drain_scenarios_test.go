package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// The drain scenarios of issue 4, item 11 b–e, one file each: an outbound
// listener used by the local app through the drain (drain_outbound_test.go),
// nginx as a WAF in front of two replicas (drain_waf_test.go), the watched
// application exiting (drain_appgone_test.go), and the deadline
// (drain_deadline_test.go). This file holds what they share. Each writes
// its own drain section with small but realistic numbers, so that a
// scenario takes a few seconds; every assertion on errors is exact.
const (
	scnDelay     = 300 * time.Millisecond
	scnSpread    = 500 * time.Millisecond
	scnQuiet     = 300 * time.Millisecond
	scnIdleClose = 200 * time.Millisecond
)

// scenarioDrain returns the drain section of these scenarios with the
// given timeout; extra lines go inside the section, as written (two-space
// indent).
func scenarioDrain(timeout time.Duration, extra ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "drain:\n  delay: %s\n  spread: %s\n  quiet: %s\n  timeout: %s\n  http1: { idle_close: %s }\n",
		scnDelay, scnSpread, scnQuiet, timeout, scnIdleClose)
	for _, l := range extra {
		b.WriteString(l + "\n")
	}
	return b.String()
}

// awaitExit waits for ebb's process to exit, failing the test after
// waitTimeout, and returns when the exit was seen (when Wait returned, not
// when this call noticed it).
func awaitExit(t *testing.T, e *ebbProc, what string) time.Time {
	t.Helper()
	recv(t, e.done, what)
	return e.exitTime
}

// holdUntil waits until at (a timer, not a sleep); if done closes first,
// it fails the test with msg.
func holdUntil(t *testing.T, at time.Time, done <-chan struct{}, msg string) {
	t.Helper()
	timer := time.NewTimer(time.Until(at))
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-done:
		t.Fatal(msg)
	}
}

// awaitLogLine waits for ebb to log a line whose msg is msg and returns the
// first, failing the test if ebb exits first or after waitTimeout.
func awaitLogLine(t *testing.T, e *ebbProc, msg string) map[string]any {
	t.Helper()
	return awaitLogLines(t, e, msg, 1)[0]
}

// awaitLogLines waits until ebb has logged msg n times and returns those
// records.
func awaitLogLines(t *testing.T, e *ebbProc, msg string, n int) []map[string]any {
	t.Helper()
	timeout, stop := after(waitTimeout)
	defer stop()
	for {
		e.mu.Lock()
		logged := e.logged // taken before looking: no line can slip between
		e.mu.Unlock()
		if recs := e.logRecords(msg); len(recs) >= n {
			return recs
		}
		select {
		case <-logged:
		case <-e.done:
			if recs := e.logRecords(msg); len(recs) >= n {
				return recs
			}
			t.Fatalf("ebb exited (status %d) having logged %q %d times, not %d; its log:\n%s", e.exitCode, msg, len(e.logRecords(msg)), n, e.logs())
		case <-timeout:
			t.Fatalf("ebb did not log %q %d times within %s; its log:\n%s", msg, n, waitTimeout, e.logs())
		}
	}
}

// checkDrainEnd checks that ebb logged exactly one "drain finished" line,
// with reason, and returns its forced_closes.
func checkDrainEnd(t *testing.T, e *ebbProc, reason string) float64 {
	t.Helper()
	recs := e.logRecords("drain finished")
	if len(recs) != 1 || recs[0]["reason"] != reason {
		t.Errorf("\"drain finished\" lines %v, want one with reason %s; log:\n%s", recs, reason, e.logs())
		return -1
	}
	forced, _ := recs[0]["forced_closes"].(float64)
	exiting := e.logRecords("ebb exiting")
	if len(exiting) != 1 || exiting[0]["reason"] != reason {
		t.Errorf("\"ebb exiting\" lines %v, want one with reason %s", exiting, reason)
	}
	if errs := e.logsAt("ERROR"); len(errs) > 0 {
		t.Errorf("ebb logged errors:\n%s", strings.Join(errs, "\n"))
	}
	return forced
}

// heldResult is how a request held open by a test ended, as its client
// saw it.
type heldResult struct {
	status int
	body   string
	close  bool // the response closed its connection (Connection: close)
	err    error
	at     time.Time // when the client had the whole response, or the error
}

// getHeld sends GET url with c in a goroutine and reports how it ended;
// major, unless 0, is the HTTP version the answer must have. The request
// is cancelled, and the goroutine waited for, at cleanup.
func getHeld(t *testing.T, c *http.Client, url string, major int) <-chan heldResult {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	ch := make(chan heldResult, 1)
	var wg sync.WaitGroup
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	wg.Go(func() {
		resp, err := c.Do(req)
		if err != nil {
			ch <- heldResult{err: err, at: time.Now()}
			return
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err == nil && major != 0 && resp.ProtoMajor != major {
			err = fmt.Errorf("answered over %s", resp.Proto)
		}
		ch <- heldResult{status: resp.StatusCode, body: string(b), close: resp.Close, err: err, at: time.Now()}
	})
	return ch
}
