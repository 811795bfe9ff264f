package e2e

import (
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ebb-proxy/ebb/examples/loadgen"
)

// loadSpec is what a load of the scenarios sends (loadgen), how, and for
// how long.
type loadSpec struct {
	addr string // host:port the clients send to
	// kinds are the clients: a group of each kind, all sending alike.
	kinds []loadgen.Kind
	// workers keep-alive workers, arrivals arriving clients of session
	// requests, per kind (loadgen.Group).
	workers, arrivals, session int
	// request returns request i of worker w (loadgen.Group).
	request func(w, i int, last bool) loadgen.Request
	// warmOK and warmReplicas say when the load is warm (loadgen.Spec).
	warmOK       int
	warmReplicas []string
	// limit bounds the load: no request starts after it, and a load
	// still running then is a failure (its test forgot to stop it, or
	// waited too long).
	limit time.Duration
}

// startLoad starts the load of spec; it is stopped, and its clients
// closed, at cleanup.
func startLoad(t *testing.T, spec loadSpec) *loadgen.Load {
	t.Helper()
	if spec.limit <= 0 {
		t.Fatalf("startLoad: no limit in %+v", spec)
	}
	var groups []loadgen.Group
	for _, kind := range spec.kinds {
		groups = append(groups, loadgen.Group{Kind: kind, Addr: spec.addr, Workers: spec.workers,
			Arrivals: spec.arrivals, Session: spec.session, Request: spec.request})
	}
	l, err := loadgen.Start(loadgen.Spec{Groups: groups, WarmOK: spec.warmOK, WarmReplicas: spec.warmReplicas, Limit: spec.limit})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	return l
}

// mixedRequest is the request mix of the VIP and rolling scenarios, as
// mixedOrigin answers it: request i of worker w, GET and POST alternately.
func mixedRequest(w, i int, last bool) loadgen.Request {
	path := fmt.Sprintf("/vip/w%d/%d", w, i)
	if i%2 == 0 {
		return loadgen.Request{Method: http.MethodGet, Path: path, Want: "get " + path + "\n", Last: last}
	}
	body := fmt.Sprintf("payload of worker %d, request %d", w, i)
	return loadgen.Request{Method: http.MethodPost, Path: path, Body: body, ContentType: "text/plain",
		Want: "post " + path + " " + body + "\n", Last: last}
}

// mixedOrigin answers every GET with "get PATH\n" and every POST with
// "post PATH BODY\n". With closeEach, every response says Connection: close
// and the origin closes the connection after it.
func mixedOrigin(closeEach bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if closeEach {
			w.Header().Set("Connection", "close")
		}
		switch r.Method {
		case http.MethodGet:
			io.WriteString(w, "get "+r.URL.Path+"\n")
		case http.MethodPost:
			body, err := io.ReadAll(r.Body)
			if err != nil {
				http.Error(w, "origin: reading the body: "+err.Error(), http.StatusBadRequest)
				return
			}
			io.WriteString(w, "post "+r.URL.Path+" "+string(body)+"\n")
		default:
			http.Error(w, "origin: unexpected method", http.StatusMethodNotAllowed)
		}
	})
}

// stopLoadAfterExit lets l run tail longer, once an ebb has exited, then
// stops it and checks that no request failed (the failures shown with
// their times from T = trigger, which when says), that every request was
// answered or failed, that some were answered in the tail (else noTail is
// the error), and the strict clients' pools (checkStrictPools). It
// returns what the load saw.
func stopLoadAfterExit(t *testing.T, l *loadgen.Load, tail time.Duration, trigger time.Time, when, noTail string) loadgen.Results {
	t.Helper()
	okAtExit, _ := l.Counts()
	wait, stop := after(tail)
	<-wait
	stop()
	l.Stop()
	res := l.Results()
	if len(res.Fails) != 0 {
		t.Errorf("%d of %d requests failed (T = %s); the first:\n%s",
			len(res.Fails), res.Requests, when, formatFailures(res.Fails, trigger, 20))
	}
	if res.OK+len(res.Fails) != res.Requests || res.OK == 0 {
		t.Errorf("counts: %d requests, %d answered correctly, %d errors", res.Requests, res.OK, len(res.Fails))
	}
	if res.OK == okAtExit {
		t.Error(noTail)
	}
	checkStrictPools(t, l)
	return res
}

// checkEveryKindSent fails the test if a client kind of l sent no GET or
// no POST: the scenario would not have tested it.
func checkEveryKindSent(t *testing.T, l *loadgen.Load) {
	t.Helper()
	byKind := l.Results().ByKind
	for _, kind := range slices.Sorted(maps.Keys(byKind)) {
		for _, method := range []string{http.MethodGet, http.MethodPost} {
			if byKind[kind][method] == 0 {
				t.Errorf("client %s sent no %s", kind, method)
			}
		}
	}
}

// checkStrictPools fails the test if a strict client of l found bytes
// nobody asked for on a pooled connection.
func checkStrictPools(t *testing.T, l *loadgen.Load) {
	t.Helper()
	for _, c := range l.Clients() {
		if sc, ok := c.(*loadgen.Strict); ok {
			if _, unsolicited := sc.PoolStats(); unsolicited != 0 {
				t.Errorf("%d pooled connections received bytes nobody asked for", unsolicited)
			}
		}
	}
}

// formatFailures formats the first n failures, with their start and end
// relative to t0.
func formatFailures(fails []loadgen.Failure, t0 time.Time, n int) string {
	var b strings.Builder
	for _, f := range fails[:min(n, len(fails))] {
		what := fmt.Sprintf("%s worker %d %s %s", f.Kind, f.Worker, f.Method, f.Path)
		if f.Method == "" {
			what = "the load"
		}
		fmt.Fprintf(&b, "  %s: started T%+v, ended T%+v: %v\n", what,
			f.Start.Sub(t0).Round(time.Microsecond), f.End.Sub(t0).Round(time.Microsecond), f.Err)
	}
	return b.String()
}
