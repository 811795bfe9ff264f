package telemetry

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"

	"github.com/ebb-proxy/ebb/config"
)

// clearOTLPEnv unsets, for the test, the environment variables the
// exporters read, so that the test's own settings are the only ones.
func clearOTLPEnv(t *testing.T) {
	t.Helper()
	for _, k := range os.Environ() {
		if name, _, _ := strings.Cut(k, "="); strings.HasPrefix(name, "OTEL_") {
			t.Setenv(name, "") // the exporters take empty as unset
		}
	}
}

// exportOne exports one span through a tracer provider built for cfg.
func exportOne(t *testing.T, cfg config.Tracing) {
	t.Helper()
	tp, err := newTracerProvider(cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, span := tp.Tracer("test").Start(context.Background(), "GET")
	span.End()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := tp.ForceFlush(ctx); err != nil {
		t.Fatalf("exporting to %s: %v", cfg.Endpoint, err)
	}
	if err := tp.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestHTTPEndpoint(t *testing.T) {
	for in, want := range map[string]string{
		"http://collector:4318":                   "http://collector:4318/v1/traces",
		"http://collector:4318/":                  "http://collector:4318/v1/traces",
		"https://collector:4318/v1/traces":        "https://collector:4318/v1/traces",
		"https://collector/otlp/v1/traces":        "https://collector/otlp/v1/traces",
		"https://collector:4318/custom":           "https://collector:4318/custom",
		"http://[::1]:4318":                       "http://[::1]:4318/v1/traces",
		"https://collector:4318/v1/traces?x=1":    "https://collector:4318/v1/traces?x=1",
		"https://collector:4318/?tenant=a":        "https://collector:4318/v1/traces?tenant=a",
		"https://collector.example.com/v1/traces": "https://collector.example.com/v1/traces",
	} {
		if got := httpEndpoint(in); got != want {
			t.Errorf("httpEndpoint(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestTracingHTTPPath: over http/protobuf, an endpoint without a path
// is posted to /v1/traces, as OTEL_EXPORTER_OTLP_ENDPOINT's is; one
// with a path is posted to that path.
func TestTracingHTTPPath(t *testing.T) {
	clearOTLPEnv(t)
	var mu sync.Mutex
	var paths []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths = append(paths, r.URL.Path)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK) // an empty ExportTraceServiceResponse
	}))
	defer srv.Close()
	for _, tc := range []struct {
		endpoint, env, want string
	}{
		{endpoint: srv.URL, want: "/v1/traces"},
		{endpoint: srv.URL + "/", want: "/v1/traces"},
		{endpoint: srv.URL + "/v1/traces", want: "/v1/traces"},
		{endpoint: srv.URL + "/custom/path", want: "/custom/path"},
		{env: srv.URL, want: "/v1/traces"}, // the exporter's own reading of OTEL_EXPORTER_OTLP_ENDPOINT
	} {
		t.Run(tc.endpoint+tc.env, func(t *testing.T) {
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", tc.env)
			mu.Lock()
			paths = nil
			mu.Unlock()
			exportOne(t, config.Tracing{Enabled: true, Protocol: config.TracingHTTP, Endpoint: tc.endpoint, SamplingRatio: 1})
			mu.Lock()
			defer mu.Unlock()
			if len(paths) != 1 || paths[0] != tc.want {
				t.Errorf("posted to %q, want %q", paths, tc.want)
			}
		})
	}
}

// deadlineReceiver is an OTLP/gRPC trace service that keeps how long
// each export was given (its deadline, as the exporter's timeout set it).
type deadlineReceiver struct {
	coltracepb.UnimplementedTraceServiceServer
	mu   sync.Mutex
	left []time.Duration
}

func (r *deadlineReceiver) Export(ctx context.Context, _ *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	left := time.Duration(-1) // no deadline
	if at, ok := ctx.Deadline(); ok {
		left = time.Until(at)
	}
	r.left = append(r.left, left)
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// TestTracingTimeout: telemetry.tracing.timeout 0 (the default) leaves
// the export timeout to OTEL_EXPORTER_OTLP_TRACES_TIMEOUT, then
// OTEL_EXPORTER_OTLP_TIMEOUT (milliseconds), else the exporter's 10s; a
// timeout set in the file wins over the environment.
func TestTracingTimeout(t *testing.T) {
	clearOTLPEnv(t)
	rec := &deadlineReceiver{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(srv, rec)
	go srv.Serve(ln)
	defer srv.Stop()
	// The batch span processor bounds an export by 30s of its own: every
	// timeout here is below.
	for _, tc := range []struct {
		name           string
		timeout        time.Duration
		env, tracesEnv string
		want           time.Duration
	}{
		{name: "default", want: 10 * time.Second},
		{name: "OTEL_EXPORTER_OTLP_TIMEOUT", env: "20000", want: 20 * time.Second},
		{name: "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", env: "20000", tracesEnv: "15000", want: 15 * time.Second},
		{name: "file", timeout: 3 * time.Second, env: "20000", want: 3 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("OTEL_EXPORTER_OTLP_TIMEOUT", tc.env)
			t.Setenv("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", tc.tracesEnv)
			rec.mu.Lock()
			rec.left = nil
			rec.mu.Unlock()
			exportOne(t, config.Tracing{Enabled: true, Endpoint: "http://" + ln.Addr().String(), Timeout: tc.timeout, SamplingRatio: 1})
			rec.mu.Lock()
			defer rec.mu.Unlock()
			// The deadline is read at the receiver, a little after the
			// exporter set it.
			if len(rec.left) != 1 || rec.left[0] > tc.want || rec.left[0] < tc.want-2*time.Second {
				t.Errorf("the export had %v left, want just under %s", rec.left, tc.want)
			}
		})
	}
}

// TestCheckTracing: what ebb check adds to the configuration's
// validation for tracing: the environment's OTLP protocol, the TLS files'
// content; nothing when tracing is off.
func TestCheckTracing(t *testing.T) {
	clearOTLPEnv(t)
	notPEM := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name             string
		cfg              config.Tracing
		protocol, traces string // OTEL_EXPORTER_OTLP_PROTOCOL, OTEL_EXPORTER_OTLP_TRACES_PROTOCOL
		want             string // in the error; none if empty
	}{
		{name: "on", cfg: config.Tracing{Enabled: true}},
		{name: "http/protobuf from the environment", cfg: config.Tracing{Enabled: true}, protocol: "http/protobuf"},
		{name: "bad protocol", cfg: config.Tracing{Enabled: true}, protocol: "http/json",
			want: `telemetry: OTLP protocol "http/json" (OTEL_EXPORTER_OTLP_PROTOCOL): expected grpc or http/protobuf`},
		{name: "bad traces protocol", cfg: config.Tracing{Enabled: true}, protocol: "grpc", traces: "thrift",
			want: `telemetry: OTLP protocol "thrift" (OTEL_EXPORTER_OTLP_TRACES_PROTOCOL): expected grpc or http/protobuf`},
		{name: "traces protocol wins", cfg: config.Tracing{Enabled: true}, protocol: "http/json", traces: "grpc"},
		{name: "the file's protocol wins", cfg: config.Tracing{Enabled: true, Protocol: config.TracingHTTP}, protocol: "http/json"},
		{name: "off", cfg: config.Tracing{}, protocol: "http/json"},
		{name: "ca_file not PEM", cfg: config.Tracing{Enabled: true, TLS: config.TracingTLS{CAFile: notPEM}},
			want: "telemetry.tracing.tls.ca_file " + notPEM + ": no PEM certificate in it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", tc.protocol)
			t.Setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", tc.traces)
			err := CheckTracing(tc.cfg)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("CheckTracing = %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("CheckTracing = %v, want an error naming %q", err, tc.want)
			}
			if tc.want != "" && err != nil {
				// ebb run stops with the same error.
				if _, nerr := newTracerProvider(tc.cfg); nerr == nil || nerr.Error() != err.Error() {
					t.Errorf("newTracerProvider = %v, want %v", nerr, err)
				}
			}
		})
	}
}
