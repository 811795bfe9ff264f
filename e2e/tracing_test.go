package e2e

import (
	"encoding/hex"
	"net/http"
	"os/exec"
	"strings"
	"testing"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/ebb-proxy/ebb/proxy/proxytest"
)

// TestTracingAtExit runs the binary with tracing configured only by the
// standard OpenTelemetry environment variables (OTEL_EXPORTER_OTLP_ENDPOINT,
// OTEL_SERVICE_NAME), sends one traced request and stops ebb at once:
// the spans, still waiting for the batch (5 s), are exported at exit,
// within the drain's deadline.
func TestTracingAtExit(t *testing.T) {
	rec := &proxytest.OTLPReceiver{}
	endpoint := rec.ServeGRPC(t)

	seen := make(chan string, 1)
	origin := hostPort(newOrigin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Get("Traceparent")
	})))
	path := writeConfig(t, routeYAML("a", map[string]string{"a": origin})+"telemetry:\n  tracing: { enabled: true }\n")
	cmd := exec.Command(ebbBin, append([]string{"run", "-config", path}, quickDrain...)...)
	cmd.Env = append(cmd.Environ(), "OTEL_EXPORTER_OTLP_ENDPOINT="+endpoint, "OTEL_SERVICE_NAME=ebb-e2e")
	e := startEbbCmd(t, path, cmd)

	const traceID = "0af7651916cd43dd8448eb211c80319c"
	req, err := http.NewRequest(http.MethodGet, e.url("public", "/x"), nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Traceparent", "00-"+traceID+"-b7ad6b7169203331-01")
	c := &http.Client{}
	if code, _, _ := do(t, c, req); code != http.StatusOK {
		t.Fatalf("GET /x: %d", code)
	}
	c.CloseIdleConnections()
	if tp := <-seen; !strings.HasPrefix(tp, "00-"+traceID+"-") || strings.Contains(tp, "b7ad6b7169203331") {
		t.Errorf("the origin saw traceparent %q, want trace %s under ebb's span", tp, traceID)
	}
	e.stop() // SIGTERM: drains, exits 0, logged no error

	spans := rec.Spans()
	kinds := map[tracepb.Span_SpanKind]int{}
	for _, s := range spans {
		if hex.EncodeToString(s.TraceId) != traceID {
			t.Errorf("a span of trace %x, want %s", s.TraceId, traceID)
		}
		kinds[s.Kind]++
	}
	if len(spans) != 2 || kinds[tracepb.Span_SPAN_KIND_SERVER] != 1 || kinds[tracepb.Span_SPAN_KIND_CLIENT] != 1 {
		t.Errorf("the receiver got %d spans (%v) by ebb's exit, want its server span and its client span", len(spans), kinds)
	}
	if name := rec.Resource()["service.name"]; name != "ebb-e2e" {
		t.Errorf("service.name %q, want OTEL_SERVICE_NAME's", name)
	}
}
