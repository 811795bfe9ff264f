// Package metrics holds the data path's instruments: per-request counts
// and durations per route, kept in atomics and handed to OpenTelemetry at
// scrape time (Metrics.Collect), per-cluster upstream counters, and the
// connection and drain gauges read from the drain registry.
package metrics

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/ebb-proxy/ebb/drain"
	"github.com/ebb-proxy/ebb/proxy/downstream"
	"github.com/ebb-proxy/ebb/proxy/upstream"
	"github.com/ebb-proxy/ebb/telemetry/collect"
)

// Metrics are the data path's instruments.
//
// Per-request figures (requests, durations) are counted by the proxy itself
// in atomics, one set per route, and handed to OpenTelemetry at scrape time
// by Collect (through package telemetry): the request path pays a few
// atomic adds, no lock, no map lookup and no allocation. Per-connection and error figures use
// OpenTelemetry instruments with attribute sets built in advance.
type Metrics struct {
	connects       metric.Int64Counter
	connectErrors  metric.Int64Counter
	upstreamErrors metric.Int64Counter
	retries        metric.Int64Counter
	ejections      metric.Int64Counter
	emptyUpdates   metric.Int64Counter
	budgetDenied   metric.Int64Counter

	start     time.Time // of the cumulative series
	mu        sync.Mutex
	routes    []*Route             // guarded by mu; appended when snapshots are built
	byRoute   map[[2]string]*Route // guarded by mu: a reload's snapshot counts on where the last left off
	clusters  []*Cluster           // guarded by mu, likewise
	byCluster map[string]*Cluster  // guarded by mu
}

// New creates the instruments on m; the connection and drain gauges read
// reg at each collection.
func New(m metric.Meter, reg *downstream.Registry) (*Metrics, error) {
	out := Metrics{start: time.Now()}
	for _, c := range []struct {
		to         *metric.Int64Counter
		name, desc string
	}{
		{&out.connects, "ebb.upstream.connects", "Upstream connections established."},
		{&out.connectErrors, "ebb.upstream.connect_errors", "Upstream connection attempts that failed."},
		{&out.retries, "ebb.upstream.retries", "Requests sent again to another endpoint, when that was safe."},
		{&out.budgetDenied, "ebb.upstream.retry_budget_exhausted", "Retries that were safe and had another endpoint, refused because the cluster's retry budget was spent."},
		{&out.emptyUpdates, "ebb.discovery.empty_updates", "Endpoint sets from discovery that were empty after a non-empty one (kept or applied per discovery.on_empty)."},
		{&out.ejections, "ebb.upstream.ejections", "Endpoints taken out of the balancer's choice by passive health checking."},
		{&out.upstreamErrors, "ebb.upstream.errors", "Upstream exchanges that failed, by kind (connect, overloaded, timeout, broken, refused)."},
	} {
		var err error
		if *c.to, err = m.Int64Counter(c.name, metric.WithDescription(c.desc)); err != nil {
			return nil, err
		}
	}
	conns, err := m.Int64ObservableGauge("ebb.downstream.connections",
		metric.WithDescription("Open downstream connections by listener, protocol and state."))
	if err != nil {
		return nil, err
	}
	if _, err := m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		for _, c := range reg.Counts() {
			o.ObserveInt64(conns, int64(c.N), metric.WithAttributes(
				attribute.String("listener", c.Listener),
				attribute.String("protocol", c.Protocol.String()),
				attribute.String("state", c.State.String()),
			))
		}
		return nil
	}, conns); err != nil {
		return nil, fmt.Errorf("metrics: registering the connections gauge: %w", err)
	}
	if err := drainMetrics(m, &reg.Stats); err != nil {
		return nil, fmt.Errorf("metrics: registering the drain metrics: %w", err)
	}
	return &out, nil
}

// drainMetrics exports the drain's counts, read from st at each scrape.
func drainMetrics(m metric.Meter, st *downstream.Stats) error {
	phase, err := m.Int64ObservableGauge("ebb.drain.phase",
		metric.WithDescription("1 for the drain's current phase (serving, announce, signal, wait, exit), 0 for the others."))
	if err != nil {
		return err
	}
	signals, err := m.Int64ObservableCounter("ebb.drain.close_signals",
		metric.WithDescription("Close signals passed on during the drain: responses with Connection: close (http1), two-phase GOAWAYs begun (http2), close frames with status 1001 sent to WebSocket clients (websocket), event streams ended after an event (event_stream)."))
	if err != nil {
		return err
	}
	streams, err := m.Int64ObservableGauge("ebb.downstream.event_streams",
		metric.WithDescription("Event-stream (text/event-stream) responses being relayed to clients."))
	if err != nil {
		return err
	}
	counters := []struct {
		name, desc string
		v          *atomic.Int64
	}{
		{"ebb.drain.idle_closes", "Idle HTTP/1 connections closed by the drain.", &st.IdleCloses},
		{"ebb.drain.forced_closes", "Connections closed at the drain deadline or by a forced stop.", &st.ForcedCloses},
		{"ebb.drain.requests", "Requests received during the drain.", &st.Requests},
		{"ebb.drain.upstream_dials", "Upstream connections opened during the drain.", &st.Dials},
		{"ebb.drain.errors", "5xx responses ebb made itself during the drain (no endpoint, an upstream failure): errors clients saw.", &st.Errors},
	}
	insts := []metric.Observable{phase, signals, streams}
	obs := make([]metric.Int64ObservableCounter, len(counters))
	for i, c := range counters {
		if obs[i], err = m.Int64ObservableCounter(c.name, metric.WithDescription(c.desc)); err != nil {
			return err
		}
		insts = append(insts, obs[i])
	}
	_, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		cur := drain.Phase(st.Phase.Load())
		for p := drain.PhaseServing; p <= drain.PhaseExit; p++ {
			v := int64(0)
			if p == cur {
				v = 1
			}
			o.ObserveInt64(phase, v, metric.WithAttributes(attribute.String("phase", p.String())))
		}
		for _, proto := range []downstream.Protocol{downstream.ProtoHTTP1, downstream.ProtoHTTP2, downstream.ProtoWebSocket} {
			o.ObserveInt64(signals, st.CloseSignals[proto].Load(), metric.WithAttributes(attribute.String("protocol", proto.String())))
		}
		o.ObserveInt64(signals, st.EventStreamEnds.Load(), metric.WithAttributes(attribute.String("protocol", "event_stream")))
		o.ObserveInt64(streams, st.EventStreams.Load())
		for i, c := range counters {
			o.ObserveInt64(obs[i], c.v.Load())
		}
		return nil
	}, insts...)
	return err
}

// statusClasses are the values of the status_class attribute; index 0 is
// for anything outside 1xx-5xx.
var statusClasses = [6]string{"other", "1xx", "2xx", "3xx", "4xx", "5xx"}

func statusClass(code int) int {
	if c := code / 100; c >= 1 && c <= 5 {
		return c
	}
	return 0
}

// durationBounds are collect.DurationBounds as durations, for bucketing
// without floating point on the request path.
var durationBounds = func() []time.Duration {
	out := make([]time.Duration, len(collect.DurationBounds))
	for i, b := range collect.DurationBounds {
		out[i] = time.Duration(b * float64(time.Second))
	}
	return out
}()

const numProtos = int(downstream.ProtoHTTP2) + 1

// Route counts the requests of one listener and cluster pair.
type Route struct {
	requestAttrs  [numProtos][len(statusClasses)]attribute.Set
	durationAttrs [numProtos]attribute.Set

	requests  [numProtos][len(statusClasses)]atomic.Uint64
	durations [numProtos]histogram
}

// histogram is a duration histogram on collect.DurationBounds, counted
// in atomics.
type histogram struct {
	buckets  [len(collect.DurationBounds) + 1]atomic.Uint64
	sumNanos atomic.Int64
}

func (h *histogram) observe(d time.Duration) {
	i := 0
	for i < len(durationBounds) && d > durationBounds[i] {
		i++
	}
	h.buckets[i].Add(1)
	h.sumNanos.Add(int64(d))
}

// point returns the histogram as a point with attrs; ok is false while it
// has counted nothing.
func (h *histogram) point(attrs attribute.Set) (p collect.Histogram, ok bool) {
	counts := make([]uint64, len(h.buckets))
	var total uint64
	for i := range counts {
		counts[i] = h.buckets[i].Load()
		total += counts[i]
	}
	if total == 0 {
		return p, false
	}
	return collect.Histogram{Attrs: attrs, Count: total, Buckets: counts,
		Sum: time.Duration(h.sumNanos.Load()).Seconds()}, true
}

// ForRoute returns the request counters of one listener and cluster
// pair (cluster "" counts the requests no route matched): the same ones
// for the same pair, so that a snapshot built by a reload counts on.
func (m *Metrics) ForRoute(listener, cluster string) *Route {
	key := [2]string{listener, cluster}
	m.mu.Lock()
	if rm := m.byRoute[key]; rm != nil {
		m.mu.Unlock()
		return rm
	}
	m.mu.Unlock()
	rm := &Route{}
	for p := range numProtos {
		base := []attribute.KeyValue{
			attribute.String("listener", listener),
			attribute.String("cluster", cluster),
			attribute.String("protocol", downstream.Protocol(p).String()),
		}
		rm.durationAttrs[p] = attribute.NewSet(base...)
		for c, class := range statusClasses {
			rm.requestAttrs[p][c] = attribute.NewSet(append(base[:3:3], attribute.String("status_class", class))...)
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if prev := m.byRoute[key]; prev != nil {
		return prev // built meanwhile by another snapshot
	}
	if m.byRoute == nil {
		m.byRoute = make(map[[2]string]*Route)
	}
	m.byRoute[key] = rm
	m.routes = append(m.routes, rm)
	return rm
}

// Record counts one answered request.
func (rm *Route) Record(proto downstream.Protocol, status int, start time.Time) {
	rm.requests[proto][statusClass(status)].Add(1)
	rm.durations[proto].observe(time.Since(start))
}

// Collect hands the per-request counts over at a scrape as ebb.requests
// (a counter), ebb.request.duration and ebb.upstream.request.duration
// (histograms, seconds). It implements collect.Collector.
func (m *Metrics) Collect() (start, now time.Time, series []collect.Series) {
	m.mu.Lock()
	routes := slices.Clone(m.routes)
	clusters := slices.Clone(m.clusters)
	m.mu.Unlock()
	now = time.Now()
	requests := collect.Series{Name: "ebb.requests", Description: "Requests answered, by listener, cluster, status class and protocol."}
	durations := collect.Series{Name: "ebb.request.duration", Unit: "s", Histogram: true,
		Description: "Time from the request's first byte to its response handed to the connection."}
	for _, rm := range routes {
		for p := range numProtos {
			for c := range statusClasses {
				if n := rm.requests[p][c].Load(); n > 0 {
					requests.Counters = append(requests.Counters, collect.Counter{Attrs: rm.requestAttrs[p][c], Value: int64(n)})
				}
			}
			if pt, ok := rm.durations[p].point(rm.durationAttrs[p]); ok {
				durations.Histograms = append(durations.Histograms, pt)
			}
		}
	}
	attempts := collect.Series{Name: "ebb.upstream.request.duration", Unit: "s", Histogram: true,
		Description: "Time of each upstream attempt, by cluster: from sending the request to the upstream's response (its head; for an HTTP/1 response ebb does not stream, its body too) or the attempt's failure."}
	for _, cm := range clusters {
		if pt, ok := cm.attempts.point(cm.set); ok {
			attempts.Histograms = append(attempts.Histograms, pt)
		}
	}
	return m.start, now, []collect.Series{requests, durations, attempts}
}

// ForCluster returns the instruments of one cluster: the same ones for
// the same name, so that a cluster rebuilt by a reload counts on. Its
// counters start at zero, so that every cluster's series exist from the
// start (rates and alerts need no special case for a series not yet
// seen).
func (m *Metrics) ForCluster(name string) *Cluster {
	m.mu.Lock()
	defer m.mu.Unlock()
	if cm := m.byCluster[name]; cm != nil {
		return cm
	}
	set := attribute.NewSet(attribute.String("cluster", name))
	cm := &Cluster{
		set:            set,
		attrs:          []metric.AddOption{metric.WithAttributeSet(set)},
		connects:       m.connects,
		connectErrors:  m.connectErrors,
		upstreamErrors: m.upstreamErrors,
		retries:        m.retries,
		ejections:      m.ejections,
		emptyUpdates:   m.emptyUpdates,
		budgetDenied:   m.budgetDenied,
	}
	ctx := context.Background()
	for _, c := range []metric.Int64Counter{cm.connects, cm.connectErrors, cm.retries, cm.ejections, cm.emptyUpdates, cm.budgetDenied} {
		c.Add(ctx, 0, cm.attrs...)
	}
	for k := range upstream.NumKinds {
		if kind := k.String(); kind != "" {
			cm.errors[k] = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(
				attribute.String("cluster", name), attribute.String("kind", kind)))}
			cm.upstreamErrors.Add(ctx, 0, cm.errors[k]...)
		}
	}
	if m.byCluster == nil {
		m.byCluster = make(map[string]*Cluster)
	}
	m.byCluster[name] = cm
	m.clusters = append(m.clusters, cm)
	return cm
}

// Cluster are the instruments of one cluster with their attributes
// built once.
type Cluster struct {
	set            attribute.Set
	attrs          []metric.AddOption
	connects       metric.Int64Counter
	connectErrors  metric.Int64Counter
	upstreamErrors metric.Int64Counter
	retries        metric.Int64Counter
	ejections      metric.Int64Counter
	emptyUpdates   metric.Int64Counter
	budgetDenied   metric.Int64Counter
	errors         [upstream.NumKinds][]metric.AddOption
	attempts       histogram
}

// The counting methods of a Cluster do nothing on a nil one (a cluster
// built without instruments, in tests).

// UpstreamError counts a failed exchange of kind k.
func (cm *Cluster) UpstreamError(k upstream.Kind) {
	if cm != nil {
		cm.upstreamErrors.Add(context.Background(), 1, cm.errors[k]...)
	}
}

// Connect counts an upstream connection established.
func (cm *Cluster) Connect() {
	if cm != nil {
		cm.connects.Add(context.Background(), 1, cm.attrs...)
	}
}

// ConnectError counts a failed connection attempt.
func (cm *Cluster) ConnectError() {
	if cm != nil {
		cm.connectErrors.Add(context.Background(), 1, cm.attrs...)
	}
}

// Retry counts a request sent again to another endpoint.
func (cm *Cluster) Retry() {
	if cm != nil {
		cm.retries.Add(context.Background(), 1, cm.attrs...)
	}
}

// RetryDenied counts a retry the retry budget refused.
func (cm *Cluster) RetryDenied() {
	if cm != nil {
		cm.budgetDenied.Add(context.Background(), 1, cm.attrs...)
	}
}

// Attempt counts one upstream attempt that took d.
func (cm *Cluster) Attempt(d time.Duration) {
	if cm != nil {
		cm.attempts.observe(d)
	}
}

// Ejection counts an endpoint ejected by passive health.
func (cm *Cluster) Ejection() {
	if cm != nil {
		cm.ejections.Add(context.Background(), 1, cm.attrs...)
	}
}

// EmptyUpdate counts an empty endpoint set after a non-empty one.
func (cm *Cluster) EmptyUpdate() {
	if cm != nil {
		cm.emptyUpdates.Add(context.Background(), 1, cm.attrs...)
	}
}
