package telemetry

import (
	"bytes"
	"context"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ebb-proxy/ebb/config"
	"github.com/ebb-proxy/ebb/telemetry/collect"
)

func TestLogger(t *testing.T) {
	var buf bytes.Buffer
	log, err := NewLogger(config.Log{Format: "json", Level: "warn"}, &buf)
	if err != nil {
		t.Fatal(err)
	}
	log.Info("hidden")
	log.Warn("shown", "k", "v")
	if out := buf.String(); strings.Contains(out, "hidden") || !strings.Contains(out, `"msg":"shown","k":"v"`) {
		t.Fatalf("json log = %q", out)
	}
	buf.Reset()
	log, _ = NewLogger(config.Log{Format: "text", Level: "debug"}, &buf)
	log.Debug("d")
	if !strings.Contains(buf.String(), "level=DEBUG msg=d") {
		t.Fatalf("text log = %q", buf.String())
	}
	if _, err := NewLogger(config.Log{Format: "json", Level: "loud"}, &buf); err == nil {
		t.Fatal("no error for level loud")
	}
}

// fixedCollector hands over one counter and one histogram.
type fixedCollector struct{}

func (fixedCollector) Collect() (start, now time.Time, series []collect.Series) {
	now = time.Now()
	return now, now, []collect.Series{
		{Name: "ebb.test", Counters: []collect.Counter{{Value: 7}}},
		{Name: "ebb.test.duration", Unit: "s", Histogram: true, Histograms: []collect.Histogram{{
			Count: 2, Sum: 0.003, Buckets: make([]uint64, len(collect.DurationBounds)+1)}}},
	}
}

func TestMetrics(t *testing.T) {
	tel, err := New(config.Telemetry{Log: config.Log{Format: "json", Level: "info"}, Metrics: config.Metrics{Prometheus: true}}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(context.Background())
	c, err := tel.Meter.Int64Counter("ebb.widgets")
	if err != nil {
		t.Fatal(err)
	}
	c.Add(context.Background(), 3)
	tel.AddCollector(fixedCollector{})
	rec := httptest.NewRecorder()
	tel.MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	for _, want := range []string{"ebb_widgets_total 3", "ebb_test_total 7", "ebb_test_duration_seconds_count 2", "go_goroutines"} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	off, err := New(config.Telemetry{Log: config.Log{Format: "json", Level: "info"}}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	rec = httptest.NewRecorder()
	off.MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 404 {
		t.Fatalf("metrics off: /metrics = %d", rec.Code)
	}
}
