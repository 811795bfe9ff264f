package proxytest

import (
	"context"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// Collect returns every int64 point reader has, keyed by the metric's name
// and its attributes ("name k=v k=v", attributes in order).
func Collect(t *testing.T, reader sdkmetric.Reader) map[string]int64 {
	t.Helper()
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
	return got
}
