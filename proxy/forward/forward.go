// Package forward is the skeleton every request follows through ebb,
// whichever engine received it and whichever transport carries it
// upstream: refuse what cannot be routed, route, prepare, pick an
// endpoint (503 when there is none), count it for the retry budget,
// exchange (with retries), map a failure to the status the client gets,
// then record metrics and the access log line. The engines (package h1,
// package h2) supply the steps that differ as a Call.
package forward

import (
	"context"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/ebb-proxy/ebb/config"
	"github.com/ebb-proxy/ebb/proxy/access"
	"github.com/ebb-proxy/ebb/proxy/cluster"
	"github.com/ebb-proxy/ebb/proxy/downstream"
	"github.com/ebb-proxy/ebb/proxy/metrics"
	"github.com/ebb-proxy/ebb/proxy/route"
	"github.com/ebb-proxy/ebb/proxy/tracing"
	"github.com/ebb-proxy/ebb/proxy/upstream"
)

// Listener is what every request of one listener shares: its
// configuration, where its routes are, and where it reports. Its fields
// are read-only once requests are served; the snapshot it points to is
// swapped whole by its owner.
type Listener struct {
	// Config is the listener's configuration.
	Config config.Listener
	// Index is the listener's place in the snapshot's tables.
	Index int
	// Snapshot holds the current routes and clusters.
	Snapshot *atomic.Pointer[route.Snapshot]
	// Registry knows every downstream connection and the drain's state.
	Registry *downstream.Registry
	// Log receives upstream errors (the access log is the snapshot's).
	Log *slog.Logger

	inFlight atomic.Int64 // requests in Serve, for limits.max_in_flight
}

// Table returns the listener's current routing table.
func (l *Listener) Table() *route.Table { return l.Snapshot.Load().Tables[l.Index] }

// InFlight returns the listener's requests being served.
func (l *Listener) InFlight() int64 { return l.inFlight.Load() }

// Call is one request on its way through the skeleton, as one engine
// carries it. Its methods are the steps that differ between engines and
// transports; they run on the request's goroutine, in the order Serve
// documents.
type Call interface {
	// Refuse returns the status and message to answer with when the
	// request cannot be routed at all (CONNECT, a missing Host), or 0.
	Refuse() (status int, msg string)
	// SetPath has the request go upstream with path, the listener's
	// rewrite of the path it was sent with (route.Table.Paths), the
	// query staying as sent; the access log keeps the client's. It is
	// called before Prepare, only when the rewrite changed the path;
	// path is valid during the call only.
	SetPath(path []byte)
	// Prepare readies the request for rt's cluster: limits, the body,
	// the header rules, the choice between an upgrade and an exchange.
	// It returns the status and message to answer with instead, or 0.
	Prepare(rt *route.Route) (status int, msg string)
	// Send sends the request to ep, and to other endpoints as the
	// cluster's retry policy allows, and relays the response. It returns
	// the status relayed, or the endpoint last tried and the error.
	Send(rt *route.Route, ep *cluster.Endpoint) (status int, last *cluster.Endpoint, err error)
	// Reply answers with a response ebb makes itself, replacing any.
	Reply(status int, msg string)
	// Body returns the request's body as Prepare wrapped it (nil: none).
	Body() *upstream.Body
	// Context returns the client's side of the request: it ends when the
	// client gives up (an HTTP/2 stream reset), never at a graceful
	// shutdown. HTTP/1 requests have one that never ends.
	Context() context.Context
	// Finish runs once the request has been answered (the response may
	// still be streaming), with the status sent. e is the request's
	// access log entry (nil: the log is off), with the skeleton's fields
	// set: Finish sets the engine's (the request's fields, the body
	// bytes, the attempts) and ends it, at once or, for a response whose
	// body is still to be relayed, when it has been.
	Finish(status int, e *access.Entry)
	// Trip returns the request's way through the exchange loops.
	Trip() *cluster.Trip
	// Traced returns the request's header, from which its trace context
	// is read, and what its server span starts with; it is called only
	// when tracing is on.
	Traced() (tracing.Carrier, tracing.Request)
}

// Serve runs one request through the skeleton: the listener's
// max_in_flight (503 past it); Refuse; the host checked (400 unless
// route.ValidHost); the path rewritten as the listener's paths block
// says (400 for a path it refuses; SetPath when it changed), so that the
// routes and the upstream see one path; route (404 when none matches);
// Prepare; Forward; Finish; metrics and the access log.
// host and path are the request's authority and path as sent. It returns
// the route (nil if none) and the status sent.
func Serve[S string | []byte, C Call](l *Listener, c C, proto downstream.Protocol, host, path S, start time.Time) (*route.Route, int) {
	if l.Registry.Draining() {
		l.Registry.Stats.Requests.Add(1)
	}
	snap := l.Snapshot.Load()
	t := snap.Tables[l.Index]
	e := l.begin(snap, start)
	if tr := snap.Tracer; tr != nil {
		h, req := c.Traced()
		ctx, span := tr.StartServer(h, req, start)
		e.Ender = span
		var id [32]byte
		e.Set(access.TraceID, span.TraceID(&id))
		trip := c.Trip()
		trip.Tracer, trip.Ctx = tr, ctx
	}
	n := l.inFlight.Add(1)
	defer l.inFlight.Add(-1)
	if max := t.MaxInFlight; max > 0 && n > max {
		return nil, l.reject(c, t.NoRoute, proto, nil, http.StatusServiceUnavailable, MsgOverloaded, start, e)
	}
	if status, msg := c.Refuse(); status != 0 {
		return nil, l.reject(c, t.NoRoute, proto, nil, status, msg, start, e)
	}
	if !route.ValidHost(host) {
		return nil, l.reject(c, t.NoRoute, proto, nil, http.StatusBadRequest, MsgBadHost, start, e)
	}
	rt, err := match(c, t, host, path)
	if err != nil {
		return nil, l.reject(c, t.NoRoute, proto, nil, http.StatusBadRequest, pathRefusal(err), start, e)
	}
	if rt == nil {
		return nil, l.reject(c, t.NoRoute, proto, nil, http.StatusNotFound, MsgNoRoute, start, e)
	}
	if status, msg := c.Prepare(rt); status != 0 {
		return rt, l.reject(c, rt.Metrics, proto, rt, status, msg, start, e)
	}
	status := Forward(l, c, rt, start, e)
	rt.Metrics.Record(proto, status, start)
	c.Finish(status, e)
	return rt, status
}

// Forward sends a routed, prepared request upstream, unless its client
// has left already (499, nothing sent): admit it to the cluster (503 past
// its max_in_flight), pick an endpoint (503 when there is none), count
// the request for the retry budget, exchange, and map a failure to ebb's
// answer. It returns the status sent; e, if not nil, gets the cluster,
// the endpoint that answered or was last tried, the status, and the kind
// of failure when ebb answered itself.
func Forward[C Call](l *Listener, c C, rt *route.Route, now time.Time, e *access.Entry) int {
	if e != nil {
		e.Cluster = rt.Cluster.Name()
	}
	if c.Context().Err() != nil {
		// The client is gone already (an HTTP/2 stream reset before its
		// handler got this far, as in a rapid reset flood): nothing goes
		// upstream for it.
		return answered(e, StatusClientClosed, MsgClientClosed)
	}
	if !rt.Cluster.Admit() {
		l.countError(http.StatusServiceUnavailable)
		c.Reply(http.StatusServiceUnavailable, MsgClusterBusy)
		return answered(e, http.StatusServiceUnavailable, MsgClusterBusy)
	}
	defer rt.Cluster.Leave()
	ep := rt.Cluster.Pick()
	if ep == nil {
		l.countError(http.StatusServiceUnavailable)
		c.Reply(http.StatusServiceUnavailable, MsgNoEndpoint)
		return answered(e, http.StatusServiceUnavailable, MsgNoEndpoint)
	}
	rt.Cluster.CountRequest(now)
	status, last, err := c.Send(rt, ep)
	if e != nil && last != nil {
		e.Upstream = last.Addr()
	}
	if err != nil {
		status, msg := l.Failure(c.Context(), rt, last, c.Body(), err)
		l.countError(status)
		c.Reply(status, msg)
		return answered(e, status, msg)
	}
	if e != nil {
		e.Status = status
	}
	return status
}

// answered records on e, if not nil, an answer of ebb's own, and returns
// its status.
func answered(e *access.Entry, status int, msg string) int {
	if e != nil {
		e.Status, e.Error = status, errorKind(status, msg)
	}
	return status
}

// reject answers a request ebb will not forward, counts it on rm and logs
// it, and returns the status. rt is the request's route (nil: none).
func (l *Listener) reject(c Call, rm *metrics.Route, proto downstream.Protocol, rt *route.Route, status int, msg string, start time.Time, e *access.Entry) int {
	l.countError(status)
	c.Reply(status, msg)
	rm.Record(proto, status, start)
	if e != nil && rt != nil {
		e.Cluster = rt.Cluster.Name()
	}
	answered(e, status, msg)
	c.Finish(status, e) // e is the engine's from here
	return status
}

// countError counts a 5xx response ebb makes itself during a drain: the
// errors the drain's timeline shows, which a drain must never cause.
func (l *Listener) countError(status int) {
	if status >= 500 && l.Registry.Draining() {
		l.Registry.Stats.Errors.Add(1)
	}
}
