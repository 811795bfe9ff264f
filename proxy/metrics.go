package proxy

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/ebb-proxy/ebb/drain"
)

// metrics are the proxy's instruments. Attribute sets are built when a
// snapshot is built, never on the request path: recording a request costs
// two atomic-backed updates and no allocation.
type metrics struct {
	requests       metric.Int64Counter
	duration       metric.Float64Histogram
	connects       metric.Int64Counter
	connectErrors  metric.Int64Counter
	upstreamErrors metric.Int64Counter
}

func newMetrics(m metric.Meter, reg *drain.Registry) (*metrics, error) {
	var out metrics
	var err error
	if out.requests, err = m.Int64Counter("ebb.requests",
		metric.WithDescription("Requests answered, by listener, cluster, status class and protocol.")); err != nil {
		return nil, err
	}
	if out.duration, err = m.Float64Histogram("ebb.request.duration", metric.WithUnit("s"),
		metric.WithDescription("Time from the request's first byte to its response handed to the connection.")); err != nil {
		return nil, err
	}
	if out.connects, err = m.Int64Counter("ebb.upstream.connects",
		metric.WithDescription("Upstream connections established.")); err != nil {
		return nil, err
	}
	if out.connectErrors, err = m.Int64Counter("ebb.upstream.connect_errors",
		metric.WithDescription("Upstream connection attempts that failed.")); err != nil {
		return nil, err
	}
	if out.upstreamErrors, err = m.Int64Counter("ebb.upstream.errors",
		metric.WithDescription("Upstream exchanges that failed, by kind (connect, overloaded, timeout, broken).")); err != nil {
		return nil, err
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
		return nil, fmt.Errorf("proxy: registering the connections gauge: %w", err)
	}
	return &out, nil
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

// routeMetrics holds the prebuilt attribute options for one listener and
// cluster pair.
type routeMetrics struct {
	m        *metrics
	requests [drain.ProtoHTTP2 + 1][len(statusClasses)][]metric.AddOption
	duration [drain.ProtoHTTP2 + 1][]metric.RecordOption
}

func (m *metrics) forRoute(listener, cluster string) *routeMetrics {
	rm := &routeMetrics{m: m}
	for p := drain.ProtoUnknown; p <= drain.ProtoHTTP2; p++ {
		base := []attribute.KeyValue{
			attribute.String("listener", listener),
			attribute.String("cluster", cluster),
			attribute.String("protocol", p.String()),
		}
		rm.duration[p] = []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(base...))}
		for c, class := range statusClasses {
			set := attribute.NewSet(append(base[:3:3], attribute.String("status_class", class))...)
			rm.requests[p][c] = []metric.AddOption{metric.WithAttributeSet(set)}
		}
	}
	return rm
}

// record counts one answered request.
func (rm *routeMetrics) record(proto drain.Protocol, status int, start time.Time) {
	ctx := context.Background()
	rm.m.requests.Add(ctx, 1, rm.requests[proto][statusClass(status)]...)
	rm.m.duration.Record(ctx, time.Since(start).Seconds(), rm.duration[proto]...)
}

func (m *metrics) forCluster(name string) *clusterMetrics {
	cm := &clusterMetrics{
		attrs:          []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(attribute.String("cluster", name)))},
		connects:       m.connects,
		connectErrors:  m.connectErrors,
		upstreamErrors: m.upstreamErrors,
	}
	for k, kind := range errKindNames {
		if kind != "" {
			cm.errors[k] = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(
				attribute.String("cluster", name), attribute.String("kind", kind)))}
		}
	}
	return cm
}

// clusterMetrics are the instruments of one cluster with their attributes
// built once.
type clusterMetrics struct {
	attrs          []metric.AddOption
	connects       metric.Int64Counter
	connectErrors  metric.Int64Counter
	upstreamErrors metric.Int64Counter
	errors         [len(errKindNames)][]metric.AddOption
}

func (cm *clusterMetrics) upstreamError(k errKind) {
	cm.upstreamErrors.Add(context.Background(), 1, cm.errors[k]...)
}
