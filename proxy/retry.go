package proxy

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// Retries: a request the upstream provably did not receive (the connect
// failed, or every allowed connection was busy) is sent to another
// endpoint, whatever its method, at most retries.attempts tries in all,
// and only within the cluster's retry budget. Requests that may have
// reached the upstream are not retried here; the transport itself resends
// idempotent, bodiless requests whose pooled connection turned out closed
// (see transport.roundTrip).

// The retry budget's window, and the retries it allows in any window
// whatever the traffic: a quiet cluster still gets a few.
const (
	retryWindow = 10 * time.Second
	retryFloor  = 10
)

// retryBudget allows retries up to a fraction of the cluster's requests in
// the current window, plus retryFloor. Safe for concurrent use; a window
// rolls over on the first request after it ended (counts from two windows
// may mix for an instant, which is harmless for a budget).
type retryBudget struct {
	ratio   float64
	start   atomic.Int64 // unix nanoseconds: the current window's start
	reqs    atomic.Int64
	retries atomic.Int64
}

// request counts one request at now.
func (b *retryBudget) request(now time.Time) {
	n := now.UnixNano()
	if s := b.start.Load(); n-s > int64(retryWindow) && b.start.CompareAndSwap(s, n) {
		b.reqs.Store(0)
		b.retries.Store(0)
	}
	b.reqs.Add(1)
}

// allow reserves one retry if the budget has room.
func (b *retryBudget) allow() bool {
	limit := int64(b.ratio*float64(b.reqs.Load())) + retryFloor
	if b.retries.Add(1) > limit {
		b.retries.Add(-1)
		return false
	}
	return true
}

// notSent reports whether err says the request never reached the
// upstream, so that sending it elsewhere is safe for any method.
func notSent(err error) bool {
	var ue *upstreamError
	if errors.As(err, &ue) {
		return ue.kind == errConnect || ue.kind == errOverloaded
	}
	kind, client := classifyHTTPError(err)
	return !client && kind == errConnect
}

// isConnectFailure reports whether err is a failed connect to the endpoint.
func isConnectFailure(err error) bool {
	var ue *upstreamError
	if errors.As(err, &ue) {
		return ue.kind == errConnect
	}
	kind, client := classifyHTTPError(err)
	return !client && kind == errConnect
}

// retry decides whether a request that failed with err on ep, after
// attempt tries, goes to another endpoint, and returns it (nil: answer
// with the failure). ctx is the client's side of the request.
func (c *cluster) retry(ctx context.Context, ep *endpoint, attempt int, err error) *endpoint {
	if attempt >= c.cfg.Retries.Attempts || ctx.Err() != nil || !notSent(err) {
		return nil
	}
	next := c.pickOther(ep)
	if next == nil || !c.budget.allow() {
		return nil
	}
	if c.metrics != nil {
		c.metrics.retries.Add(context.Background(), 1, c.metrics.attrs...)
	}
	return next
}

// pickOther picks an endpoint other than ep, or nil when there is none.
func (c *cluster) pickOther(ep *endpoint) *endpoint {
	eps := *c.endpoints.Load()
	if len(eps) < 2 {
		return nil
	}
	for range 3 {
		if next := c.pick(); next != ep && next != nil {
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

// exchangeH1 sends req to ep through the HTTP/1 transport, and to other
// endpoints as retry allows, recording each outcome for passive health.
// It returns the endpoint that answered, or the last one tried with the
// error. ctx is the client's side of the request.
func (c *cluster) exchangeH1(ctx context.Context, ep *endpoint, req *fasthttp.Request, resp *fasthttp.Response, log *slog.Logger) (*endpoint, error) {
	for attempt := 1; ; attempt++ {
		ep.inflight.Add(1) // the transport takes it off
		err := ep.rt.roundTrip(ctx, req, resp)
		if err == nil {
			c.outcome(ep, false, resp.StatusCode())
			return ep, nil
		}
		c.outcome(ep, isConnectFailure(err), 0)
		next := c.retry(ctx, ep, attempt, err)
		if next == nil {
			return ep, err
		}
		log.Debug("retrying on another endpoint", "cluster", c.name, "endpoint", ep.addr, "next", next.addr, "err", err)
		resp.Reset()
		ep = next
	}
}

// exchangeHTTP is exchangeH1 for net/http upstreams. On success the
// caller calls ep.release once the response body is closed. keep, if not
// nil, adjusts each retry's copy of the request.
func (c *cluster) exchangeHTTP(ctx context.Context, ep *endpoint, out *http.Request, keep func(*http.Request), log *slog.Logger) (*http.Response, *endpoint, error) {
	for attempt := 1; ; attempt++ {
		ep.inflight.Add(1)
		resp, err := ep.ht.RoundTrip(out)
		if err == nil {
			c.outcome(ep, false, resp.StatusCode)
			return resp, ep, nil
		}
		ep.release()
		c.outcome(ep, isConnectFailure(err), 0)
		next := c.retry(ctx, ep, attempt, err)
		if next == nil {
			return nil, ep, err
		}
		log.Debug("retrying on another endpoint", "cluster", c.name, "endpoint", ep.addr, "next", next.addr, "err", err)
		out = out.Clone(out.Context())
		out.URL.Host = next.addr
		if keep != nil {
			keep(out)
		}
		ep = next
	}
}
