// Package loadgen is the load the examples and the e2e tests send through
// ebb: workers of several kinds of clients sending requests back to back,
// and arriving clients each sending a few requests on a new connection,
// every request sent once and its answer checked byte for byte, every
// outcome recorded with its start and end.
package loadgen

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Group is a kind of client and what its workers send.
type Group struct {
	Kind Kind
	Addr string // host:port the clients send to
	// Workers keep-alive workers send requests back to back through one
	// long-lived client of Kind.
	Workers int
	// Arrivals workers are new clients, one after the other: each a new
	// client of Kind, sending Session requests on its own new connection
	// and leaving (Connection: close on its last).
	Arrivals, Session int
	// Request returns request i of worker w; last is set on an arriving
	// client's last request. Worker numbers are unique across groups.
	Request func(w, i int, last bool) Request
}

// Spec is what a load sends, and how long it may.
type Spec struct {
	// Groups, each named by its kind: no two of one kind.
	Groups []Group
	// Warm is closed once WarmOK requests have been answered correctly
	// and each of WarmReplicas (by X-Replica) has answered 3.
	WarmOK       int
	WarmReplicas []string
	// Limit, if not 0, bounds the load: no request starts after it, and a
	// load still running then has failed (its user forgot to stop it, or
	// waited too long).
	Limit time.Duration
	// Abandon: Stop abandons the requests in flight, and they are not
	// counted; else Stop waits for them to end, and counts them.
	Abandon bool
}

// Load is a running load.
//
// spec, start, end, stopc, warm, ctx, cancel and clients are set before
// the workers start; the rest is guarded by mu.
type Load struct {
	spec    Spec
	start   time.Time
	end     time.Time // the limit; zero: none
	stopc   chan struct{}
	warm    chan struct{}
	ctx     context.Context // of every request; ended by Stop if spec.Abandon
	cancel  context.CancelFunc
	clients []Client // the long-lived client of each group, in spec.Groups order
	once    sync.Once
	wg      sync.WaitGroup

	mu       sync.Mutex
	sent     map[string]map[string]int // by kind, by method
	ok       map[string]int            // requests answered correctly, by kind
	fails    []Failure
	served   map[string][]time.Time // by X-Replica, if any: when each correct answer ended
	arrivals int                    // arriving clients
	warmed   bool
	overrun  bool          // the load ran into its limit
	since    time.Time     // watch: requests started at or after since
	sinceN   int           // ... ended so far
	sinceW   int           // ... closing sinceC
	sinceC   chan struct{} // nil: no watch
}

// Failure is one failed request, or the load running into its limit (no
// Method).
type Failure struct {
	Kind, Method, Path string
	Worker             int
	Start, End         time.Time
	Err                error
}

// Start starts the load of spec. Stop stops it; closing its clients'
// idle connections is Close's.
func Start(spec Spec) (*Load, error) {
	if spec.Limit < 0 {
		return nil, errors.New("loadgen: a negative limit")
	}
	for _, g := range spec.Groups {
		if g.Request == nil || g.Workers < 0 || g.Arrivals < 0 || (g.Arrivals > 0 && g.Session < 1) {
			return nil, fmt.Errorf("loadgen: incomplete group %s %+v", g.Kind.Name, g)
		}
	}
	now := time.Now()
	l := &Load{spec: spec, start: now, stopc: make(chan struct{}), warm: make(chan struct{}),
		sent: map[string]map[string]int{}, ok: map[string]int{}, served: map[string][]time.Time{}}
	if spec.Limit > 0 {
		l.end = now.Add(spec.Limit)
	}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	// Every kind's counters exist before the first worker records.
	for _, g := range spec.Groups {
		l.sent[g.Kind.Name] = map[string]int{}
	}
	first := 0 // the number of the group's first worker
	for _, g := range spec.Groups {
		c := g.Kind.New(g.Addr, g.Workers)
		l.clients = append(l.clients, c)
		for w := range g.Workers {
			id := first + w
			l.wg.Go(func() { l.keepAlive(g, c, w, id) })
		}
		for a := range g.Arrivals {
			id := first + g.Workers + a
			l.wg.Go(func() { l.arrive(g, id) })
		}
		first += g.Workers + g.Arrivals
	}
	return l, nil
}

// running reports whether a worker may start another request: not once
// the load is stopped, nor past its limit (a failure).
func (l *Load) running() bool {
	select {
	case <-l.stopc:
		return false
	default:
	}
	now := time.Now()
	if l.end.IsZero() || now.Before(l.end) {
		return true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.overrun {
		l.overrun = true
		l.fails = append(l.fails, Failure{Start: l.start, End: now,
			Err: fmt.Errorf("the load was not stopped within %s", l.spec.Limit)})
	}
	return false
}

// keepAlive is worker id, the w-th of client c.
func (l *Load) keepAlive(g Group, c Client, w, id int) {
	for i := 0; l.running(); i++ {
		l.send(g.Kind.Name, c, w, id, g.Request(id, i, false))
	}
}

// arrive is worker id of g's arrivals: a new client for every Session
// requests.
func (l *Load) arrive(g Group, id int) {
	for i := 0; l.running(); {
		c := g.Kind.New(g.Addr, 1)
		l.mu.Lock()
		l.arrivals++
		l.mu.Unlock()
		for j := 0; j < g.Session && l.running(); i, j = i+1, j+1 {
			l.send(g.Kind.Name, c, 0, id, g.Request(id, i, j == g.Session-1))
		}
		c.Close()
	}
}

// send sends r as the w-th worker of c and records how it ended.
func (l *Load) send(kind string, c Client, w, id int, r Request) {
	start := time.Now()
	replica, err := c.Do(l.ctx, w, r)
	end := time.Now()
	if l.ctx.Err() != nil {
		return // abandoned by Stop: not the server's doing
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sent[kind][r.Method]++
	if l.sinceC != nil && !start.Before(l.since) {
		l.sinceN++
		if l.sinceN == l.sinceW {
			close(l.sinceC)
		}
	}
	if err != nil {
		l.fails = append(l.fails, Failure{Kind: kind, Method: r.Method, Path: r.Path, Worker: id, Start: start, End: end, Err: err})
		return
	}
	l.ok[kind]++
	if replica != "" {
		l.served[replica] = append(l.served[replica], end)
	}
	if !l.warmed && l.okLocked() >= l.spec.WarmOK {
		l.warmed = true
		for _, rep := range l.spec.WarmReplicas {
			l.warmed = l.warmed && len(l.served[rep]) >= 3
		}
		if l.warmed {
			close(l.warm)
		}
	}
}

// Stop stops the workers and waits for them. Safe to call more than once.
func (l *Load) Stop() {
	l.once.Do(func() {
		close(l.stopc)
		if l.spec.Abandon {
			l.cancel()
		}
	})
	l.wg.Wait()
}

// Close stops the load and closes its clients' idle connections.
func (l *Load) Close() {
	l.Stop()
	l.cancel()
	for _, c := range l.clients {
		c.Close()
	}
}

// Began returns when the load started.
func (l *Load) Began() time.Time { return l.start }

// Warm returns a channel closed once the load is warm (Spec.WarmOK).
func (l *Load) Warm() <-chan struct{} { return l.warm }

// Clients returns the long-lived client of each group, in Spec.Groups
// order.
func (l *Load) Clients() []Client { return l.clients }

// Watch returns a channel closed once n requests started at or after
// since have ended, failed or not.
func (l *Load) Watch(since time.Time, n int) <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.since, l.sinceW, l.sinceN, l.sinceC = since, n, 0, make(chan struct{})
	return l.sinceC
}

// SinceCount returns how many requests started since the watch's time
// have ended.
func (l *Load) SinceCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sinceN
}

// Counts returns how many requests have been answered correctly so far,
// and how many failed.
func (l *Load) Counts() (ok, errs int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.okLocked(), len(l.fails)
}

func (l *Load) okLocked() int {
	n := 0
	for _, v := range l.ok {
		n += v
	}
	return n
}

// ServedSince returns how many correct answers replica (X-Replica) gave
// that ended after t.
func (l *Load) ServedSince(replica string, t time.Time) int {
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

// Results is what a load saw.
type Results struct {
	Requests int                       // requests sent
	ByMethod map[string]int            // requests sent, by method
	ByKind   map[string]map[string]int // requests sent, by kind, by method
	OK       int                       // requests answered correctly
	Fails    []Failure                 // in the order they ended
	Arrivals int                       // arriving clients
}

// Results returns what the load saw so far.
func (l *Load) Results() Results {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := Results{ByMethod: map[string]int{}, ByKind: map[string]map[string]int{}, OK: l.okLocked(), Arrivals: l.arrivals}
	for kind, m := range l.sent {
		r.ByKind[kind] = map[string]int{}
		for method, n := range m {
			r.ByKind[kind][method] = n
			r.ByMethod[method] += n
			r.Requests += n
		}
	}
	r.Fails = slices.Clone(l.fails)
	slices.SortFunc(r.Fails, func(a, b Failure) int { return a.End.Compare(b.End) })
	return r
}

// Report returns the number of failures and a line per group, then the
// first three failures of each, with the time they ended.
func (l *Load) Report() (int, []string) {
	res := l.Results()
	l.mu.Lock()
	defer l.mu.Unlock()
	var lines, samples []string
	for _, g := range l.spec.Groups {
		errs := 0
		for _, f := range res.Fails {
			if f.Kind != g.Kind.Name {
				continue
			}
			if errs < 3 {
				samples = append(samples, fmt.Sprintf("    %s: %s %s %s: %v", f.Kind, f.End.Format("15:04:05.000"), f.Method, f.Path, f.Err))
			}
			errs++
		}
		lines = append(lines, fmt.Sprintf("%-26s %7d ok, %5d errors", g.Kind.Name+":", l.ok[g.Kind.Name], errs))
	}
	slices.Sort(samples)
	return len(res.Fails), append(lines, samples...)
}
