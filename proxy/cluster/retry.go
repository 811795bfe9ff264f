package cluster

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/ebb-proxy/ebb/proxy/headers"
	"github.com/ebb-proxy/ebb/proxy/tracing"
	"github.com/ebb-proxy/ebb/proxy/upstream"
)

// Retries: a request that failed upstream is sent to another endpoint,
// at most retries.attempts tries in all and only within the cluster's
// retry budget, when that is safe (see upstream.Resendable). The transports
// themselves first send a request again on a fresh connection to the same
// endpoint when a pooled one turns out to have been closed by the upstream
// while idle (see upstream.H1); ebb's HTTP/2 client sends nothing again
// by itself.

// The retry budget's window, and the retries it allows in any window
// whatever the traffic: a quiet cluster still gets a few.
const (
	retryWindow = 10 * time.Second
	retryFloor  = 10
)

// budget allows retries up to a fraction of the cluster's requests in
// the current window, plus retryFloor. Safe for concurrent use; a window
// rolls over on the first request after it ended (counts from two windows
// may mix for an instant, which is harmless for a budget).
type budget struct {
	ratio   float64
	start   atomic.Int64 // unix nanoseconds: the current window's start
	reqs    atomic.Int64
	retries atomic.Int64
}

// request counts one request at now.
func (b *budget) request(now time.Time) {
	n := now.UnixNano()
	if s := b.start.Load(); n-s > int64(retryWindow) && b.start.CompareAndSwap(s, n) {
		b.reqs.Store(0)
		b.retries.Store(0)
	}
	b.reqs.Add(1)
}

// allow reserves one retry if the budget has room.
func (b *budget) allow() bool {
	limit := int64(b.ratio*float64(b.reqs.Load())) + retryFloor
	if b.retries.Add(1) > limit {
		b.retries.Add(-1)
		return false
	}
	return true
}

// retry decides whether a request that failed with err on ep, after
// attempt tries, goes to another endpoint, and returns it (nil: answer
// with the failure). ctx is the client's side of the request; idempotent
// and replayable are upstream.Resendable's.
func (c *Cluster) retry(ctx context.Context, ep *Endpoint, attempt int, err error, idempotent, replayable bool) *Endpoint {
	if attempt >= c.cfg.Retries.Attempts || ctx.Err() != nil || !upstream.Resendable(err, idempotent, replayable) {
		return nil
	}
	next := c.pickOther(ep)
	if next == nil && errors.Is(err, upstream.ErrResend) {
		// The only endpoint refused or went away: net/http sends it again
		// on a new connection to it, as it would have itself.
		next = ep
	}
	if next == nil {
		return nil
	}
	if !c.budget.allow() {
		c.metrics.RetryDenied()
		return nil
	}
	c.metrics.Retry()
	return next
}

// pickOther picks an endpoint other than ep, or nil when there is none.
func (c *Cluster) pickOther(ep *Endpoint) *Endpoint {
	eps := *c.endpoints.Load()
	if len(eps) < 2 {
		return nil
	}
	for range 3 {
		if next := c.Pick(); next != ep && next != nil {
			return next
		}
	}
	for _, next := range eps {
		if next != ep {
			return next
		}
	}
	return nil
}

// Trip is one request's way upstream through the exchange loops.
type Trip struct {
	// Attempts is how many exchanges were tried.
	Attempts int
	// Tracer, if set, gives each attempt a client span, a child of the
	// span in Ctx, whose trace context goes upstream with the attempt.
	Tracer *tracing.Tracer
	Ctx    context.Context
}

// endAttempt ends an attempt's client span (nil: none), with the status
// that came back or the error.
func endAttempt(span trace.Span, status int, err error) {
	if span == nil {
		return
	}
	failure := ""
	if err != nil {
		failure = upstream.KindOf(err).ErrorKind()
	}
	tracing.EndAttempt(span, status, failure)
}

// ExchangeH1 sends req to ep through the HTTP/1 transport, and to other
// endpoints as retry allows, recording each outcome for passive health.
// It returns the endpoint that answered, or the last one tried with the
// error. ctx is the client's side of the request; trip counts the
// attempts.
func (c *Cluster) ExchangeH1(ctx context.Context, ep *Endpoint, req *fasthttp.Request, resp *fasthttp.Response, trip *Trip, log *slog.Logger) (*Endpoint, error) {
	// A streamed body is consumed by the first attempt that writes it; a
	// request whose body was never written keeps it (upstream.NotSent).
	idempotent := upstream.IsIdempotent(req)
	for attempt := 1; ; attempt++ {
		trip.Attempts = attempt
		streamed := req.BodyStream() != nil
		ep = c.claim(ep) // the transport takes the count off
		var span trace.Span
		if trip.Tracer != nil {
			span = trip.Tracer.StartAttempt(trip.Ctx, headers.FastCarrier{H: &req.Header}, tracing.Method(req.Header.Method()), c.name, ep.addr, attempt)
		}
		sent := time.Now()
		err := ep.rt.RoundTrip(ctx, req, resp)
		took := time.Since(sent)
		c.metrics.Attempt(took)
		endAttempt(span, resp.StatusCode(), err)
		if err == nil {
			c.outcome(ep, nil, resp.StatusCode(), took)
			return ep, nil
		}
		c.outcome(ep, err, 0, took)
		next := c.retry(ctx, ep, attempt, err, idempotent, !streamed || upstream.NotSent(err))
		if next == nil {
			return ep, err
		}
		log.Debug("retrying on another endpoint", "cluster", c.name, "endpoint", ep.addr, "next", next.addr, "err", err)
		resp.Reset()
		ep = next
	}
}

// ExchangeHTTP is ExchangeH1 for requests in net/http's form, to an h2c,
// h2 or auto cluster: through ebb's HTTP/2 client, or its HTTP/1
// transport for an auto endpoint that speaks HTTP/1.1 (see
// upstream.RoundTripHTTP). On success the caller calls ep.Release once
// the response body is closed. body is the request's body (nil: none);
// keep, if not nil, adjusts each retry's copy of the request. Neither
// client sends a request again by itself on another connection, but the
// HTTP/1 transport after the keep-alive race, when that is safe: the
// retry policy decides the rest.
func (c *Cluster) ExchangeHTTP(ctx context.Context, ep *Endpoint, out *http.Request, body *upstream.Body, keep func(*http.Request), trip *Trip, log *slog.Logger) (*http.Response, *Endpoint, error) {
	idempotent := upstream.IsIdempotentMethod(out.Method)
	for attempt := 1; ; attempt++ {
		trip.Attempts = attempt
		var a *upstream.Attempt
		if body != nil {
			a = body.StartAttempt()
		}
		if claimed := c.claim(ep); claimed != ep {
			ep = claimed
			out = redirect(ctx, out, ep, keep)
		}
		var span trace.Span
		if trip.Tracer != nil {
			span = trip.Tracer.StartAttempt(trip.Ctx, propagation.HeaderCarrier(out.Header), out.Method, c.name, ep.addr, attempt)
		}
		sent := time.Now()
		var resp *http.Response
		var err error
		if ep.speaksH1.Load() {
			resp, err = upstream.RoundTripHTTP(ctx, ep.rt, out, a)
		} else {
			out.Body = nil
			if a != nil {
				out.Body = a
			}
			resp, err = ep.h2.RoundTrip(out)
			if errors.Is(err, errSpeaksHTTP1) {
				// An auto endpoint that speaks HTTP/1.1: this attempt goes
				// through the HTTP/1 transport, as those after it will.
				// Nothing was sent; the pool closed the body it was
				// given, of which nothing was read.
				if body != nil {
					a = body.StartAttempt()
				}
				resp, err = upstream.RoundTripHTTP(ctx, ep.rt, out, a)
			}
		}
		took := time.Since(sent)
		c.metrics.Attempt(took)
		if err == nil {
			if bad := upstream.CheckHTTPResponse(resp); bad != nil {
				resp.Body.Close()
				resp, err = nil, &upstream.Error{Kind: upstream.KindInvalid, Err: bad}
			}
		}
		if err == nil {
			endAttempt(span, resp.StatusCode, nil)
			c.outcome(ep, nil, resp.StatusCode, took)
			return resp, ep, nil
		}
		err = upstream.ClassifyRoundTrip(err)
		endAttempt(span, 0, err)
		ep.Release()
		c.outcome(ep, err, 0, took)
		// The attempt is over whatever comes next: its body is no longer
		// read for it, and a body partly read cannot go again.
		replayable := a == nil || a.End(false) && body.Replayable()
		next := c.retry(ctx, ep, attempt, err, idempotent, replayable)
		if next == nil {
			return nil, ep, err
		}
		log.Debug("retrying on another endpoint", "cluster", c.name, "endpoint", ep.addr, "next", next.addr, "err", err)
		out = redirect(ctx, out, next, keep)
		ep = next
	}
}

// redirect returns a copy of out addressed to ep, adjusted by keep (if
// not nil).
func redirect(ctx context.Context, out *http.Request, ep *Endpoint, keep func(*http.Request)) *http.Request {
	out = out.Clone(ctx)
	out.URL.Host = ep.addr
	if keep != nil {
		keep(out)
	}
	return out
}
