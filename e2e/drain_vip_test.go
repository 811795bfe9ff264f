package e2e

import (
	"fmt"
	"io"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ebb-proxy/ebb/examples/loadgen"
	"github.com/ebb-proxy/ebb/examples/vip"
)

// The drain timeline of the VIP scenarios: small but realistic numbers,
// so that a scenario takes a few seconds.
const (
	vipDelay   = 500 * time.Millisecond
	vipSpread  = time.Second
	vipQuiet   = 300 * time.Millisecond
	vipTimeout = 15 * time.Second
	// vipWorkers send requests back to back through the VIP.
	vipWorkers = 8
	// vipTail is how long the load goes on after the drained replica
	// exited.
	vipTail = 300 * time.Millisecond
	// vipArrivals clients arrive at a time, one after the other, each
	// sending vipSession requests on its own new connection and leaving
	// (Connection: close on its last). Without arrivals the long-lived
	// connections would all settle on the replica left and the draining
	// one would have nothing to accept while the VIP still lists it.
	vipArrivals = 2
	vipSession  = 4
)

// vipRemovalDelays are the times after the trigger at which the drained
// replica leaves the VIP's list: at once, inside the announce phase, inside
// the signal phase, and after both (clients keep arriving during the drain).
var vipRemovalDelays = []time.Duration{0, 300 * time.Millisecond, time.Second, 3 * time.Second}

// vipReplicaYAML is a replica's configuration: one listener to the origin,
// and the drain timeline above.
func vipReplicaYAML(origin string) string {
	return singleClusterYAML(origin) + fmt.Sprintf(`drain:
  delay: %s
  spread: %s
  quiet: %s
  timeout: %s
  http1: { idle_close: 200ms }
  http2: { goaway_grace: 500ms }
`, vipDelay, vipSpread, vipQuiet, vipTimeout)
}

// startVIPReplicas starts replicas A and B of one mixedOrigin (closing
// every connection if originCloses) behind a VIP. B is the replica that
// stays: A's configuration, but without a minimum drain duration, so that
// its own drain at cleanup (once the VIP and the clients are gone) ends at
// once instead of adding delay + spread to every scenario. Until then it
// behaves as A does.
func startVIPReplicas(t *testing.T, originCloses bool) (a, b *ebbProc, v *vip.VIP) {
	t.Helper()
	yaml := vipReplicaYAML(hostPort(newOrigin(t, mixedOrigin(originCloses))))
	a = startEbb(t, yaml)
	path := writeConfig(t, yaml)
	b = startEbbArgs(t, path, "run", "-config", path, "-set", "drain.min_duration=0s")
	return a, b, newVIP(t, a.addr("public"), b.addr("public"))
}

// TestDrainVIP is DRAIN.md's test of the promise: two replicas behind a
// simulated Service VIP under keep-alive load; one is sent SIGTERM and
// leaves the VIP's list some time later. Every client (Go's HTTP/1.1
// client, a strict HTTP/1.1 client that never retries, Go's HTTP/2 client)
// sees exactly zero errors, and the drained replica exits 0 within quiet +
// 1s after its last connection ended.
func TestDrainVIP(t *testing.T) {
	t.Parallel()
	runVIPMatrix(t, false)
}

// TestDrainVIPUpstreamCloses is TestDrainVIP with an origin that closes
// every connection (Connection: close), so every request during the drain
// needs a new upstream connection: those dials are never refused.
func TestDrainVIPUpstreamCloses(t *testing.T) {
	t.Parallel()
	runVIPMatrix(t, true)
}

func runVIPMatrix(t *testing.T, originCloses bool) {
	for _, kind := range loadgen.Kinds {
		for _, removal := range vipRemovalDelays {
			t.Run(fmt.Sprintf("%s/removal=%s", kind.Name, removal), func(t *testing.T) {
				t.Parallel()
				runVIPDrain(t, kind, removal, originCloses)
			})
		}
	}
}

func runVIPDrain(t *testing.T, kind loadgen.Kind, removal time.Duration, originCloses bool) {
	a, b, v := startVIPReplicas(t, originCloses)
	addrA, addrB := a.addr("public"), b.addr("public")
	// The load: keep-alive workers sharing one long-lived client of kind,
	// and the arrivals. Its own bound: the whole drain, with room to spare.
	load := startLoad(t, loadSpec{addr: v.Addr(), kinds: []loadgen.Kind{kind}, workers: vipWorkers,
		arrivals: vipArrivals, session: vipSession, request: mixedRequest, warmOK: 50 * vipWorkers,
		limit: vipTimeout + 30*time.Second})

	recv(t, load.Warm(), "the load to warm up")
	pinned := v.Stat(addrA).Open
	if pinned == 0 {
		t.Fatalf("no connection is pinned to replica A before its drain: the scenario would test nothing")
	}

	trigger := time.Now()
	a.signal(syscall.SIGTERM)
	removed, stopRemoved := after(removal)
	defer stopRemoved()
	bound, stopBound := after(vipTimeout + 5*time.Second)
	defer stopBound()
	var removedAt, exitAt time.Time
	exited := a.done
	for removedAt.IsZero() || exitAt.IsZero() {
		select {
		case <-removed:
			v.SetBackends(addrB)
			removedAt, removed = time.Now(), nil
		case <-exited:
			exitAt, exited = time.Now(), nil
		case <-bound:
			t.Fatalf("replica A has not exited %s after SIGTERM; its log:\n%s", vipTimeout+5*time.Second, a.logs())
		}
	}
	// The client's view: every request answered 200 with its body.
	res := stopLoadAfterExit(t, load, vipTail, trigger,
		fmt.Sprintf("SIGTERM to replica A, removed from the VIP at T+%s, exited at T+%s",
			removedAt.Sub(trigger).Round(time.Millisecond), exitAt.Sub(trigger).Round(time.Millisecond)),
		"no request answered after replica A exited: replica B did not take the load")
	requests, errs := res.Requests, len(res.Fails)

	// The VIP's view: no connection refused, A's all ended.
	sa, sb := v.Stat(addrA), v.Stat(addrB)
	for name, s := range map[string]vip.BackendStat{"A": sa, "B": sb} {
		if len(s.DialErrors) > 0 {
			t.Errorf("replica %s refused %d connections the VIP still sent it: %v", name, len(s.DialErrors), s.DialErrors)
		}
	}
	if n := v.RefusedNoRoute(); n != 0 {
		t.Errorf("the VIP refused %d connections for want of a backend", n)
	}
	if sa.Open != 0 {
		t.Errorf("%d connections to replica A still open after it exited", sa.Open)
	}
	if removal > vipDelay+vipSpread {
		// DRAIN.md "keep accepting": clients kept arriving after every
		// connection had its moment, and A served them (no dial error).
		if n := sa.RoutedSince(trigger.Add(vipDelay + vipSpread)); n == 0 {
			t.Errorf("no connection reached replica A after T+%s: the scenario did not test accepting during the drain", vipDelay+vipSpread)
		}
	}

	// Replica A's view: a clean, prompt exit.
	if code := a.exit(); code != 0 {
		t.Errorf("replica A exited with status %d, want 0; its log:\n%s", code, a.logs())
	}
	if recs := a.logRecords("ebb exiting"); len(recs) != 1 || recs[0]["reason"] != "drained" {
		t.Errorf("replica A's exit lines %v, want one with reason drained", recs)
	}
	if lines := a.logsAt("ERROR"); len(lines) > 0 {
		t.Errorf("replica A logged errors:\n%v", lines)
	}
	if sa.LastEnd.IsZero() {
		t.Fatalf("the VIP saw no connection to replica A end")
	}
	// Drained (DRAIN.md, exit): no connection, min_duration (= delay +
	// spread) since T, no new connection for quiet. So A exits within
	// quiet + 1s after its last connection ended, or within 1s after
	// min_duration when its connections left before that.
	minExit := trigger.Add(vipDelay + vipSpread)
	due := sa.LastEnd.Add(vipQuiet)
	if due.Before(minExit) {
		due = minExit
	}
	if exitAt.After(due.Add(time.Second)) {
		t.Errorf("replica A exited at T+%s, %s after its last connection ended (T+%s); want at most 1s after T+%s = max(last end + quiet, min_duration); its log:\n%s",
			exitAt.Sub(trigger).Round(time.Millisecond), exitAt.Sub(sa.LastEnd).Round(time.Millisecond),
			sa.LastEnd.Sub(trigger).Round(time.Millisecond), due.Sub(trigger).Round(time.Millisecond), a.logs())
	}
	if exitAt.Before(minExit) {
		t.Errorf("replica A exited at T+%s, before min_duration (%s)", exitAt.Sub(trigger).Round(time.Millisecond), vipDelay+vipSpread)
	}
	// The long-lived connections pinned to A at T never leave on their
	// own: they left because A told them (Connection: close, GOAWAY).
	phases := a.logRecords("drain phase")
	if len(phases) == 0 || phases[len(phases)-1]["phase"] != "exit" {
		t.Fatalf("replica A's last drain phase line is not the exit: %v", phases)
	}
	last := phases[len(phases)-1]
	signals, _ := last["close_signals_http1"].(float64)
	if h2, _ := last["close_signals_http2"].(float64); h2 > signals {
		signals = h2
	}
	if signals == 0 {
		t.Errorf("replica A sent no close signal: %v", last)
	}

	var took any
	if recs := a.logRecords("drain finished"); len(recs) == 1 {
		took = recs[0]["took"]
	}
	silent := ""
	if sa.Silent > 0 {
		silent = fmt.Sprintf(", %d silent conns (last ended T+%s)", sa.Silent, sa.LastSilentEnd.Sub(trigger).Round(time.Millisecond))
	}
	t.Logf("requests %d (errors %d, %d clients arrived); A: %d conns pinned at T, %d routed during the drain%s, %v close signals, last ended T+%s, removed T+%s, exited T+%s (drain took %v), exit-lastEnd %s",
		requests, errs, res.Arrivals, pinned, sa.RoutedSince(trigger), silent, signals,
		sa.LastEnd.Sub(trigger).Round(time.Millisecond), removedAt.Sub(trigger).Round(time.Millisecond),
		exitAt.Sub(trigger).Round(time.Millisecond), took, exitAt.Sub(sa.LastEnd).Round(time.Millisecond))
}

// TestDrainVIPSilentConnection: a connection pinned to the drained
// replica that never sends a byte (Go's HTTP/1 transport keeps the spare
// connections it dialled for a request that then found an idle one;
// browsers preconnect) is an idle connection: the drain closes it
// idle_close after its moment, with a FIN, and the replica exits soon
// after min_duration, not when the header timeout (10s) ends it.
func TestDrainVIPSilentConnection(t *testing.T) {
	t.Parallel()
	a, b, v := startVIPReplicas(t, false)
	addrA, addrB := a.addr("public"), b.addr("public")

	// The VIP's first connection goes to A.
	silent := rawConn(t, v.Addr())
	if !v.Await(addrA, waitTimeout, func(s vip.BackendStat) bool { return s.Open == 1 }) {
		t.Fatalf("the first connection was not forwarded to replica A: %+v", v.Stat(addrA))
	}
	// A client: its pooled connection drops on the FIN, and it closes its
	// side at once.
	ended := make(chan error, 1)
	var reader sync.WaitGroup
	reader.Go(func() {
		_, err := silent.Read(make([]byte, 1))
		silent.Close()
		ended <- err
	})
	t.Cleanup(func() {
		silent.Close() // ends the read if the test failed before
		reader.Wait()
	})

	trigger := time.Now()
	a.signal(syscall.SIGTERM)
	v.SetBackends(addrB)

	if err := recv(t, ended, "replica A to close the silent connection"); err != io.EOF {
		t.Errorf("the silent connection ended with %v, want EOF (a FIN)", err)
	}
	closedAt := time.Now()
	code := a.exit()
	exitAt := time.Now()
	if code != 0 {
		t.Errorf("replica A exited with status %d, want 0", code)
	}
	// Its moment (at most T+delay+spread), idle_close, the client's close,
	// then quiet; 1s of slack.
	want := vipDelay + vipSpread + 200*time.Millisecond + vipQuiet + time.Second
	if took := exitAt.Sub(trigger); took > want {
		t.Errorf("replica A exited at T+%s (the silent connection closed at T+%s), want by T+%s; its log:\n%s",
			took.Round(time.Millisecond), closedAt.Sub(trigger).Round(time.Millisecond), want, a.logs())
	}
}
