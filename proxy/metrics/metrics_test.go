package metrics

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/ebb-proxy/ebb/drain"
)

func TestMetricsProduce(t *testing.T) {
	m := &Metrics{start: time.Now()}
	rm := m.ForRoute("public", "app")
	now := time.Now()
	rm.Record(drain.ProtoHTTP1, 200, now.Add(-time.Millisecond/10)) // 100µs: first bucket
	rm.Record(drain.ProtoHTTP1, 204, now.Add(-2*time.Millisecond))  // 2ms: the 2.5ms bucket
	rm.Record(drain.ProtoHTTP1, 502, now.Add(-time.Minute))         // over every bound
	other := m.ForRoute("public", "other")
	if allocs := testing.AllocsPerRun(100, func() { other.Record(drain.ProtoHTTP1, 200, now) }); allocs != 0 {
		t.Errorf("record allocates %v times", allocs)
	}

	m.routes = m.routes[:1] // drop "other"
	sms, err := m.Produce(context.Background())
	if err != nil || len(sms) != 1 || len(sms[0].Metrics) != 2 {
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
	reg := drain.NewRegistry()
	if _, err := New(mp.Meter("test"), reg); err != nil {
		t.Fatal(err)
	}
	st := &reg.Stats
	st.Phase.Store(int32(drain.PhaseSignal))
	st.CloseSignals[drain.ProtoHTTP1].Add(3)
	st.CloseSignals[drain.ProtoHTTP2].Add(2)
	st.IdleCloses.Add(4)
	st.ForcedCloses.Add(1)
	st.Requests.Add(10)
	st.Dials.Add(5)

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			var points []metricdata.DataPoint[int64]
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				points = d.DataPoints
			case metricdata.Gauge[int64]:
				points = d.DataPoints
			}
			for _, dp := range points {
				key := m.Name
				for _, kv := range dp.Attributes.ToSlice() {
					key += " " + string(kv.Key) + "=" + kv.Value.Emit()
				}
				got[key] = dp.Value
			}
		}
	}
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
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s = %d (present %v), want %d", k, g, ok, v)
		}
	}
}

func TestStatusClass(t *testing.T) {
	for code, want := range map[int]string{0: "other", 99: "other", 100: "1xx", 204: "2xx", 308: "3xx", 499: "4xx", 503: "5xx", 600: "other"} {
		if got := statusClasses[statusClass(code)]; got != want {
			t.Errorf("statusClass(%d) = %s, want %s", code, got, want)
		}
	}
}
