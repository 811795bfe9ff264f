// Package collect is what the data path needs of the telemetry pipeline,
// without the pipeline: the instrumentation scope's name, the duration
// buckets, and the plain form in which a package that counts for itself
// (with atomics, on its hot path) hands its series over at each scrape.
// package telemetry turns them into OpenTelemetry's (Telemetry.AddCollector).
//
// It imports only OpenTelemetry's attribute API, so that proxy/metrics
// depends on no SDK or exporter (and through them on no gRPC).
package collect

import (
	"time"

	"go.opentelemetry.io/otel/attribute"
)

// MeterName is the instrumentation scope of every ebb instrument.
const MeterName = "github.com/ebb-proxy/ebb"

// DurationBounds are the bucket bounds, in seconds, of every duration
// histogram ebb exports.
var DurationBounds = [...]float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}

// Counter is a cumulative counter's value for one attribute set.
type Counter struct {
	Attrs attribute.Set
	Value int64
}

// Histogram is a cumulative histogram on DurationBounds for one attribute
// set: Buckets has one count per bound and one above the last.
type Histogram struct {
	Attrs   attribute.Set
	Count   uint64
	Sum     float64
	Buckets []uint64
}

// Series is one metric: a histogram (Histograms) if Histogram is set,
// else a counter (Counters), by attribute set.
type Series struct {
	Name, Unit, Description string
	Histogram               bool
	Counters                []Counter
	Histograms              []Histogram
}

// Collector hands over its series, cumulative since start, as they are
// at now.
type Collector interface {
	Collect() (start, now time.Time, series []Series)
}
