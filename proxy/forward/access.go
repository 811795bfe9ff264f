package forward

import (
	"time"

	"github.com/ebb-proxy/ebb/proxy/access"
	"github.com/ebb-proxy/ebb/proxy/route"
	"github.com/ebb-proxy/ebb/proxy/upstream"
)

// Messages of the upstream failures ebb answers for.
const (
	MsgUpstreamFailed  = "ebb: upstream failed\n"
	MsgUpstreamConnect = "ebb: upstream connect failed\n"
	MsgUpstreamBusy    = "ebb: upstream connection limit reached\n"
	MsgUpstreamTimeout = "ebb: upstream timed out\n"
	MsgUpstreamRefused = "ebb: upstream refused the request\n"
	MsgUpstreamInvalid = "ebb: invalid response from upstream\n"
	MsgClientClosed    = "ebb: client closed the request\n"
	MsgNoRoute         = "ebb: no route for this request\n"
)

// errorKinds names, for the access log's error field, the answers ebb
// makes itself, by their message: each message is one kind of failure.
var errorKinds = map[string]string{
	MsgNoRoute:      "no_route",
	MsgNoEndpoint:   "no_endpoint",
	MsgOverloaded:   "overloaded",
	MsgClusterBusy:  "cluster_busy",
	MsgClientClosed: "client_closed",
	MsgBodyTooLarge: "body_too_large",
	MsgBadBody:      "bad_body",
	MsgBodyTimeout:  "body_timeout",
	// The upstream failures' kinds, as their client spans' error.type.
	MsgUpstreamFailed:  upstream.KindBroken.ErrorKind(),     // upstream_broken
	MsgUpstreamConnect: upstream.KindConnect.ErrorKind(),    // upstream_connect
	MsgUpstreamBusy:    upstream.KindOverloaded.ErrorKind(), // upstream_busy
	MsgUpstreamTimeout: upstream.KindTimeout.ErrorKind(),    // upstream_timeout
	MsgUpstreamRefused: upstream.KindRefused.ErrorKind(),    // upstream_refused
	MsgUpstreamInvalid: upstream.KindInvalid.ErrorKind(),    // upstream_invalid
}

// errorKind returns the access log's error field for an answer of ebb's
// own: the message's kind, else bad_request for a 4xx (a request ebb
// refused) and ebb_error for the rest.
func errorKind(status int, msg string) string {
	if k, ok := errorKinds[msg]; ok {
		return k
	}
	if status >= 400 && status < 500 { // a request ebb refused
		return "bad_request"
	}
	return "ebb_error"
}

// begin returns the access log entry of a request that arrived at start,
// or nil when neither the access log nor tracing is on (with tracing
// alone, the entry writes no line: it ends the server span).
func (l *Listener) begin(snap *route.Snapshot, start time.Time) *access.Entry {
	if snap.Access == nil && snap.Tracer == nil {
		return nil
	}
	e := access.Begin(snap.Access, start)
	e.Listener = l.Config.Name
	e.Draining = l.Registry.Draining()
	return e
}
