package proxy

import (
	"context"
	"errors"
	"sync/atomic"
	"time"
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
