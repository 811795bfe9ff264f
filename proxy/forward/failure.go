package forward

import (
	"context"
	"errors"
	"net/http"

	"github.com/ebb-proxy/ebb/proxy/cluster"
	"github.com/ebb-proxy/ebb/proxy/route"
	"github.com/ebb-proxy/ebb/proxy/upstream"
)

// Messages of the answers ebb makes itself.
const (
	MsgNoEndpoint   = "ebb: no upstream endpoint available\n"
	MsgBodyTooLarge = "ebb: request body too large\n"
	MsgBadBody      = "ebb: could not read the request body\n"
	MsgBodyTimeout  = "ebb: the request body stalled or was too slow\n"
	MsgConnect      = "ebb: CONNECT is not supported\n"
	// MsgBadHost: a Host or :authority that is no host[:port] (see
	// route.ValidHost).
	MsgBadHost = "ebb: invalid host in the request (Host or :authority)\n"
	// MsgEscapedSlash and MsgBadPath: a path the listener's paths block
	// refuses (escaped_slashes: reject; normalize).
	MsgEscapedSlash = "ebb: encoded slash or backslash (%2F, %5C) in the request path\n"
	MsgBadPath      = "ebb: invalid percent-encoding in the request path\n"
	// MsgOverloaded: the listener's limits.max_in_flight.
	MsgOverloaded = "ebb: too many requests in flight, retry later\n"
	// MsgClusterBusy: the cluster's max_in_flight.
	MsgClusterBusy = "ebb: too many requests in flight to this service, retry later\n"
)

// RetryAfter is the Retry-After of every 503 ebb makes (no endpoint,
// every connection busy, too many requests in flight): the seconds after
// which a client may try again.
const RetryAfter = "1"

// StatusClientClosed is recorded for requests whose client left before
// the answer (it never reaches the client), as nginx logs it.
const StatusClientClosed = 499

// Failure classifies a failed request, logs and counts it, and returns
// the status and message to answer with. ctx is the client's side of the
// request: when it has ended, the client left and nothing is blamed on
// the upstream; when the client failed to send its body (body.Failed),
// the answer is a 4xx. ep is the endpoint last tried (nil: none was).
func (l *Listener) Failure(ctx context.Context, rt *route.Route, ep *cluster.Endpoint, body *upstream.Body, err error) (int, string) {
	if ctx != nil && ctx.Err() != nil {
		// The client closed the request (a body that could not be read
		// then is its doing too).
		return StatusClientClosed, MsgClientClosed
	}
	if err := body.Failed(); err != nil {
		if errors.Is(err, upstream.ErrBodyTooLarge) {
			return http.StatusRequestEntityTooLarge, MsgBodyTooLarge
		}
		if upstream.IsTimeout(err) {
			return http.StatusRequestTimeout, MsgBodyTimeout
		}
		return http.StatusBadRequest, MsgBadBody
	}
	kind := upstream.KindOf(err)
	rt.Cluster.Metrics().UpstreamError(kind)
	status, msg := upstreamAnswer(kind)
	addr := ""
	if ep != nil {
		addr = ep.Addr()
	}
	l.Log.Warn("upstream error", "listener", l.Config.Name, "cluster", rt.Cluster.Name(),
		"endpoint", addr, "kind", kind.String(), "status", status, "err", err)
	return status, msg
}

// upstreamAnswer returns the status and message ebb answers an upstream
// failure of kind with. The message's error kind (errorKinds) is the
// kind's ErrorKind, which its client span's error.type says too.
func upstreamAnswer(kind upstream.Kind) (int, string) {
	switch kind {
	case upstream.KindConnect:
		return http.StatusBadGateway, MsgUpstreamConnect
	case upstream.KindOverloaded:
		return http.StatusServiceUnavailable, MsgUpstreamBusy
	case upstream.KindTimeout:
		return http.StatusGatewayTimeout, MsgUpstreamTimeout
	case upstream.KindRefused:
		return http.StatusServiceUnavailable, MsgUpstreamRefused
	case upstream.KindInvalid:
		return http.StatusBadGateway, MsgUpstreamInvalid
	}
	return http.StatusBadGateway, MsgUpstreamFailed
}
