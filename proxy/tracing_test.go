package proxy

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/metric"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/ebb-proxy/ebb/proxy/downstream"
	"github.com/ebb-proxy/ebb/proxy/proxytest"
	"github.com/ebb-proxy/ebb/telemetry"
)

// newOriginServer starts h on 127.0.0.1 and returns its http:// URL.
func newOriginServer(t *testing.T, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String()
}

// tracedEnv is an env whose Proxy traces, exporting to a receiver.
type tracedEnv struct {
	*env
	tel    *telemetry.Telemetry
	rec    *proxytest.OTLPReceiver
	access string // the access log's file
}

// newTracedEnv is newEnv with telemetry.tracing on: tracing holds its
// keys (endpoint and the rest) as YAML lines under telemetry.tracing.
func newTracedEnv(t *testing.T, m mode, h http.Handler, rec *proxytest.OTLPReceiver, tracing ...string) *tracedEnv {
	t.Helper()
	var te *tracedEnv
	e := proxytest.NewEnv(t, m, h, func(yaml string) string {
		te = startTraced(t, yaml, rec, tracing...)
		return te.px.Addr("public").String()
	})
	te.Env = e
	return te
}

// spans waits until the receiver has n spans (a server span ends once
// its response has been relayed, which may be just after the client has
// read it) and returns them.
func (te *tracedEnv) spans(t *testing.T, n int) []*tracepb.Span {
	t.Helper()
	deadline := time.NewTimer(waitTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		err := te.tel.Flush(ctx)
		cancel()
		if err != nil {
			t.Fatalf("flushing spans: %v", err)
		}
		if got := te.rec.Spans(); len(got) >= n {
			return got
		}
		select {
		case <-tick.C:
		case <-deadline.C:
			t.Fatalf("the receiver has %d spans, want %d", len(te.rec.Spans()), n)
		}
	}
}

// attr returns a span attribute's value as a string ("" when absent).
func attr(s *tracepb.Span, key string) string {
	for _, kv := range s.Attributes {
		if kv.Key == key {
			switch v := kv.Value.Value.(type) {
			case *commonpb.AnyValue_StringValue:
				return v.StringValue
			case *commonpb.AnyValue_IntValue:
				return fmt.Sprint(v.IntValue)
			case *commonpb.AnyValue_BoolValue:
				return fmt.Sprint(v.BoolValue)
			case *commonpb.AnyValue_ArrayValue:
				var out []string
				for _, e := range v.ArrayValue.Values {
					out = append(out, e.GetStringValue())
				}
				return strings.Join(out, ",")
			}
		}
	}
	return ""
}

// TestTracing: in every mode, a request that comes with a sampled W3C
// trace context yields a server span, its child, and a client span, the
// server span's child; the origin receives the same trace id with the
// client span as its parent; the resource names ebb.
func TestTracing(t *testing.T) {
	run(t, func(t *testing.T, m mode) {
		rec := &proxytest.OTLPReceiver{}
		var mu sync.Mutex
		var seen []string // the traceparent each request reached the origin with
		te := newTracedEnv(t, m, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			seen = append(seen, r.Header.Get("Traceparent"))
			mu.Unlock()
			io.WriteString(w, "hello")
		}), rec, "endpoint: "+rec.ServeGRPC(t), "service_name: edge-ebb")
		const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
		req, err := http.NewRequest(http.MethodGet, te.Base+"/traced?q=1", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Traceparent", "00-"+traceID+"-"+parentID+"-01")
		req.Header.Set("Tracestate", "vendor=abc")
		if body := roundTrip(t, te.env, req, http.StatusOK); body != "hello" {
			t.Fatalf("body %q", body)
		}
		spans := te.spans(t, 2)
		if len(spans) != 2 {
			t.Fatalf("%d spans, want 2", len(spans))
		}
		var server, client *tracepb.Span
		for _, s := range spans {
			switch s.Kind {
			case tracepb.Span_SPAN_KIND_SERVER:
				server = s
			case tracepb.Span_SPAN_KIND_CLIENT:
				client = s
			}
		}
		if server == nil || client == nil {
			t.Fatalf("spans %v, want a server and a client span", spans)
		}
		hexID := func(b []byte) string { return hex.EncodeToString(b) }
		if hexID(server.TraceId) != traceID || hexID(client.TraceId) != traceID {
			t.Errorf("trace ids %s, %s; want the client's %s", hexID(server.TraceId), hexID(client.TraceId), traceID)
		}
		if hexID(server.ParentSpanId) != parentID {
			t.Errorf("the server span's parent %s, want the client's span %s", hexID(server.ParentSpanId), parentID)
		}
		if hexID(client.ParentSpanId) != hexID(server.SpanId) {
			t.Errorf("the client span's parent %s, want the server span %s", hexID(client.ParentSpanId), hexID(server.SpanId))
		}
		mu.Lock()
		want := "00-" + traceID + "-" + hexID(client.SpanId) + "-01"
		if len(seen) != 1 || seen[0] != want {
			t.Errorf("the origin saw traceparent %q, want %q (ebb's client span as parent)", seen, want)
		}
		mu.Unlock()
		if server.TraceState != "vendor=abc" {
			t.Errorf("server span tracestate %q, want the client's", server.TraceState)
		}
		proto := "1.1"
		if m.DownH2() {
			proto = "2"
		}
		scheme := "http"
		if m.TLS() {
			scheme = "https"
		}
		for k, v := range map[string]string{
			"http.request.method": "GET", "url.path": "/traced", "url.scheme": scheme, "network.protocol.version": proto,
			"server.address": "127.0.0.1", "http.response.status_code": "200", "client.address": "127.0.0.1",
			"ebb.listener": "public", "ebb.cluster": "app", "ebb.attempts": "1", "http.response.body.size": "5",
		} {
			if got := attr(server, k); got != v {
				t.Errorf("server span %s = %q, want %q", k, got, v)
			}
		}
		if id := attr(server, "http.request.header.x-request-id"); !uuidV4.MatchString(id) {
			t.Errorf("server span request id %q, want ebb's UUID", id)
		}
		for k, v := range map[string]string{"http.request.method": "GET", "server.address": "127.0.0.1",
			"http.response.status_code": "200", "ebb.cluster": "app", "http.request.resend_count": ""} {
			if got := attr(client, k); got != v {
				t.Errorf("client span %s = %q, want %q", k, got, v)
			}
		}
		if server.Name != "GET" || client.Name != "GET" {
			t.Errorf("span names %q, %q; want GET", server.Name, client.Name)
		}
		res := rec.Resource()
		if res["service.name"] != "edge-ebb" || res["telemetry.sdk.name"] != "opentelemetry" {
			t.Errorf("resource %v, want service.name edge-ebb and the SDK's attributes", res)
		}
	})
}

// TestTracingRetry: a request retried on another endpoint has two client
// spans under its server span, the first failed (upstream_connect), the
// second with http.request.resend_count 1; a request ebb answers with a
// 502 has a server span with error status. Exported over OTLP/HTTP, from
// an HTTP/1.1 and an HTTP/2 client, to an http1 and an h2c cluster.
func TestTracingRetry(t *testing.T) {
	for _, m := range []mode{{Down: proxytest.DownH1, Up: proxytest.UpHTTP1}, {Down: proxytest.DownH2C, Up: proxytest.UpH2C}} {
		t.Run(m.String(), func(t *testing.T) {
			rec := &proxytest.OTLPReceiver{}
			origin, _ := proxytest.StartOrigin(t, m.Up, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.WriteString(w, "hello")
			}))
			closed := proxytest.ClosedPort(t)
			protocol := "http1"
			if m.Up == proxytest.UpH2C {
				protocol = "h2c"
			}
			yaml := fmt.Sprintf(`admin: { address: 127.0.0.1:0 }
listeners:
  - name: public
    address: 127.0.0.1:0
    routes:
      - { match: { path_prefix: "/down/" }, cluster: down }
      - { match: { path_prefix: "/" }, cluster: app }
clusters:
  - name: app
    protocol: %[1]s
    balancer: round_robin
    discovery: { static: [%[2]q, %[3]q] }
  - name: down
    protocol: %[1]s
    discovery: { static: [%[2]q] }
`, protocol, closed, origin)
			te := startTraced(t, yaml, rec, "protocol: http/protobuf", "endpoint: "+rec.ServeHTTP(t))
			client := proxytest.ModeClient(t, m, nil)
			base := "http://" + te.px.Addr("public").String()
			// Round robin: one of two requests starts on the closed port,
			// and is retried on the origin.
			for range 2 {
				if code, _, _ := do(t, client, mustRequest(t, http.MethodGet, base+"/")); code != http.StatusOK {
					t.Fatalf("GET /: %d, want 200 (retried)", code)
				}
			}
			if code, _, _ := do(t, client, mustRequest(t, http.MethodGet, base+"/down/x")); code != http.StatusBadGateway {
				t.Fatalf("GET /down/x: %d, want 502", code)
			}
			spans := te.spans(t, 7) // 3 server spans, 4 client spans
			byParent := map[string][]*tracepb.Span{}
			var servers []*tracepb.Span
			for _, s := range spans {
				if s.Kind == tracepb.Span_SPAN_KIND_SERVER {
					servers = append(servers, s)
				} else {
					byParent[string(s.ParentSpanId)] = append(byParent[string(s.ParentSpanId)], s)
				}
			}
			if len(servers) != 3 || len(spans) != 7 {
				t.Fatalf("%d spans, %d of them server spans; want 7 and 3", len(spans), len(servers))
			}
			retried, failed := 0, 0
			for _, srv := range servers {
				kids := byParent[string(srv.SpanId)]
				switch attr(srv, "url.path") {
				case "/down/x":
					failed++
					if srv.Status.GetCode() != tracepb.Status_STATUS_CODE_ERROR || attr(srv, "error.type") != "upstream_connect" ||
						attr(srv, "http.response.status_code") != "502" || len(kids) != 1 ||
						kids[0].Status.GetCode() != tracepb.Status_STATUS_CODE_ERROR || attr(kids[0], "error.type") != "upstream_connect" {
						t.Errorf("the 502: server span %v %q %q with %d client spans; want an error, upstream_connect, 502, one failed client span",
							srv.Status, attr(srv, "error.type"), attr(srv, "http.response.status_code"), len(kids))
					}
				case "/":
					if srv.Status.GetCode() == tracepb.Status_STATUS_CODE_ERROR {
						t.Errorf("a 200's server span has error status")
					}
					if len(kids) != 2 {
						continue
					}
					retried++
					first, second := kids[0], kids[1]
					if attr(first, "http.request.resend_count") != "" {
						first, second = second, first
					}
					if attr(first, "error.type") != "upstream_connect" || first.Status.GetCode() != tracepb.Status_STATUS_CODE_ERROR ||
						attr(second, "http.request.resend_count") != "1" || attr(second, "http.response.status_code") != "200" ||
						attr(srv, "ebb.attempts") != "2" {
						t.Errorf("the retried request's client spans: %v / %v", first.Attributes, second.Attributes)
					}
				}
			}
			if retried != 1 || failed != 1 {
				t.Errorf("%d retried requests and %d failed, want 1 and 1", retried, failed)
			}
		})
	}
}

// startTraced starts a Proxy for yaml with telemetry.tracing on (its keys
// in tracing), exporting to rec.
func startTraced(t *testing.T, yaml string, rec *proxytest.OTLPReceiver, tracing ...string) *tracedEnv {
	t.Helper()
	access := filepath.Join(t.TempDir(), "access.log")
	yaml += fmt.Sprintf("telemetry:\n  access_log: { path: %q }\n  tracing:\n    enabled: true\n", access)
	for _, l := range tracing {
		yaml += "    " + l + "\n"
	}
	cfg := loadYAML(t, yaml)
	tel, err := telemetry.New(cfg.Telemetry, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(cfg, downstream.NewRegistry(), metric.NewMeterProvider().Meter("tracing"), tel.Tracer, proxytest.Discard())
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Close()
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		tel.Shutdown(ctx)
	})
	return &tracedEnv{env: &env{px: p}, tel: tel, rec: rec, access: access}
}

// TestTracingSampling: with sampling_ratio 0 a request that starts its
// trace at ebb is not sampled (no span exported) yet its upstream still
// gets a trace context (flags 00), for the services behind to follow;
// one whose client sampled its trace is sampled (parent-based), and one
// whose client did not is not. The access log's trace_id is the trace's
// either way.
func TestTracingSampling(t *testing.T) {
	m := mode{Down: proxytest.DownH1, Up: proxytest.UpHTTP1}
	rec := &proxytest.OTLPReceiver{}
	seen := make(chan string, 3)
	te := newTracedEnv(t, m, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Get("Traceparent")
		io.WriteString(w, "hello")
	}), rec, "endpoint: "+rec.ServeGRPC(t), "sampling_ratio: 0")
	const sampled, unsampled = "11111111111111111111111111111111", "22222222222222222222222222222222"
	for _, tp := range []string{"", "00-" + unsampled + "-00f067aa0ba902b7-00", "00-" + sampled + "-00f067aa0ba902b7-01"} {
		req := mustRequest(t, http.MethodGet, te.Base+"/")
		if tp != "" {
			req.Header.Set("Traceparent", tp)
		}
		roundTrip(t, te.env, req, http.StatusOK)
		got := <-seen
		parts := strings.Split(got, "-")
		if len(parts) != 4 {
			t.Fatalf("the origin saw traceparent %q", got)
		}
		switch tp {
		case "":
			if parts[3] != "00" || parts[1] == strings.Repeat("0", 32) {
				t.Errorf("no client context: the origin saw %q, want a new unsampled trace", got)
			}
		default:
			if parts[1] != strings.Split(tp, "-")[1] || parts[3] != strings.Split(tp, "-")[3] || parts[2] == "00f067aa0ba902b7" {
				t.Errorf("client context %q: the origin saw %q, want the same trace and flags under ebb's span", tp, got)
			}
		}
	}
	spans := te.spans(t, 2)
	if len(spans) != 2 {
		t.Fatalf("%d spans, want 2 (the sampled request's)", len(spans))
	}
	lines := accessLines(t, te.px, te.access, 3)
	for i, want := range []string{"", unsampled, sampled} {
		var rec struct {
			TraceID string `json:"trace_id"`
		}
		if err := json.Unmarshal([]byte(lines[i]), &rec); err != nil {
			t.Fatal(err)
		}
		if len(rec.TraceID) != 32 || want != "" && rec.TraceID != want {
			t.Errorf("access log line %d: trace_id %q, want %q (ebb's new one when empty)", i, rec.TraceID, want)
		}
	}
	for _, s := range spans {
		if hex.EncodeToString(s.TraceId) != sampled {
			t.Errorf("a span of trace %x was exported, want only %s's", s.TraceId, sampled)
		}
	}
}

// TestTracingUpstreamBusy: a request ebb answers 503 because every
// connection allowed to the endpoint is busy has the access log's error
// kind, upstream_busy, as the error.type of both its server span and its
// failed attempt's client span. The spans go over OTLP/HTTP to an endpoint
// given without a path, which is posted to /v1/traces (the receiver
// accepts no other path).
func TestTracingUpstreamBusy(t *testing.T) {
	rec := &proxytest.OTLPReceiver{}
	arrived := make(chan struct{}, 1)
	release := make(chan struct{})
	origin, _ := proxytest.StartOrigin(t, proxytest.UpHTTP1, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			arrived <- struct{}{}
			<-release
		}
		io.WriteString(w, "ok")
	}))
	yaml := fmt.Sprintf(`admin: { address: 127.0.0.1:0 }
listeners:
  - name: public
    address: 127.0.0.1:0
    routes: [{ cluster: app }]
clusters:
  - name: app
    protocol: http1
    max_conns_per_endpoint: 1
    timeouts: { connect: 200ms } # also how long a request waits for a free connection
    discovery: { static: [%q] }
`, origin)
	endpoint := strings.TrimSuffix(rec.ServeHTTP(t), "/v1/traces")
	te := startTraced(t, yaml, rec, "protocol: http/protobuf", "endpoint: "+endpoint)
	base := "http://" + te.px.Addr("public").String()
	held := make(chan int, 1)
	go func() {
		code, _, _ := do(t, &http.Client{}, mustRequest(t, http.MethodGet, base+"/hold"))
		held <- code
	}()
	recv(t, arrived, "the held request at the origin")
	if code, _, _ := do(t, &http.Client{}, mustRequest(t, http.MethodGet, base+"/busy")); code != http.StatusServiceUnavailable {
		t.Fatalf("GET /busy with the endpoint's one connection busy: %d, want 503", code)
	}
	close(release)
	if code := recv(t, held, "the held request's answer"); code != http.StatusOK {
		t.Fatalf("GET /hold: %d, want 200", code)
	}
	var server, client *tracepb.Span
	spans := te.spans(t, 4) // a server span and a client span each
	for _, s := range spans {
		if attr(s, "url.path") == "/busy" {
			server = s
		}
	}
	if server == nil {
		t.Fatal("no server span for /busy")
	}
	for _, s := range spans {
		if s.Kind == tracepb.Span_SPAN_KIND_CLIENT && string(s.ParentSpanId) == string(server.SpanId) {
			client = s
		}
	}
	if client == nil {
		t.Fatal("no client span under /busy's server span")
	}
	if got := attr(server, "error.type"); got != "upstream_busy" || attr(server, "http.response.status_code") != "503" {
		t.Errorf("/busy's server span: error.type %q, status %s; want upstream_busy, 503", got, attr(server, "http.response.status_code"))
	}
	if got := attr(client, "error.type"); got != "upstream_busy" || client.Status.GetCode() != tracepb.Status_STATUS_CODE_ERROR {
		t.Errorf("/busy's client span: error.type %q, status %v; want upstream_busy, an error", got, client.Status)
	}
	logged := ""
	for _, l := range accessLines(t, te.px, te.access, 2) {
		var line struct{ Path, Error string }
		if err := json.Unmarshal([]byte(l), &line); err != nil {
			t.Fatal(err)
		}
		if line.Path == "/busy" {
			logged = line.Error
		}
	}
	if logged != "upstream_busy" {
		t.Errorf("/busy's access log error %q, want upstream_busy", logged)
	}
}
