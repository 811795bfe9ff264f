package proxy

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptrace"
	"sync/atomic"
	"time"

	"github.com/ebb-proxy/ebb/config"
	"github.com/valyala/fasthttp"
)

// Retries: a request that failed upstream is sent to another endpoint,
// at most retries.attempts tries in all and only within the cluster's
// retry budget, when that is safe (see resendable). The transports
// themselves first send a request again on a fresh connection to the same
// endpoint when a pooled one turns out to have been closed by the upstream
// while idle (see transport.roundTrip and net/http's Transport).

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

// errResend is what the GetBody of a request to a net/http upstream
// returns: net/http asks for the body again only when it judged the
// request safe to send again (nothing written, an HTTP/2 stream refused or
// beyond the upstream's GOAWAY, an idempotent request on a reused
// connection closed before any response byte). Rather than let it retry on
// the same endpoint, the request comes back to exchangeHTTP, which sends
// it to another one. net/http's idempotent includes any request with an
// Idempotency-Key or X-Idempotency-Key header (over HTTP/1.1, to an auto
// upstream): its client vouches for it, and so ebb lets it go again.
var errResend = errors.New("proxy: upstream did not process the request")

// resendGetBody is the GetBody of requests to net/http upstreams.
func resendGetBody() (io.ReadCloser, error) { return nil, errResend }

// notSent reports whether err says the request never reached the
// upstream.
func notSent(err error) bool {
	var ue *upstreamError
	if errors.As(err, &ue) {
		return ue.kind == errConnect || ue.kind == errOverloaded
	}
	if errors.Is(err, errResend) {
		return true
	}
	kind, client := classifyHTTPError(err)
	return !client && kind == errConnect
}

// resendable reports whether a request that failed with err may be sent
// to another endpoint. idempotent says whether its method is; replayable
// whether its body (if any) can be sent again: it was buffered, or not a
// byte of it has been read. A request the upstream did not receive goes
// again whatever its method; one whose connection or stream ended before
// a response header, only if idempotent or unreceived (see safeAgain); a
// partial response never.
func resendable(err error, idempotent, replayable bool) bool {
	if !replayable {
		return false
	}
	var ue *upstreamError
	if errors.As(err, &ue) && ue.unanswered {
		return safeAgain(ue, idempotent)
	}
	return notSent(err)
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
// with the failure). ctx is the client's side of the request; idempotent
// and replayable are resendable's.
func (c *cluster) retry(ctx context.Context, ep *endpoint, attempt int, err error, idempotent, replayable bool) *endpoint {
	if attempt >= c.cfg.Retries.Attempts || ctx.Err() != nil || !resendable(err, idempotent, replayable) {
		return nil
	}
	next := c.pickOther(ep)
	if next == nil && errors.Is(err, errResend) {
		// The only endpoint refused or went away: net/http sends it again
		// on a new connection to it, as it would have itself.
		next = ep
	}
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
	// A streamed body is consumed by the first attempt that writes it; a
	// request whose body was never written keeps it (notSent).
	idempotent := isIdempotent(req)
	for attempt := 1; ; attempt++ {
		streamed := req.BodyStream() != nil
		ep.inflight.Add(1) // the transport takes it off
		err := ep.rt.roundTrip(ctx, req, resp)
		if err == nil {
			c.outcome(ep, false, resp.StatusCode())
			return ep, nil
		}
		c.outcome(ep, isConnectFailure(err), 0)
		next := c.retry(ctx, ep, attempt, err, idempotent, !streamed || notSent(err))
		if next == nil {
			return ep, err
		}
		log.Debug("retrying on another endpoint", "cluster", c.name, "endpoint", ep.addr, "next", next.addr, "err", err)
		resp.Reset()
		ep = next
	}
}

// exchangeHTTP is exchangeH1 for net/http upstreams. On success the
// caller calls ep.release once the response body is closed. body is the
// request's body (nil: none); keep, if not nil, adjusts each retry's copy
// of the request.
//
// net/http's Transport sends a request again by itself, on the same
// endpoint, when it judges that safe; left alone it makes up to seven
// tries, pausing up to 32 s between them, against an endpoint that
// refuses every stream. Such requests are therefore arranged to come back
// here instead (see resendOnce), and the retry policy decides.
func (c *cluster) exchangeHTTP(ctx context.Context, ep *endpoint, out *http.Request, body *reqBody, keep func(*http.Request), log *slog.Logger) (*http.Response, *endpoint, error) {
	idempotent := isIdempotentMethod(out.Method)
	h2 := c.cfg.Protocol != config.ProtocolAuto // auto may be HTTP/1.1
	for attempt := 1; ; attempt++ {
		var a *bodyAttempt
		if body != nil {
			a = body.attempt()
		}
		var cause context.Context
		out, cause = resendOnce(out, a, idempotent, h2)
		ep.inflight.Add(1)
		resp, err := ep.ht.RoundTrip(out)
		if err == nil {
			c.outcome(ep, false, resp.StatusCode)
			return resp, ep, nil
		}
		err = classifyRoundTrip(err, cause)
		ep.release()
		c.outcome(ep, isConnectFailure(err), 0)
		// The attempt is over whatever comes next: its body is no longer
		// read for it, and a body partly read cannot go again.
		replayable := a == nil || a.end(false) && body.replayable()
		next := c.retry(ctx, ep, attempt, err, idempotent, replayable)
		if next == nil {
			return nil, ep, err
		}
		log.Debug("retrying on another endpoint", "cluster", c.name, "endpoint", ep.addr, "next", next.addr, "err", err)
		out = out.Clone(ctx)
		out.URL.Host = next.addr
		if keep != nil {
			keep(out)
		}
		ep = next
	}
}

// classifyRoundTrip turns a net/http RoundTrip error into what the retry
// policy needs: errResend when net/http wanted to send the request again
// (cause is resendOnce's), an unanswered upstreamError when the
// connection or stream failed before a response header (RoundTrip
// returns no error once one has arrived), and err itself otherwise.
func classifyRoundTrip(err error, cause context.Context) error {
	if errors.Is(err, errResend) || cause != nil && errors.Is(context.Cause(cause), errResend) {
		return errResend
	}
	if kind, client := classifyHTTPError(err); kind == errBroken && !client {
		return &upstreamError{kind: errBroken, unanswered: true, err: err}
	}
	return err
}

// resendOnce prepares one attempt of out so that, when net/http's
// Transport would send it again, it fails with errResend instead:
//
//   - with a body (a, its attempt), GetBody returns errResend. To an auto
//     upstream the attempt also goes with its connection (carryAttempt);
//   - without one, a non-idempotent request to an HTTP/2 upstream (h2,
//     h2c) gets an empty body with that GetBody (it goes out as HEADERS
//     and an empty DATA frame ending the stream). Not to an auto one,
//     which may speak HTTP/1.1: there the body would go out chunked. net/http
//     sends such a request again by itself only when the upstream did not
//     process it (a refused stream, a connection that failed before it was
//     written), on the same endpoint;
//   - an idempotent one without a body, for which net/http asks no
//     GetBody, is tracked: when net/http takes a connection for it a
//     second time, its context is cancelled with errResend as the cause,
//     returned as cause. That second send may have started; for an
//     idempotent request, no harm. Its cancel is not called otherwise:
//     the response body is read under that context, which ends with its
//     parent.
func resendOnce(out *http.Request, a *bodyAttempt, idempotent, h2 bool) (*http.Request, context.Context) {
	switch {
	case a != nil:
		out.Body, out.GetBody = a, resendGetBody
		if !h2 {
			out = out.WithContext(httptrace.WithClientTrace(out.Context(), carryAttempt(a)))
		}
	case !idempotent && h2:
		out.Body, out.GetBody, out.ContentLength = emptyBody{}, resendGetBody, 0
	case !idempotent:
		// As it is: no body, Content-Length: 0 on HTTP/1.1.
	default:
		ctx, cancel := context.WithCancelCause(out.Context())
		var conns atomic.Int32
		ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(httptrace.GotConnInfo) {
			if conns.Add(1) == 2 {
				cancel(errResend)
			}
		}})
		return out.WithContext(ctx), ctx
	}
	return out, nil
}

// emptyBody is a body with nothing in it that net/http takes for one of
// unknown length (http.NoBody it would take for none).
type emptyBody struct{}

func (emptyBody) Read([]byte) (int, error) { return 0, io.EOF }
func (emptyBody) Close() error             { return nil }
