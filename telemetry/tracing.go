package telemetry

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
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
	p := cfg.Protocol
	for _, env := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if p == "" {
			p = os.Getenv(env)
		}
	}
	switch p {
	case "":
		return config.TracingGRPC, nil
	case config.TracingGRPC, config.TracingHTTP:
		return p, nil
	}
	return "", fmt.Errorf("telemetry: OTLP protocol %q: expected grpc or http/protobuf", p)
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
		opts := []otlptracehttp.Option{otlptracehttp.WithTimeout(cfg.Timeout)}
		if cfg.Endpoint != "" {
			opts = append(opts, otlptracehttp.WithEndpointURL(cfg.Endpoint))
		}
		if len(cfg.Headers) > 0 {
			opts = append(opts, otlptracehttp.WithHeaders(cfg.Headers))
		}
		if tc != nil {
			opts = append(opts, otlptracehttp.WithTLSClientConfig(tc))
		}
		return otlptracehttp.New(ctx, opts...)
	}
	opts := []otlptracegrpc.Option{otlptracegrpc.WithTimeout(cfg.Timeout)}
	if cfg.Endpoint != "" {
		opts = append(opts, otlptracegrpc.WithEndpointURL(cfg.Endpoint))
	}
	if len(cfg.Headers) > 0 {
		opts = append(opts, otlptracegrpc.WithHeaders(cfg.Headers))
	}
	if tc != nil {
		opts = append(opts, otlptracegrpc.WithTLSCredentials(credentials.NewTLS(tc)))
	}
	return otlptracegrpc.New(ctx, opts...)
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
