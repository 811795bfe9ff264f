package e2e

import (
	"net/http"
	"syscall"
	"testing"
)

// sighupIgnored is what ebb logs for a SIGHUP it does not drain on.
const sighupIgnored = "SIGHUP: configuration reload is not available in this version; ebb keeps running on its current configuration (restart it to apply a new one)"

// TestSIGHUPDoesNotStop sends SIGHUP, the nginx and HAProxy operator's
// reload reflex, twice to an ebb whose drain.signals is the default: ebb
// logs it, keeps serving, and is not drained (nor forced by the second
// one); SIGTERM then drains it as usual.
func TestSIGHUPDoesNotStop(t *testing.T) {
	t.Parallel()
	origin := newOrigin(t, basicOrigin())
	e := startEbb(t, singleClusterYAML(hostPort(origin)))
	client := newClient(t)

	for i := range 2 {
		e.signal(syscall.SIGHUP)
		awaitLogLines(t, e, sighupIgnored, i+1)
	}
	req, _ := http.NewRequest(http.MethodGet, e.url("public", "/hello"), nil)
	if status, body, _ := do(t, client, req); status != 200 || string(body) != "hello, world\n" {
		t.Fatalf("after SIGHUP: status %d, body %q; want 200 \"hello, world\\n\"", status, body)
	}
	if recs := e.logRecords("drain started"); len(recs) != 0 {
		t.Fatalf("SIGHUP started a drain: %v", recs)
	}
	code, err := e.terminate()
	if err != nil || code != 0 {
		t.Fatalf("SIGTERM after SIGHUP: exit %d, %v; want 0. Log:\n%s", code, err, e.logs())
	}
}
