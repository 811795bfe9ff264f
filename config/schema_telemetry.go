// The schema's telemetry: logs, the access log, traces and metrics.

package config

import "time"

// Telemetry configures logs, traces and metrics (docs/OBSERVABILITY.md).
type Telemetry struct {
	Log       Log       `key:"log"`
	AccessLog AccessLog `key:"access_log"`
	Tracing   Tracing   `key:"tracing"`
	Metrics   Metrics   `key:"metrics"`
}

// Tracing configures OpenTelemetry traces, exported over OTLP: a server
// span per request and a client span per upstream attempt. What is left
// empty here comes from the standard OTEL_EXPORTER_OTLP_* (and
// OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES) environment variables, and
// failing those from OTLP's defaults (docs/OBSERVABILITY.md, tracing).
// Every change needs a restart.
type Tracing struct {
	// Enabled exports traces; off, the request path makes no tracing call.
	Enabled bool `key:"enabled"`
	// Protocol is grpc or http/protobuf; empty, the environment's
	// (OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, OTEL_EXPORTER_OTLP_PROTOCOL),
	// else grpc. With tracing on, ebb check fails on another value in the
	// environment.
	Protocol string `key:"protocol"`
	// Endpoint is the collector's URL, with a host: http://host:4317
	// (gRPC), or https://host:4318/v1/traces (HTTP; a URL without a path
	// is posted to /v1/traces, one with a path to that path); http:// is
	// without TLS, and cannot have tls set. Empty, the environment's
	// (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, OTEL_EXPORTER_OTLP_ENDPOINT),
	// else localhost:4317 (HTTP: localhost:4318/v1/traces), over TLS.
	Endpoint string `key:"endpoint"`
	// Headers are sent with every export (an API key, say), in place of
	// OTEL_EXPORTER_OTLP_HEADERS; [redacted] in /config.
	Headers map[string]string `key:"headers" secret:"true"`
	// TLS configures the connection to an https:// endpoint; any tls key
	// with an http:// endpoint is an error. Read by ebb check when
	// tracing is on.
	TLS TracingTLS `key:"tls"`
	// Timeout bounds each export, 0 or more (0: OTEL_EXPORTER_OTLP_TRACES_TIMEOUT
	// or OTEL_EXPORTER_OTLP_TIMEOUT, else the exporter's 10s).
	Timeout time.Duration `key:"timeout"`
	// SamplingRatio is the share of traces sampled that start at ebb
	// (0 to 1); a request that comes with a sampled or unsampled parent
	// follows its parent's choice.
	SamplingRatio float64 `key:"sampling_ratio"`
	// ServiceName is the service.name of ebb's spans (empty:
	// OTEL_SERVICE_NAME, else ebb).
	ServiceName string `key:"service_name"`
	// ResourceAttributes are string attributes added to the resource of
	// ebb's spans (over OTEL_RESOURCE_ATTRIBUTES's).
	ResourceAttributes map[string]string `key:"resource_attributes"`
}

// TracingTLS is the TLS client configuration of the OTLP exporter.
type TracingTLS struct {
	// CAFile holds the PEM certificates the collector's is checked
	// against (empty: the system's).
	CAFile string `key:"ca_file"`
	// CertFile is a client certificate, for mutual TLS, with key_file
	// (both or neither).
	CertFile string `key:"cert_file"`
	// KeyFile is the client certificate's private key, with cert_file.
	KeyFile string `key:"key_file"`
	// InsecureSkipVerify accepts any certificate (tests only).
	InsecureSkipVerify bool `key:"insecure_skip_verify"`
}

// The values of telemetry.tracing.protocol.
const (
	TracingGRPC = "grpc"
	TracingHTTP = "http/protobuf"
)

// Log configures the process log (on stderr).
type Log struct {
	// Format is how each line is written.
	Format string `key:"format"`
	// Level is the least severe level logged.
	Level string `key:"level"`
}

// AccessLog configures the access log: one line per request, written
// when its response has been relayed (a WebSocket's when it closes;
// docs/OBSERVABILITY.md, access log).
type AccessLog struct {
	// Enabled writes it; applied live on reload, as Format is. Turn it
	// off when another layer logs every request already.
	Enabled bool `key:"enabled"`
	// Format is json, text (key=value pairs) or combined (the combined
	// log format of Apache and nginx).
	Format string `key:"format"`
	// Path is the file lines are appended to; "" or "-" is standard
	// output. The file is reopened on SIGUSR1 (after logrotate moved
	// it); changing the path needs a restart.
	Path string `key:"path"`
}

// Metrics configures metric export.
type Metrics struct {
	// Prometheus serves the metrics at the admin server's /metrics.
	Prometheus bool `key:"prometheus"`
}
