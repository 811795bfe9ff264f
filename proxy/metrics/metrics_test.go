package metrics

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/ebb-proxy/ebb/drain"
	"github.com/ebb-proxy/ebb/proxy/downstream"
	"github.com/ebb-proxy/ebb/proxy/proxytest"
	"github.com/ebb-proxy/ebb/proxy/upstream"
	"github.com/ebb-proxy/ebb/telemetry"
)

func TestMetricsProduce(t *testing.T) {
	m := &Metrics{start: time.Now()}
	rm := m.ForRoute("public", "app")
	now := time.Now()
	rm.Record(downstream.ProtoHTTP1, 200, now.Add(-time.Millisecond/10)) // 100µs: first bucket
	rm.Record(downstream.ProtoHTTP1, 204, now.Add(-2*time.Millisecond))  // 2ms: the 2.5ms bucket
	rm.Record(downstream.ProtoHTTP1, 502, now.Add(-time.Minute))         // over every bound
	other := m.ForRoute("public", "other")
	if allocs := testing.AllocsPerRun(100, func() { other.Record(downstream.ProtoHTTP1, 200, now) }); allocs != 0 {
		t.Errorf("record allocates %v times", allocs)
	}

	m.routes = m.routes[:1] // drop "other"
	sms, err := telemetry.ProducerOf(m).Produce(context.Background())
	if err != nil || len(sms) != 1 || len(sms[0].Metrics) != 3 {
		t.Fatalf("Produce = %v, %v", sms, err)
	}
	reqs := sms[0].Metrics[0].Data.(metricdata.Sum[int64])
	got := map[string]int64{}
	for _, dp := range reqs.DataPoints {
		class, _ := dp.Attributes.Value(attribute.Key("status_class"))
		proto, _ := dp.Attributes.Value(attribute.Key("protocol"))
		got[proto.AsString()+" "+class.AsString()] = dp.Value
	}
	if len(got) != 2 || got["http1 2xx"] != 2 || got["http1 5xx"] != 1 {
		t.Errorf("requests = %v", got)
	}
	h := sms[0].Metrics[1].Data.(metricdata.Histogram[float64])
	if len(h.DataPoints) != 1 {
		t.Fatalf("%d histogram points", len(h.DataPoints))
	}
	dp := h.DataPoints[0]
	if dp.Count != 3 || dp.BucketCounts[0] != 1 || dp.BucketCounts[2] != 1 || dp.BucketCounts[len(dp.BucketCounts)-1] != 1 {
		t.Errorf("histogram count %d, buckets %v", dp.Count, dp.BucketCounts)
	}
	if dp.Sum < 60 || dp.Sum > 61 {
		t.Errorf("sum = %v s", dp.Sum)
	}
}

func TestDrainMetrics(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	reg := downstream.NewRegistry()
	if _, err := New(mp.Meter("test"), reg); err != nil {
		t.Fatal(err)
	}
	st := &reg.Stats
	st.Phase.Store(int32(drain.PhaseSignal))
	st.CloseSignals[downstream.ProtoHTTP1].Add(3)
	st.CloseSignals[downstream.ProtoHTTP2].Add(2)
	st.IdleCloses.Add(4)
	st.ForcedCloses.Add(1)
	st.Requests.Add(10)
	st.Dials.Add(5)
	st.Errors.Add(2)

	got := proxytest.Collect(t, reader)
	want := map[string]int64{
		"ebb.drain.phase phase=serving":          0,
		"ebb.drain.phase phase=announce":         0,
		"ebb.drain.phase phase=signal":           1,
		"ebb.drain.phase phase=wait":             0,
		"ebb.drain.phase phase=exit":             0,
		"ebb.drain.close_signals protocol=http1": 3,
		"ebb.drain.close_signals protocol=http2": 2,
		"ebb.drain.idle_closes":                  4,
		"ebb.drain.forced_closes":                1,
		"ebb.drain.requests":                     10,
		"ebb.drain.upstream_dials":               5,
		"ebb.drain.errors":                       2,
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s = %d (present %v), want %d", k, g, ok, v)
		}
	}
}

func TestClusterMetrics(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	m, err := New(mp.Meter("test"), downstream.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	cm := m.ForCluster("app")
	if again := m.ForCluster("app"); again != cm {
		t.Error("ForCluster made new instruments for a name it knew: a reload would restart the cluster's counts")
	}
	m.ForCluster("idle")
	cm.Retry()
	cm.RetryDenied()
	cm.RetryDenied()
	cm.UpstreamError(upstream.KindTimeout)
	cm.Attempt(3 * time.Millisecond)
	cm.Attempt(time.Minute)
	var none *Cluster // a cluster without metrics: every method a no-op
	none.RetryDenied()
	none.Attempt(time.Second)

	got := proxytest.Collect(t, reader)
	want := map[string]int64{
		"ebb.upstream.retries cluster=app":                 1,
		"ebb.upstream.retry_budget_exhausted cluster=app":  2,
		"ebb.upstream.errors cluster=app kind=timeout":     1,
		"ebb.upstream.errors cluster=app kind=connect":     0,
		"ebb.upstream.retries cluster=idle":                0,
		"ebb.upstream.retry_budget_exhausted cluster=idle": 0,
		"ebb.upstream.ejections cluster=idle":              0,
		"ebb.upstream.connects cluster=idle":               0,
		"ebb.upstream.connect_errors cluster=idle":         0,
		"ebb.discovery.empty_updates cluster=idle":         0,
		"ebb.upstream.errors cluster=idle kind=broken":     0,
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s = %d (present %v), want %d", k, g, ok, v)
		}
	}

	sms, err := telemetry.ProducerOf(m).Produce(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, metric := range sms[0].Metrics {
		if metric.Name != "ebb.upstream.request.duration" {
			continue
		}
		h := metric.Data.(metricdata.Histogram[float64])
		if len(h.DataPoints) != 1 { // "idle" has counted nothing
			t.Fatalf("%d points, want app's only", len(h.DataPoints))
		}
		dp := h.DataPoints[0]
		if c, _ := dp.Attributes.Value("cluster"); c.AsString() != "app" || dp.Count != 2 || dp.BucketCounts[3] != 1 || dp.BucketCounts[len(dp.BucketCounts)-1] != 1 {
			t.Errorf("upstream durations: %v count %d buckets %v", dp.Attributes.ToSlice(), dp.Count, dp.BucketCounts)
		}
		return
	}
	t.Error("no ebb.upstream.request.duration")
}

func TestStatusClass(t *testing.T) {
	for code, want := range map[int]string{0: "other", 99: "other", 100: "1xx", 204: "2xx", 308: "3xx", 499: "4xx", 503: "5xx", 600: "other"} {
		if got := statusClasses[statusClass(code)]; got != want {
			t.Errorf("statusClass(%d) = %s, want %s", code, got, want)
		}
	}
}
