package telemetry

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"google.golang.org/grpc/credentials"

	"github.com/ebb-proxy/ebb/config"
)

// newTracerProvider builds the OpenTelemetry tracer provider cfg asks
// for: an OTLP exporter (gRPC or HTTP/protobuf) behind a batching span
// processor, parent-based ratio sampling, and ebb's resource. Settings
// cfg leaves empty are the exporter's, which reads the standard
// OTEL_EXPORTER_OTLP_* environment variables.
func newTracerProvider(cfg config.Tracing) (*sdktrace.TracerProvider, error) {
	exp, err := newExporter(cfg)
	if err != nil {
		return nil, err
	}
	res, err := newResource(cfg)
	if err != nil {
		return nil, err
	}
	return sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(cfg.SamplingRatio))),
		sdktrace.WithResource(res),
	), nil
}

// TracingProtocol returns the OTLP protocol ebb exports with: cfg's, else
// the environment's (OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, then
// OTEL_EXPORTER_OTLP_PROTOCOL), else grpc.
func TracingProtocol(cfg config.Tracing) (string, error) {
	p, from := cfg.Protocol, "telemetry.tracing.protocol"
	for _, env := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if p == "" {
			p, from = os.Getenv(env), env
		}
	}
	switch p {
	case "":
		return config.TracingGRPC, nil
	case config.TracingGRPC, config.TracingHTTP:
		return p, nil
	}
	return "", fmt.Errorf("telemetry: OTLP protocol %q (%s): expected grpc or http/protobuf", p, from)
}

// CheckTracing reports, for ebb check, what would stop telemetry.New
// with cfg beyond the configuration's own validation: an OTLP protocol
// from the environment that is neither grpc nor http/protobuf, TLS files
// that hold no certificate or key. Nil when tracing is off.
func CheckTracing(cfg config.Tracing) error {
	if !cfg.Enabled {
		return nil
	}
	if _, err := TracingProtocol(cfg); err != nil {
		return err
	}
	_, err := tlsConfig(cfg.TLS)
	return err
}

func newExporter(cfg config.Tracing) (sdktrace.SpanExporter, error) {
	proto, err := TracingProtocol(cfg)
	if err != nil {
		return nil, err
	}
	tc, err := tlsConfig(cfg.TLS)
	if err != nil {
		return nil, err
	}
	// The exporters connect lazily: a collector that is not up yet costs
	// failed exports (logged), not ebb's start.
	ctx := context.Background()
	if proto == config.TracingHTTP {
		return otlptracehttp.New(ctx, httpOptions(cfg, tc)...)
	}
	return otlptracegrpc.New(ctx, grpcOptions(cfg, tc)...)
}

// httpOptions are the OTLP/HTTP exporter's options for cfg (tc: its TLS
// client configuration, nil for none). What cfg leaves unset is not
// passed, so that the environment's holds: a timeout of 0 is
// OTEL_EXPORTER_OTLP_(TRACES_)TIMEOUT's, else the exporter's 10s.
func httpOptions(cfg config.Tracing, tc *tls.Config) []otlptracehttp.Option {
	var opts []otlptracehttp.Option
	if cfg.Timeout > 0 {
		opts = append(opts, otlptracehttp.WithTimeout(cfg.Timeout))
	}
	if cfg.Endpoint != "" {
		opts = append(opts, otlptracehttp.WithEndpointURL(httpEndpoint(cfg.Endpoint)))
	}
	if len(cfg.Headers) > 0 {
		opts = append(opts, otlptracehttp.WithHeaders(cfg.Headers))
	}
	if tc != nil {
		opts = append(opts, otlptracehttp.WithTLSClientConfig(tc))
	}
	return opts
}

// grpcOptions are httpOptions for the OTLP/gRPC exporter.
func grpcOptions(cfg config.Tracing, tc *tls.Config) []otlptracegrpc.Option {
	var opts []otlptracegrpc.Option
	if cfg.Timeout > 0 {
		opts = append(opts, otlptracegrpc.WithTimeout(cfg.Timeout))
	}
	if cfg.Endpoint != "" {
		opts = append(opts, otlptracegrpc.WithEndpointURL(cfg.Endpoint))
	}
	if len(cfg.Headers) > 0 {
		opts = append(opts, otlptracegrpc.WithHeaders(cfg.Headers))
	}
	if tc != nil {
		opts = append(opts, otlptracegrpc.WithTLSCredentials(credentials.NewTLS(tc)))
	}
	return opts
}

// httpEndpoint returns the URL OTLP/HTTP exports are posted to for the
// configured endpoint e: e with the traces path, /v1/traces, when it has
// no path (or only /), as OTEL_EXPORTER_OTLP_ENDPOINT is read; else e as
// it is.
func httpEndpoint(e string) string {
	u, err := url.Parse(e)
	if err != nil || (u.Path != "" && u.Path != "/") {
		return e // a path of its own (or no URL: validation refuses it)
	}
	u.Path, u.RawPath = "/v1/traces", ""
	return u.String()
}

// tlsConfig returns the TLS client configuration t describes, or nil when
// it sets nothing (the exporter's defaults, or the environment's, hold).
func tlsConfig(t config.TracingTLS) (*tls.Config, error) {
	if t == (config.TracingTLS{}) {
		return nil, nil
	}
	tc := &tls.Config{InsecureSkipVerify: t.InsecureSkipVerify} // #nosec G402: the user asked for it
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("telemetry: telemetry.tracing.tls.ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("telemetry: telemetry.tracing.tls.ca_file %s: no PEM certificate in it", t.CAFile)
		}
		tc.RootCAs = pool
	}
	if t.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("telemetry: telemetry.tracing.tls.cert_file and key_file: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// newResource describes ebb to the collector: service.name (cfg's, else
// OTEL_SERVICE_NAME, else ebb), the attributes of OTEL_RESOURCE_ATTRIBUTES
// and of cfg (cfg's win), and the SDK's.
func newResource(cfg config.Tracing) (*resource.Resource, error) {
	env, err := resource.New(context.Background(), resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("telemetry: the tracing resource: %w", err)
	}
	base := resource.NewSchemaless(attribute.String("service.name", "ebb"))
	res, err := resource.Merge(base, env)
	if err != nil {
		return nil, fmt.Errorf("telemetry: the tracing resource: %w", err)
	}
	var own []attribute.KeyValue
	if cfg.ServiceName != "" {
		own = append(own, attribute.String("service.name", cfg.ServiceName))
	}
	for k, v := range cfg.ResourceAttributes {
		own = append(own, attribute.String(k, v))
	}
	return resource.Merge(res, resource.NewSchemaless(own...))
}
