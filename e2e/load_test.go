package e2e

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// loadSpec is what a load sends, how, and for how long.
type loadSpec struct {
	addr string // host:port the clients send to
	// kinds are the clients: one long-lived client of each kind, shared
	// by its keep-alive workers.
	kinds []clientKind
	// workers keep-alive workers per kind send requests back to back
	// through the kind's long-lived client.
	workers int
	// arrivals workers per kind are new clients, one after the other:
	// each a new client of the kind, sending session requests on its own
	// new connection and leaving (Connection: close on its last).
	arrivals, session int
	// request returns request i of worker w; last is set on an arriving
	// client's last request. Worker numbers are unique across kinds.
	request func(w, i int, last bool) loadRequest
	// warm is closed once warmOK requests have been answered correctly
	// and each of warmReplicas (by X-Replica) has answered 3.
	warmOK       int
	warmReplicas []string
	// limit bounds the load: no request starts after it, and a load
	// still running then is a failure (its test forgot to stop it, or
	// waited too long).
	limit time.Duration
}

// load is a load of HTTP requests on ebb (or what is in front of it): the
// workers of loadSpec, every request sent exactly once by the load and its
// answer checked byte for byte (loadClient), every outcome recorded with
// its start and end.
//
// spec, start, end, stopc, warm and clients are set before the workers
// start; the rest is guarded by mu.
type load struct {
	spec    loadSpec
	start   time.Time
	end     time.Time
	stopc   chan struct{}
	warm    chan struct{}
	clients []loadClient // the long-lived client of each kind, in spec.kinds order
	once    sync.Once
	wg      sync.WaitGroup

	mu       sync.Mutex
	sent     map[string]map[string]int // by client kind, by method
	ok       int                       // requests answered correctly
	fails    []loadFailure
	served   map[string][]time.Time // by X-Replica: when each correct answer ended
	arrivals int                    // arriving clients
	warmed   bool
	overrun  bool          // the load ran into its limit
	since    time.Time     // watch: requests started at or after since
	sinceN   int           // ... ended so far
	sinceW   int           // ... closing sinceC
	sinceC   chan struct{} // nil: no watch
}

// loadFailure is one failed request, or the load running into its limit
// (no method).
type loadFailure struct {
	kind, method, path string
	worker             int
	start, end         time.Time
	err                error
}

// startLoad starts the load of spec; it is stopped, and its clients
// closed, at cleanup.
func startLoad(t *testing.T, spec loadSpec) *load {
	t.Helper()
	if spec.request == nil || spec.limit <= 0 || (spec.arrivals > 0 && spec.session < 1) {
		t.Fatalf("startLoad: incomplete spec %+v", spec)
	}
	now := time.Now()
	l := &load{spec: spec, start: now, end: now.Add(spec.limit), stopc: make(chan struct{}), warm: make(chan struct{}),
		sent: map[string]map[string]int{}, served: map[string][]time.Time{}}
	// Every kind's counters exist before the first worker records.
	for _, kind := range spec.kinds {
		l.sent[kind.name] = map[string]int{}
	}
	perKind := spec.workers + spec.arrivals
	for k, kind := range spec.kinds {
		c := kind.new(spec.addr, spec.workers)
		l.clients = append(l.clients, c)
		for w := range spec.workers {
			l.wg.Go(func() { l.keepAlive(kind.name, c, w, k*perKind+w) })
		}
		for a := range spec.arrivals {
			l.wg.Go(func() { l.arrive(kind, k*perKind+spec.workers+a) })
		}
	}
	t.Cleanup(func() {
		l.stop()
		for _, c := range l.clients {
			c.close()
		}
	})
	return l
}

// running reports whether a worker may start another request: not once
// the load is stopped, nor past its limit (a failure).
func (l *load) running() bool {
	select {
	case <-l.stopc:
		return false
	default:
	}
	now := time.Now()
	if now.Before(l.end) {
		return true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.overrun {
		l.overrun = true
		l.fails = append(l.fails, loadFailure{start: l.start, end: now,
			err: fmt.Errorf("the load was not stopped within %s", l.spec.limit)})
	}
	return false
}

// keepAlive is worker id, the w-th of client c.
func (l *load) keepAlive(kind string, c loadClient, w, id int) {
	for i := 0; l.running(); i++ {
		l.send(kind, c, w, id, l.spec.request(id, i, false))
	}
}

// arrive is worker id of the arrivals: a new client of kind for every
// session requests.
func (l *load) arrive(kind clientKind, id int) {
	for i := 0; l.running(); {
		c := kind.new(l.spec.addr, 1)
		l.mu.Lock()
		l.arrivals++
		l.mu.Unlock()
		for j := 0; j < l.spec.session && l.running(); i, j = i+1, j+1 {
			l.send(kind.name, c, 0, id, l.spec.request(id, i, j == l.spec.session-1))
		}
		c.close()
	}
}

// send sends r as the w-th worker of c and records how it ended.
func (l *load) send(kind string, c loadClient, w, id int, r loadRequest) {
	start := time.Now()
	replica, err := c.do(w, r)
	end := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sent[kind][r.method]++
	if l.sinceC != nil && !start.Before(l.since) {
		l.sinceN++
		if l.sinceN == l.sinceW {
			close(l.sinceC)
		}
	}
	if err != nil {
		l.fails = append(l.fails, loadFailure{kind: kind, method: r.method, path: r.path, worker: id, start: start, end: end, err: err})
		return
	}
	l.ok++
	l.served[replica] = append(l.served[replica], end)
	if !l.warmed && l.ok >= l.spec.warmOK {
		l.warmed = true
		for _, rep := range l.spec.warmReplicas {
			l.warmed = l.warmed && len(l.served[rep]) >= 3
		}
		if l.warmed {
			close(l.warm)
		}
	}
}

// stop stops the workers and waits for them. Safe to call more than once.
func (l *load) stop() {
	l.once.Do(func() { close(l.stopc) })
	l.wg.Wait()
}

// watch returns a channel closed once n requests started at or after
// since have ended, failed or not.
func (l *load) watch(since time.Time, n int) <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.since, l.sinceW, l.sinceN, l.sinceC = since, n, 0, make(chan struct{})
	return l.sinceC
}

// sinceCount returns how many requests started since the watch's time
// have ended.
func (l *load) sinceCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sinceN
}

// okCount returns how many requests have been answered correctly so far.
func (l *load) okCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ok
}

// servedSince returns how many correct answers replica (X-Replica) gave
// that ended after t.
func (l *load) servedSince(replica string, t time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, at := range l.served[replica] {
		if at.After(t) {
			n++
		}
	}
	return n
}

// loadResults is what a load saw.
type loadResults struct {
	requests int            // requests sent
	byMethod map[string]int // requests sent, by method
	ok       int            // requests answered correctly
	fails    []loadFailure  // in the order they ended
	arrivals int            // arriving clients
}

func (l *load) results() loadResults {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := loadResults{byMethod: map[string]int{}, ok: l.ok, arrivals: l.arrivals}
	for _, m := range l.sent {
		for method, n := range m {
			r.byMethod[method] += n
			r.requests += n
		}
	}
	r.fails = slices.Clone(l.fails)
	slices.SortFunc(r.fails, func(a, b loadFailure) int { return a.end.Compare(b.end) })
	return r
}

// checkEveryKindSent fails the test if a client kind sent no GET or no
// POST: the scenario would not have tested it.
func (l *load) checkEveryKindSent(t *testing.T) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, kind := range l.spec.kinds {
		for _, method := range []string{http.MethodGet, http.MethodPost} {
			if l.sent[kind.name][method] == 0 {
				t.Errorf("client %s sent no %s", kind.name, method)
			}
		}
	}
}

// formatFailures formats the first n failures, with their start and end
// relative to t0.
func formatFailures(fails []loadFailure, t0 time.Time, n int) string {
	var b strings.Builder
	for _, f := range fails[:min(n, len(fails))] {
		what := fmt.Sprintf("%s worker %d %s %s", f.kind, f.worker, f.method, f.path)
		if f.method == "" {
			what = "the load"
		}
		fmt.Fprintf(&b, "  %s: started T%+v, ended T%+v: %v\n", what,
			f.start.Sub(t0).Round(time.Microsecond), f.end.Sub(t0).Round(time.Microsecond), f.err)
	}
	return b.String()
}
