// Package telemetry sets up ebb's logs, traces and metrics: a slog logger
// (JSON or text), an OpenTelemetry tracer provider exporting over OTLP
// when tracing is on, and a meter provider whose readings are exported in
// the Prometheus format on the admin server's /metrics.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/ebb-proxy/ebb/config"
	"github.com/ebb-proxy/ebb/telemetry/collect"
)

// MeterName is the instrumentation scope of every ebb instrument.
const MeterName = collect.MeterName

// Telemetry owns the logger and the meter and tracer providers.
type Telemetry struct {
	Logger *slog.Logger
	// Meter creates instruments; it is a no-op meter when metrics are off.
	Meter metric.Meter
	// Tracer makes spans; nil when tracing is off.
	Tracer trace.TracerProvider

	tracer    *sdktrace.TracerProvider
	provider  *sdkmetric.MeterProvider
	registry  *prometheus.Registry
	producers producers
}

// AddCollector adds metrics that a package aggregates itself (with
// atomics, on its hot path) to what /metrics serves. The collector's
// Collect is called at each scrape. A no-op when metrics are off.
func (t *Telemetry) AddCollector(c collect.Collector) {
	t.producers.add(ProducerOf(c))
}

// ProducerOf returns c as an OpenTelemetry metric producer: its series
// in the instrumentation scope MeterName.
func ProducerOf(c collect.Collector) sdkmetric.Producer { return collector{c} }

type collector struct{ c collect.Collector }

// Produce implements sdkmetric.Producer.
func (c collector) Produce(context.Context) ([]metricdata.ScopeMetrics, error) {
	start, now, series := c.c.Collect()
	sm := metricdata.ScopeMetrics{Scope: instrumentation.Scope{Name: MeterName}}
	for _, s := range series {
		m := metricdata.Metrics{Name: s.Name, Unit: s.Unit, Description: s.Description}
		if s.Histogram {
			h := metricdata.Histogram[float64]{Temporality: metricdata.CumulativeTemporality}
			for _, p := range s.Histograms {
				h.DataPoints = append(h.DataPoints, metricdata.HistogramDataPoint[float64]{
					Attributes: p.Attrs, StartTime: start, Time: now,
					Count: p.Count, Bounds: collect.DurationBounds[:], BucketCounts: p.Buckets, Sum: p.Sum,
				})
			}
			m.Data = h
		} else {
			sum := metricdata.Sum[int64]{Temporality: metricdata.CumulativeTemporality, IsMonotonic: true}
			for _, p := range s.Counters {
				sum.DataPoints = append(sum.DataPoints, metricdata.DataPoint[int64]{
					Attributes: p.Attrs, StartTime: start, Time: now, Value: p.Value})
			}
			m.Data = sum
		}
		sm.Metrics = append(sm.Metrics, m)
	}
	return []metricdata.ScopeMetrics{sm}, nil
}

// producers fans Produce out to every added producer.
type producers struct {
	mu   sync.Mutex
	list []sdkmetric.Producer // guarded by mu
}

func (ps *producers) add(p sdkmetric.Producer) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.list = append(ps.list, p)
}

// Produce implements sdkmetric.Producer.
func (ps *producers) Produce(ctx context.Context) ([]metricdata.ScopeMetrics, error) {
	ps.mu.Lock()
	list := slices.Clone(ps.list)
	ps.mu.Unlock()
	var out []metricdata.ScopeMetrics
	var errs []error
	for _, p := range list {
		sm, err := p.Produce(ctx)
		out = append(out, sm...)
		errs = append(errs, err)
	}
	return out, errors.Join(errs...)
}

// New builds the logger writing to w and, when enabled, the meter provider.
func New(cfg config.Telemetry, w io.Writer) (*Telemetry, error) {
	logger, err := NewLogger(cfg.Log, w)
	if err != nil {
		return nil, err
	}
	t := &Telemetry{Logger: logger, Meter: noop.NewMeterProvider().Meter(MeterName)}
	if cfg.Tracing.Enabled {
		if t.tracer, err = newTracerProvider(cfg.Tracing); err != nil {
			return nil, err
		}
		t.Tracer = t.tracer
		// Failed exports (a collector down) are the SDK's to report.
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
			logger.Warn("telemetry: exporting spans failed", "err", err)
		}))
	}
	if !cfg.Metrics.Prometheus {
		return t, nil
	}
	t.registry = prometheus.NewRegistry()
	t.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	exporter, err := otelprom.New(
		otelprom.WithRegisterer(t.registry),
		otelprom.WithoutScopeInfo(),
		otelprom.WithoutTargetInfo(),
		otelprom.WithProducer(&t.producers),
	)
	if err != nil {
		return nil, fmt.Errorf("telemetry: creating the Prometheus exporter: %w", err)
	}
	t.provider = sdkmetric.NewMeterProvider(
		sdkmetric.WithReader(exporter),
		sdkmetric.WithView(sdkmetric.NewView(
			sdkmetric.Instrument{Name: "*duration*"},
			sdkmetric.Stream{Aggregation: sdkmetric.AggregationExplicitBucketHistogram{Boundaries: collect.DurationBounds[:]}},
		)),
	)
	t.Meter = t.provider.Meter(MeterName)
	return t, nil
}

// MetricsHandler serves the Prometheus text format, or 404 when metrics
// are off.
func (t *Telemetry) MetricsHandler() http.Handler {
	if t.registry == nil {
		return http.NotFoundHandler()
	}
	return promhttp.HandlerFor(t.registry, promhttp.HandlerOpts{})
}

// Flush exports the spans ended so far, within ctx.
func (t *Telemetry) Flush(ctx context.Context) error {
	if t.tracer == nil {
		return nil
	}
	return t.tracer.ForceFlush(ctx)
}

// Shutdown flushes the spans not yet exported, within ctx, and stops the
// providers.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	var errs []error
	if t.tracer != nil {
		errs = append(errs, t.tracer.Shutdown(ctx))
	}
	if t.provider != nil {
		errs = append(errs, t.provider.Shutdown(ctx))
	}
	return errors.Join(errs...)
}

// NewLogger builds the process logger.
func NewLogger(cfg config.Log, w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(strings.ToUpper(cfg.Level))); err != nil {
		return nil, fmt.Errorf("telemetry: log level %q: %w", cfg.Level, err)
	}
	opts := &slog.HandlerOptions{Level: level}
	if cfg.Format == "text" {
		return slog.New(slog.NewTextHandler(w, opts)), nil
	}
	return slog.New(slog.NewJSONHandler(w, opts)), nil
}
