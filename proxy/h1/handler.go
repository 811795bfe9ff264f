package h1

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/ebb-proxy/ebb/proxy/access"
	"github.com/ebb-proxy/ebb/proxy/cluster"
	"github.com/ebb-proxy/ebb/proxy/downstream"
	"github.com/ebb-proxy/ebb/proxy/events"
	"github.com/ebb-proxy/ebb/proxy/forward"
	"github.com/ebb-proxy/ebb/proxy/headers"
	"github.com/ebb-proxy/ebb/proxy/pace"
	"github.com/ebb-proxy/ebb/proxy/route"
	"github.com/ebb-proxy/ebb/proxy/tracing"
	"github.com/ebb-proxy/ebb/proxy/upstream"
)

// prefetchedBody is how much of a request body fasthttp reads before the
// handler runs; a body up to this size never touches the socket again.
const prefetchedBody = 8 << 10

// call is one HTTP/1 request going through the forwarding skeleton: the
// engine's side of forward.Call. Pooled; it belongs to the request's
// goroutine from handle's start to its end.
type call struct {
	s    *Server
	ctx  *fasthttp.RequestCtx
	conn *downstream.Conn // nil for a connection ebb did not accept (tests)
	body *upstream.Body
	// upgrade: the request asks for a WebSocket upgrade, relayed as one.
	upgrade bool
	// closeAfter: the connection closes after the response, gracefully
	// (lingering) when linger is set: the client's body was not read to
	// its end.
	closeAfter, linger bool
	// http10: the client spoke HTTP/1.0 (the request goes upstream as
	// HTTP/1.1).
	http10 bool
	head   *head // the connection's head watcher (nil: none)
	// trip counts the upstream attempts; tun, for an upgrade, is the
	// tunnel that takes the access log entry once the 101 is relayed.
	trip cluster.Trip
	tun  *tunnel
	// target is the request target as the client sent it, for the
	// access log, once SetPath has changed the path (empty: it has not).
	// Its array is kept from request to request.
	target []byte
}

// Handle serves one HTTP/1 request (the engine's fasthttp server calls it). It runs on a fasthttp worker
// goroutine; it starts no goroutine and, in steady state, allocates
// nothing. The upstream call is never bound to ctx (whose Done fires when
// the engine shuts down, which would abort every request in flight at the
// start of a drain).
func (s *Server) Handle(ctx *fasthttp.RequestCtx) {
	hd := headOf(ctx.Conn())
	var body int64 = -1 // the request body's length, if known
	if hd != nil {
		hd.done()
		switch cl := ctx.Request.Header.ContentLength(); {
		case cl >= 0:
			body = int64(cl)
		case cl == -2:
			body = 0 // neither Content-Length nor Transfer-Encoding: none
		}
	}
	c := s.calls.Get().(*call)
	c.ctx, c.conn, c.head = ctx, downstream.ConnOf(ctx.Conn()), hd
	req := &ctx.Request
	c.http10 = !req.Header.IsHTTP11()
	var host, path []byte
	if !req.Header.IsConnect() {
		uri := req.URI()
		// Forward the path, and the Host header, exactly as the client
		// sent them (fasthttp would normalize the path and lower-case the
		// host).
		uri.DisablePathNormalizing = true
		req.UseHostHeader = true
		if raw := req.Header.RequestURI(); len(raw) > 0 && raw[0] != '/' && raw[0] != '*' {
			// Absolute form (RFC 9112 §3.2.2): the URI's host replaces Host.
			req.Header.SetHostBytes(uri.Host())
		}
		// The Host field as sent is what is checked and routed on, and
		// what goes upstream: fasthttp's URI would take "user@" off a
		// Host (and send it on as an Authorization field).
		host, path = req.Header.Host(), uri.PathOriginal()
	}
	forward.Serve(s.l, c, downstream.ProtoHTTP1, host, path, ctx.Time())
	if conn := c.conn; conn != nil && conn.CloseRequested() && !ctx.Response.ConnectionClose() && conn.State() != downstream.StateUpgraded {
		// The drain's close signal reached this connection: this response
		// is its last, and the client learns it in-band.
		ctx.Response.SetConnectionClose()
		s.l.Registry.Stats.CloseSignals[downstream.ProtoHTTP1].Add(1)
	}
	if hd != nil && !c.upgrade && !ctx.Response.ConnectionClose() {
		// What the engine reads next is the next request. (Not on a
		// connection that ends with this response: a request body still
		// streaming to the upstream (full duplex) is read on it, or an
		// upgraded protocol's bytes.)
		hd.expect(body)
	}
	*c = call{s: s, target: c.target[:0]}
	s.calls.Put(c)
}

// Refuse turns away versions other than HTTP/1.0 and HTTP/1.1, CONNECT
// and, as RFC 9112 §3.2 says, an HTTP/1.1 request without Host.
func (c *call) Refuse() (int, string) {
	h := &c.ctx.Request.Header
	switch {
	case c.head != nil && c.head.err != nil:
		c.ctx.SetConnectionClose()
		return fasthttp.StatusBadRequest, msgBareLF
	case !h.IsHTTP11() && string(h.Protocol()) != "HTTP/1.0":
		// HTTP/1.2, HTTP/2.0 and the like on an HTTP/1 connection: not
		// served as HTTP/1.1 (RFC 9110 §15.6.6).
		c.ctx.SetConnectionClose()
		return fasthttp.StatusHTTPVersionNotSupported, "ebb: HTTP version not supported\n"
	case h.IsConnect():
		return fasthttp.StatusMethodNotAllowed, forward.MsgConnect
	case len(h.Host()) == 0 && h.IsHTTP11():
		return fasthttp.StatusBadRequest, "ebb: missing Host header\n"
	case hasUserinfo(h.RequestURI()):
		// RFC 9110 §4.2.4: an error. Passed on, the transports would
		// turn it into an Authorization header the client never sent.
		return fasthttp.StatusBadRequest, "ebb: userinfo (user:password@) in the request target\n"
	case !headers.ValidFastNames(h):
		// "Transfer Encoding" is no header to ebb; an upstream that
		// reads it otherwise could frame the request differently.
		return fasthttp.StatusBadRequest, "ebb: invalid header field name\n"
	}
	return 0, ""
}

// hasUserinfo reports whether an absolute-form request target names a
// user in its authority (http://user:pw@host/).
func hasUserinfo(target []byte) bool {
	if len(target) == 0 || target[0] == '/' || target[0] == '*' {
		return false
	}
	_, rest, ok := bytes.Cut(target, []byte("://"))
	if !ok {
		return false
	}
	if end := bytes.IndexAny(rest, "/?#"); end >= 0 {
		rest = rest[:end]
	}
	return bytes.IndexByte(rest, '@') >= 0
}

// SetPath has the request go upstream with path instead of the client's
// (with the query as sent), by whichever transport or as an upgrade: each
// writes the target from the URI's path. The client's target is kept for
// the access log.
func (c *call) SetPath(path []byte) {
	req := &c.ctx.Request
	c.target = append(c.target[:0], req.Header.RequestURI()...)
	req.URI().SetPathBytes(path)
}

// Prepare chooses between an upgrade and an exchange, holds the body to
// limits.max_body_bytes (buffering it when retries.buffer_body allows) and
// applies the header rules.
func (c *call) Prepare(rt *route.Route) (int, string) {
	req := &c.ctx.Request
	cfg := &c.s.l.Config
	if req.Header.ConnectionUpgrade() && isWebSocket(&req.Header) {
		if rt.Cluster.NetHTTP() {
			// An upgrade is an HTTP/1.1 exchange, and the cluster's
			// endpoints may speak only HTTP/2 (and TLS).
			return fasthttp.StatusNotImplemented, "ebb: protocol upgrades are relayed to http1 clusters only\n"
		}
		c.upgrade = true
	} else {
		cl := req.Header.ContentLength()
		limit := c.s.l.Table().MaxBodyBytes
		if limit > 0 && int64(cl) > limit {
			c.closeAfter, c.linger = true, true
			return fasthttp.StatusRequestEntityTooLarge, forward.MsgBodyTooLarge
		}
		if rs := req.BodyStream(); rs != nil && cl != 0 {
			var pc pace.Budget // none: read already, no deadline to keep
			if cl < 0 || cl > prefetchedBody {
				pc = pace.New(int64(cfg.Limits.MinBodyRate), cfg.Timeouts.Header)
			}
			c.body = upstream.AcquireBody(rs, c.conn, limit, int64(cl), pc)
			req.SetBodyStream(c.body, cl)
			if c.body.Bufferable(rt.Cluster.Config().Retries.BufferBody) {
				if err := c.body.Fill(); err != nil {
					// The client failed: it sent too much, or stopped
					// sending. Its connection cannot be reused.
					c.closeAfter, c.linger = true, errors.Is(err, upstream.ErrBodyTooLarge)
					return c.s.l.Failure(nil, rt, nil, c.body, err)
				}
				// In memory, the transport can send it again.
				req.SetBodyRaw(c.body.Buffered())
			}
		}
	}
	t := c.s.l.Table()
	hop := headers.Hop{Host: req.Header.Host(), TLS: c.ctx.IsTLS(), Upgrade: c.upgrade, TETrailers: rt.Cluster.NetHTTP(),
		Via: t.Via11, RequestID: t.RequestID}
	if c.http10 {
		hop.Via = t.Via10
	}
	if c.conn != nil {
		hop.ClientIP, hop.Trust = c.conn.ClientIP, t.Trusts(c.conn.Peer)
		c.conn.Scratch = headers.FastRequest(&req.Header, hop, c.conn.Scratch)
	} else {
		hop.Trust = t.TrustForwarded
		headers.FastRequest(&req.Header, hop, nil)
	}
	return 0, ""
}

// Send relays the request to ep by the cluster's transport, or as an
// upgrade.
func (c *call) Send(rt *route.Route, ep *cluster.Endpoint) (status int, _ *cluster.Endpoint, err error) {
	switch {
	case c.upgrade:
		return c.sendUpgrade(rt, ep)
	case rt.Cluster.NetHTTP():
		status, ep, err = c.sendHTTP(rt, ep)
	default:
		status, ep, err = c.sendH1(rt, ep)
	}
	if err == nil {
		c.watchEvents()
	}
	return status, ep, err
}

// watchEvents has an event stream's body counted, and ended on an event
// boundary at the connection's close signal (forward.EventStream).
func (c *call) watchEvents() {
	resp := &c.ctx.Response
	if !resp.IsBodyStream() {
		return
	}
	b, ok := resp.BodyStream().(upstream.CutBody)
	if !ok || !events.IsEventStream(resp.Header.ContentType()) {
		return
	}
	if cut, done := c.s.l.EventStream(c.conn, int64(resp.Header.ContentLength()), b.Interrupt); done != nil {
		b.CutWith(cut, done)
	}
}

// sendH1 sends the request through ebb's HTTP/1.1 transport; the answer
// is written into the response fasthttp sends.
func (c *call) sendH1(rt *route.Route, ep *cluster.Endpoint) (int, *cluster.Endpoint, error) {
	req, resp := &c.ctx.Request, &c.ctx.Response
	if len(req.Header.Host()) == 0 {
		// HTTP/1.0 without Host: name the endpoint, as HTTP/1.1 requires.
		req.Header.SetHost(ep.Addr())
	}
	ep, err := rt.Cluster.ExchangeH1(context.Background(), ep, req, resp, &c.trip, c.s.l.Log)
	if err != nil {
		return 0, ep, err
	}
	headers.FastResponse(&resp.Header, false, c.s.l.Table().Via11)
	return resp.StatusCode(), ep, nil
}

// Reply answers with ebb's own response. A 400 ends the connection
// (gracefully: the client may still be sending): a request ebb refused as
// malformed may not have been framed as its client meant, and what
// follows it on the connection, pipelined, is not served.
func (c *call) Reply(status int, msg string) {
	localReply(c.ctx, status, msg)
	if status == fasthttp.StatusBadRequest && !c.closeAfter {
		c.closeAfter, c.linger = true, true
	}
}

// Body returns the request's body (nil: none, or not wrapped).
func (c *call) Body() *upstream.Body { return c.body }

// Context never ends: an HTTP/1 client's leaving shows as a failed write.
func (c *call) Context() context.Context { return context.Background() }

// Finish closes the connection after the response when the client's body
// failed or was not read to its end (an upstream's early answer): the
// client may still be sending. It releases the body, and completes e.
func (c *call) Finish(status int, e *access.Entry) {
	if e != nil {
		c.account(status, e)
	}
	resp := &c.ctx.Response
	if b := c.body; b != nil {
		if !c.closeAfter {
			if err := b.Failed(); err != nil {
				c.closeAfter, c.linger = true, errors.Is(err, upstream.ErrBodyTooLarge)
			}
			if !b.Complete() && c.conn != nil {
				c.closeAfter, c.linger = true, true
			}
		}
		b.Release()
		c.body = nil
	}
	if c.closeAfter {
		resp.SetConnectionClose()
		if c.linger && c.conn != nil {
			c.conn.LingerOnClose()
		}
	}
	if c.http10 && !c.upgrade && resp.IsBodyStream() && resp.Header.ContentLength() < 0 {
		c.untilClose()
	}
}

// Trip returns the request's way through the exchange loops.
func (c *call) Trip() *cluster.Trip { return &c.trip }

// Traced returns the request's header and what its server span starts
// with.
func (c *call) Traced() (tracing.Carrier, tracing.Request) {
	req := &c.ctx.Request
	r := tracing.Request{
		Method:    req.Header.Method(),
		Path:      req.URI().PathOriginal(),
		Scheme:    "http",
		Authority: req.Header.Host(),
		Protocol:  "1.1",
		UserAgent: req.Header.UserAgent(),
	}
	if c.ctx.IsTLS() {
		r.Scheme = "https"
	}
	if c.http10 {
		r.Protocol = "1.0"
	}
	if c.conn != nil {
		r.Client = c.conn.ClientIP
	}
	return headers.FastCarrier{H: &req.Header}, r
}

// The access log's protocol names.
const (
	protoHTTP10 = "HTTP/1.0"
	protoHTTP11 = "HTTP/1.1"
)

var hdrTraceparent = []byte("Traceparent")

// account sets the engine's fields of e and ends it, now if the response
// is complete, or when its streamed body (or, for an upgrade, the
// tunnel) ends.
func (c *call) account(status int, e *access.Entry) {
	req, resp := &c.ctx.Request, &c.ctx.Response
	h := &req.Header
	e.Protocol = protoHTTP11
	if c.http10 {
		e.Protocol = protoHTTP10
	}
	if c.conn != nil {
		e.Set(access.Client, c.conn.ClientIP)
	}
	e.Set(access.Method, h.Method())
	e.Set(access.Authority, h.Host())
	if len(c.target) > 0 {
		e.Set(access.Path, c.target) // as sent, before SetPath
	} else {
		e.Set(access.Path, h.RequestURI())
	}
	e.Set(access.RequestID, h.Peek(headers.XRequestID))
	e.SetTraceparent(h.PeekBytes(hdrTraceparent))
	e.Set(access.UserAgent, h.UserAgent())
	e.Set(access.Referer, h.Referer())
	e.Attempts = c.trip.Attempts
	switch {
	case c.body != nil:
		e.RequestBytes = c.body.BytesRead()
	case !req.IsBodyStream():
		e.RequestBytes = int64(len(req.Body()))
	}
	switch {
	case c.tun != nil && status == fasthttp.StatusSwitchingProtocols:
		c.tun.entry = e // the tunnel's end ends it
		return
	case resp.IsBodyStream():
		if w, ok := resp.BodyStream().(upstream.WatchedBody); ok {
			if c.body != nil {
				// The request's body may still be streaming up.
				c.body.Hold()
				e.CountBody(c.body)
			}
			w.Watch(e) // the body's end ends it
			return
		}
	case !resp.SkipBody && !h.IsHead():
		e.ResponseBytes = int64(len(resp.Body()))
	}
	e.End(time.Now())
}

// untilClose sends a response of unknown length (chunked or ended by the
// upstream's close) to an HTTP/1.0 client as HTTP/1.0 delimits one: the
// body as it comes, ended by closing the connection. The chunked coding
// fasthttp would use is not to be sent to an HTTP/1.0 recipient (RFC 9112
// §7), which cannot find the end of the body (and with keep-alive would
// wait for it). The connection is hijacked to write the body unframed;
// the response stays the request context's until the hijack handler
// returns (fasthttp releases the context after it), and fasthttp flushes
// what it buffered for earlier requests first. The registry counts the
// connection with the upgraded ones from then on: like them it carries
// bytes until it closes, and cannot be told to close in-band.
func (c *call) untilClose() {
	ctx := c.ctx
	resp := &ctx.Response
	resp.Header.Del(fasthttp.HeaderTransferEncoding)
	resp.Header.SetContentLength(-2) // neither Content-Length nor chunked; Connection: close
	head := append([]byte(nil), resp.Header.Header()...)
	ctx.HijackSetNoResponse(true)
	ctx.Hijack(func(down net.Conn) {
		if _, err := down.Write(head); err != nil {
			return
		}
		io.Copy(down, resp.BodyStream())
	})
}
