// Package tracing makes ebb's spans on the request path: a server span
// per request, ended when its response has been relayed, and a client
// span per upstream attempt, so that retries show. The W3C trace context
// (traceparent, tracestate) is taken from the client's request and given
// to each upstream attempt as the context of its client span; baggage
// passes through as the end-to-end field it is. A nil *Tracer is tracing
// off: the request path then does not call in here at all.
package tracing

import (
	"context"
	"encoding/hex"
	"net"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/ebb-proxy/ebb/proxy/access"
)

// Scope is the instrumentation scope of ebb's spans.
const Scope = "github.com/ebb-proxy/ebb"

// Tracer starts ebb's spans.
type Tracer struct {
	t    trace.Tracer
	prop propagation.TraceContext
}

// New returns a Tracer on tp, or nil (tracing off) when tp is nil.
func New(tp trace.TracerProvider) *Tracer {
	if tp == nil {
		return nil
	}
	return &Tracer{t: tp.Tracer(Scope)}
}

// Carrier is a request's header as the propagator reads and writes it
// (names in lower case).
type Carrier = propagation.TextMapCarrier

// Request is what a server span starts with. Its fields are the
// request's bytes, converted only for a span that is sampled.
type Request struct {
	Method    []byte
	Path      []byte // without the query
	Scheme    string // http or https
	Authority []byte // Host or :authority
	Protocol  string // network.protocol.version: 1.0, 1.1, 2
	Client    []byte // the client's address
	UserAgent []byte
}

// Method returns a request method as a string, without allocating for
// the common ones (span names).
func Method(m []byte) string {
	switch string(m) {
	case "GET":
		return "GET"
	case "POST":
		return "POST"
	case "PUT":
		return "PUT"
	case "DELETE":
		return "DELETE"
	case "HEAD":
		return "HEAD"
	case "PATCH":
		return "PATCH"
	case "OPTIONS":
		return "OPTIONS"
	}
	return string(m)
}

// The span kinds' options, made once: made per span, each would be an
// allocation.
var (
	serverKind = trace.WithSpanKind(trace.SpanKindServer)
	clientKind = trace.WithSpanKind(trace.SpanKindClient)
)

// StartServer starts the server span of a request that arrived at start,
// as the child of the trace context its header carries (if any). It
// returns the context client spans are started under, and the span's
// end, which the request's access entry calls (access.Entry.Ender).
func (t *Tracer) StartServer(h Carrier, r Request, start time.Time) (context.Context, *Server) {
	ctx := t.prop.Extract(context.Background(), h)
	ctx, span := t.t.Start(ctx, Method(r.Method), serverKind, trace.WithTimestamp(start))
	if span.IsRecording() {
		attrs := []attribute.KeyValue{
			attribute.String("http.request.method", Method(r.Method)),
			attribute.String("url.path", string(r.Path)),
			attribute.String("url.scheme", r.Scheme),
			attribute.String("network.protocol.version", r.Protocol),
			attribute.String("client.address", string(r.Client)),
		}
		if host, port, ok := splitHostPort(string(r.Authority)); ok {
			attrs = append(attrs, attribute.String("server.address", host), attribute.Int("server.port", port))
		} else if len(r.Authority) > 0 {
			attrs = append(attrs, attribute.String("server.address", string(r.Authority)))
		}
		if len(r.UserAgent) > 0 {
			attrs = append(attrs, attribute.String("user_agent.original", string(r.UserAgent)))
		}
		span.SetAttributes(attrs...)
	}
	return ctx, &Server{span: span}
}

// Server is a request's server span until its access entry ends.
type Server struct {
	span trace.Span
}

// TraceID writes the span's trace id in hex (the access log's trace_id)
// to buf and returns it. A span not sampled has one too: it goes on
// upstream, and the upstream's logs can be joined with ebb's by it.
func (s *Server) TraceID(buf *[32]byte) []byte {
	id := s.span.SpanContext().TraceID()
	hex.Encode(buf[:], id[:])
	return buf[:]
}

// Ended ends the span with what the entry knows of the request's end
// (access.Ender).
func (s *Server) Ended(e *access.Entry, at time.Time) {
	span := s.span
	if !span.IsRecording() {
		return // ending it would do nothing
	}
	span.SetAttributes(
		attribute.Int("http.response.status_code", e.Status),
		attribute.Int64("http.request.body.size", e.RequestBytes),
		attribute.Int64("http.response.body.size", e.ResponseBytes),
		attribute.String("ebb.listener", e.Listener),
		attribute.String("ebb.cluster", e.Cluster),
		attribute.String("ebb.upstream", e.Upstream),
		attribute.Int("ebb.attempts", e.Attempts),
	)
	if id := e.Get(access.RequestID); len(id) > 0 {
		span.SetAttributes(attribute.StringSlice("http.request.header.x-request-id", []string{string(id)}))
	}
	if e.Draining {
		span.SetAttributes(attribute.Bool("ebb.draining", true))
	}
	if e.Error != "" {
		span.SetAttributes(attribute.String("error.type", e.Error))
	}
	if e.Status >= 500 {
		span.SetStatus(codes.Error, e.Error)
	}
	span.End(trace.WithTimestamp(at))
}

// StartAttempt starts the client span of attempt n (from 1) of a request
// to the endpoint at addr, under ctx (StartServer's), and writes its
// trace context into the upstream request's header h. Under a server span
// not sampled, whose children would not be either, it starts none (nil)
// and writes the server span's context: the upstream follows the same
// trace and the same decision.
func (t *Tracer) StartAttempt(ctx context.Context, h Carrier, method, cluster, addr string, n int) trace.Span {
	if !trace.SpanFromContext(ctx).IsRecording() {
		t.prop.Inject(ctx, h)
		return nil
	}
	ctx, span := t.t.Start(ctx, method, clientKind)
	if span.IsRecording() {
		attrs := []attribute.KeyValue{
			attribute.String("http.request.method", method),
			attribute.String("ebb.cluster", cluster),
		}
		if host, port, ok := splitHostPort(addr); ok {
			attrs = append(attrs, attribute.String("server.address", host), attribute.Int("server.port", port))
		}
		if n > 1 {
			attrs = append(attrs, attribute.Int("http.request.resend_count", n-1))
		}
		span.SetAttributes(attrs...)
	}
	t.prop.Inject(ctx, h)
	return span
}

// EndAttempt ends an attempt's client span (nil: none): with the
// upstream's status (its response headers have arrived), or with the
// kind of failure.
func EndAttempt(span trace.Span, status int, failure string) {
	if span == nil {
		return
	}
	if span.IsRecording() {
		if failure != "" {
			span.SetAttributes(attribute.String("error.type", failure))
			span.SetStatus(codes.Error, failure)
		} else {
			span.SetAttributes(attribute.Int("http.response.status_code", status))
			if status >= 500 {
				span.SetStatus(codes.Error, "")
			}
		}
	}
	span.End()
}

func splitHostPort(hp string) (string, int, bool) {
	host, port, err := net.SplitHostPort(hp)
	if err != nil {
		return "", 0, false
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		return "", 0, false
	}
	return host, p, true
}
