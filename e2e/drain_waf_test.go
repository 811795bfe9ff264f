package e2e

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ebb-proxy/ebb/bench/peers"
	"github.com/ebb-proxy/ebb/examples/loadgen"
)

// Drain scenario (c), nginx as a WAF in front of two replicas. The
// helpers the scenarios share are in drain_scenarios_test.go.

// wafOrigin answers every request with its body, X-Replica: name and the
// X-Request-Id it was sent.
func wafOrigin(name string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, "origin: reading the body: "+err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("X-Replica", name)
		w.Header().Set("X-Request-Id", r.Header.Get("X-Request-Id"))
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(b)
	})
}

// wafNginx is nginx as the WAF: one upstream group listing servers with
// a keep-alive pool, HTTP/1.1 to the upstreams, and nginx's defaults for
// proxy_next_upstream (error timeout: a POST already sent is not retried,
// so any error ebb causes is a 502 at the client). Bodies stay in memory
// (nginx sends a body spooled to a temporary file with a ~40ms
// delayed-ACK stall per request, which would only slow the load down).
func wafNginx(servers ...string) func(listen string) peers.Nginx {
	return func(listen string) peers.Nginx {
		return peers.Nginx{
			KeepaliveTimeout: 60 * time.Second, KeepaliveRequests: 1000000, BodyBuffer: 64 << 10,
			Upstreams: []peers.Upstream{{Name: "replicas", Servers: servers, Keepalive: 16, KeepaliveRequests: 1000000}},
			Servers:   []peers.Server{{Listen: listen, Locations: []peers.Location{{Match: "/", Pass: "replicas"}}}},
		}
	}
}

// startWAFLoad sends POST requests with bodies through nginx at addr from
// 6 workers, each over its own keep-alive connection (Go's HTTP/1 client),
// until stopped; every answer must be the body sent, with the request's
// X-Request-Id. It is warm once replicas A and B have each answered 3.
func startWAFLoad(t *testing.T, addr string) *loadgen.Load {
	bodies := []string{string(randBytes(11, 1<<10)), string(randBytes(12, 7<<10)), string(randBytes(13, 20<<10))}
	post := func(w, i int, _ bool) loadgen.Request {
		id := fmt.Sprintf("%d-%d", w, i)
		body := bodies[(w+i)%len(bodies)]
		return loadgen.Request{Method: http.MethodPost, Path: "/post/" + id, Body: body,
			ContentType: "application/octet-stream", ID: id, Want: body}
	}
	return startLoad(t, loadSpec{addr: addr, kinds: []loadgen.Kind{loadgen.GoHTTP1PerWorker}, workers: 6, request: post,
		warmReplicas: []string{"A", "B"}, limit: stopTimeout})
}

// awaitWAFWarm waits until every replica has answered through nginx,
// failing with nginx's error log if nginx exits or the wait takes
// waitTimeout.
func awaitWAFWarm(t *testing.T, l *loadgen.Load, ng *nginxProc) {
	t.Helper()
	timeout, stop := after(waitTimeout)
	defer stop()
	select {
	case <-l.Warm():
	case <-ng.done:
		t.Fatalf("nginx exited (%v); its error log:\n%s", ng.err, ng.log())
	case <-timeout:
		res := l.Results()
		t.Fatalf("the replicas did not all answer through nginx within %s; %d errors, first:\n%s\nnginx error log:\n%s",
			waitTimeout, len(res.Fails), formatFailures(res.Fails, l.Began(), 10), ng.log())
	}
}

// checkWAFExit checks what a replica A drained under the WAF's load must
// show, once the load has stopped: no POST failed, A answered some after
// its trigger (else the scenario tested nothing), and A exited 0.
func checkWAFExit(t *testing.T, l *loadgen.Load, ng *nginxProc, a *ebbProc, trigger, exitAt time.Time, code int) {
	t.Helper()
	res := l.Results()
	ok, nerr := res.OK, len(res.Fails)
	afterTrigger := l.ServedSince("A", trigger)
	t.Logf("%d POSTs answered, %d errors; A answered %d after T; A exited at T+%s",
		ok, nerr, afterTrigger, exitAt.Sub(trigger).Round(time.Millisecond))
	if nerr != 0 {
		t.Errorf("%d POSTs failed through nginx, want 0; first:\n%s\nnginx error log:\n%s\nreplica A log:\n%s",
			nerr, formatFailures(res.Fails, trigger, 10), ng.log(), a.logs())
	}
	if afterTrigger == 0 {
		t.Errorf("replica A answered no POST after its trigger: the scenario tested nothing")
	}
	if code != 0 {
		t.Errorf("replica A exit status %d, want 0; its log:\n%s", code, a.logs())
	}
}

// wafReplicaYAML is one ebb replica of the WAF scenario. The WAF (on
// 127.0.0.1) is a trusted proxy, as a deployment behind one lists it: its
// X-Request-Id (the client's, which the origin echoes) is kept.
func wafReplicaYAML(origin string) string {
	return oneClusterYAML(origin, []string{`headers: { trusted_proxies: ["127.0.0.1"] }`}, nil) + scenarioDrain(10*time.Second)
}

// TestDrainWAF puts nginx, as a WAF with a keep-alive upstream pool and
// its default proxy_next_upstream (no retry of a POST once sent), in front
// of two ebb replicas, sends POSTs with bodies through it from 6 Go
// workers (keep-alive to nginx), and drains replica A with SIGTERM. Every
// response must be a 200 with the body sent, and A must exit 0 (drained,
// nothing forced). nginx's error log must show no error.
//
//   - direct: nginx's upstream lists both replicas and is never told
//     (nginx OSS cannot drop a server without a reload, and a reload makes
//     nginx itself close idle client connections, which Go's client sees as
//     errors on POSTs whatever the upstream). A keeps getting its share of
//     the POSTs through the whole drain, each new connection told to close
//     after its first response; once the load stops, A exits within
//     quiet plus 1 s.
//   - vip: nginx's upstream is a Service VIP listing both replicas, from
//     which A is removed some time after its trigger (before the end of the
//     announce phase, and after the signal phase): A exits under load.
func TestDrainWAF(t *testing.T) {
	t.Parallel()
	t.Run("direct", func(t *testing.T) {
		t.Parallel()
		a := startEbb(t, wafReplicaYAML(hostPort(newOrigin(t, wafOrigin("A")))))
		b := startEbb(t, wafReplicaYAML(hostPort(newOrigin(t, wafOrigin("B")))))
		ng := startNginx(t, wafNginx(a.addr("public"), b.addr("public")))
		load := startWAFLoad(t, ng.addr)
		awaitWAFWarm(t, load, ng)

		trigger := time.Now()
		a.signal(syscall.SIGTERM)
		stopAt := trigger.Add(scnDelay + scnSpread + 700*time.Millisecond)
		holdUntil(t, stopAt, a.done, "replica A exited while nginx was still sending it requests")
		load.Stop()
		stopped := time.Now()
		exitAt := awaitExit(t, a, "replica A to exit")
		code := a.exit()

		res := load.Results()
		ok, nerr := res.OK, len(res.Fails)
		duringSignal := load.ServedSince("A", trigger.Add(scnDelay))
		t.Logf("%d POSTs answered, %d errors; A answered %d after T+%s; A exited %s after the load stopped (T+%s)",
			ok, nerr, duringSignal, scnDelay, exitAt.Sub(stopped).Round(time.Millisecond), exitAt.Sub(trigger).Round(time.Millisecond))
		if nerr != 0 {
			t.Errorf("%d POSTs failed through nginx, want 0; first:\n%s\nnginx error log:\n%s\nreplica A log:\n%s",
				nerr, formatFailures(res.Fails, trigger, 10), ng.log(), a.logs())
		}
		if duringSignal == 0 {
			t.Errorf("replica A answered no POST after T+%s: the scenario tested nothing", scnDelay)
		}
		if code != 0 {
			t.Errorf("replica A exit status %d, want 0; its log:\n%s", code, a.logs())
		}
		if d := exitAt.Sub(stopped); d > scnQuiet+time.Second {
			t.Errorf("replica A exited %s after the load stopped, want within quiet (%s) + 1s", d, scnQuiet)
		}
		if f := checkDrainEnd(t, a, "drained"); f != 0 {
			t.Errorf("replica A forced_closes %v, want 0", f)
		}
		if l := ng.logErrors(); len(l) > 0 {
			t.Errorf("nginx logged errors:\n%s", strings.Join(l, "\n"))
		}
	})
	// refusing: as direct, with drain.accept_until: after_delay, the
	// setting for a WAF that lists its upstreams and is never told (the
	// compose topology in deploy/compose). From the end of the announce
	// phase A refuses new connections, and nginx takes each refusal as the
	// cue to try B (a connection error, nothing sent: retried whatever the
	// method) and to leave A alone for its fail_timeout: A exits under
	// load. Connections nginx had already opened to A, waiting in A's
	// accept queue with a POST on them, must be served, not reset.
	t.Run("refusing", func(t *testing.T) {
		t.Parallel()
		replica := func(origin string) string {
			return wafReplicaYAML(origin) + "  accept_until: after_delay\n"
		}
		a := startEbb(t, replica(hostPort(newOrigin(t, wafOrigin("A")))))
		b := startEbb(t, replica(hostPort(newOrigin(t, wafOrigin("B")))))
		ng := startNginx(t, wafNginx(a.addr("public"), b.addr("public")))
		load := startWAFLoad(t, ng.addr)
		awaitWAFWarm(t, load, ng)

		trigger := time.Now()
		a.signal(syscall.SIGTERM)
		exitAt := awaitExit(t, a, "replica A to exit under load")
		code := a.exit()
		holdUntil(t, exitAt.Add(300*time.Millisecond), nil, "")
		load.Stop()

		checkWAFExit(t, load, ng, a, trigger, exitAt, code)
		// Past the signal phase: A's idle connections are closed (FIN, then
		// the socket finWait later), then quiet.
		bound := scnDelay + scnSpread + scnIdleClose + time.Second + scnQuiet + time.Second
		if d := exitAt.Sub(trigger); d > bound {
			t.Errorf("replica A exited at T+%s, want by T+%s (delay + spread + idle_close + 1s + quiet + 1s)", d, bound)
		}
		if f := checkDrainEnd(t, a, "drained"); f != 0 {
			t.Errorf("replica A forced_closes %v, want 0", f)
		}
		// nginx logs each refusal: that is the signal. Nothing else.
		var other []string
		for _, l := range ng.logErrors() {
			if !strings.Contains(l, "(111: Connection refused) while connecting to upstream") {
				other = append(other, l)
			}
		}
		if len(other) > 0 {
			t.Errorf("nginx logged errors other than refused connections:\n%s", strings.Join(other, "\n"))
		}
	})
	for _, removal := range []time.Duration{200 * time.Millisecond, scnDelay + scnSpread + 400*time.Millisecond} {
		t.Run("vip/removed_after_"+removal.String(), func(t *testing.T) {
			t.Parallel()
			a := startEbb(t, wafReplicaYAML(hostPort(newOrigin(t, wafOrigin("A")))))
			b := startEbb(t, wafReplicaYAML(hostPort(newOrigin(t, wafOrigin("B")))))
			v := newVIP(t, a.addr("public"), b.addr("public"))
			ng := startNginx(t, wafNginx(v.Addr()))
			load := startWAFLoad(t, ng.addr)
			awaitWAFWarm(t, load, ng)

			trigger := time.Now()
			a.signal(syscall.SIGTERM)
			// A may exit before its removal: nginx's pool to the VIP ends
			// up pinned to B, so no new connection may reach A for quiet,
			// which DRAIN.md counts as drained.
			removeAt := time.NewTimer(time.Until(trigger.Add(removal)))
			select {
			case <-removeAt.C:
			case <-a.done:
				t.Logf("replica A exited at T+%s, before its removal from the VIP (no new connection for quiet)",
					time.Since(trigger).Round(time.Millisecond))
				<-removeAt.C
			}
			v.SetBackends(b.addr("public"))
			exitAt := awaitExit(t, a, "replica A to exit")
			code := a.exit()
			// Nothing may break after A's exit: keep the load a moment.
			holdUntil(t, exitAt.Add(300*time.Millisecond), nil, "")
			load.Stop()

			checkWAFExit(t, load, ng, a, trigger, exitAt, code)
			bound := max(removal, scnDelay+scnSpread) + scnIdleClose + scnQuiet + time.Second
			if d := exitAt.Sub(trigger); d > bound {
				t.Errorf("replica A exited at T+%s, want by T+%s (max(removal, delay+spread) + idle_close + quiet + 1s)", d, bound)
			}
			if f := checkDrainEnd(t, a, "drained"); f != 0 {
				t.Errorf("replica A forced_closes %v, want 0", f)
			}
			if dialErrs := v.DialErrors(); len(dialErrs) > 0 {
				t.Errorf("the VIP could not reach a replica: %v", dialErrs)
			}
			if l := ng.logErrors(); len(l) > 0 {
				t.Errorf("nginx logged errors:\n%s", strings.Join(l, "\n"))
			}
		})
	}
}
