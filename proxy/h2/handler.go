package h2

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
	"golang.org/x/net/http2"

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

// connKey is the context key under which an HTTP/2 connection's streams
// find its *downstream.Conn (see Serve's ctx).
type connKey struct{}

// WithConn returns a base context for the streams of the connection c.
func WithConn(ctx context.Context, c *downstream.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

// Forwarder returns the handler serving each HTTP/2 stream of l's
// connections through the forwarding skeleton. The stream's context ends
// when the client resets it or the connection is gone, never at a
// graceful shutdown, so it is the right context for the upstream request.
func Forwarder(l *forward.Listener) Handler {
	return HandlerFunc(func(st *Stream) {
		conn, _ := st.Context().Value(connKey{}).(*downstream.Conn)
		c := callPool.Get().(*call)
		defer func() {
			*c = call{path: c.path[:0]}
			callPool.Put(c)
		}()
		c.l, c.st, c.conn = l, st, conn
		path := st.Path()
		if i := bytes.IndexByte(path, '?'); i >= 0 {
			path = path[:i]
		}
		rt, _ := forward.Serve(l, c, downstream.ProtoHTTP2, st.Authority(), path, time.Now())
		if c.relayErr != nil {
			// The client is gone, or the upstream failed mid-body: the
			// stream must end in a reset, not look complete.
			l.Log.Debug("response body not relayed whole", "listener", l.Config.Name, "cluster", rt.Cluster.Name(), "err", c.relayErr)
			code := c.resetCode
			if code == 0 {
				code = http2.ErrCodeInternal
			}
			st.Reset(code)
		}
	})
}

var callPool = sync.Pool{New: func() any { return new(call) }}

// call is one HTTP/2 stream's request going through the forwarding
// skeleton: the engine's side of forward.Call. It belongs to the
// stream's goroutine.
type call struct {
	l    *forward.Listener
	st   *Stream
	conn *downstream.Conn
	body *upstream.Body
	// Towards an HTTP/1 upstream, the request and response in fasthttp's
	// form (released by Finish); towards others, the request for
	// net/http's Transport and the trailer map its body's end fills in.
	req     *fasthttp.Request
	resp    *fasthttp.Response
	out     *http.Request
	trailer http.Header
	// relayErr is why the response body was not relayed whole, if it
	// was not; the stream is then reset with resetCode (0:
	// INTERNAL_ERROR).
	relayErr  error
	resetCode http2.ErrCode
	// trip counts the upstream attempts; sent the response body bytes
	// written to the client.
	trip cluster.Trip
	sent int64
	// path is the request target sent upstream once SetPath has changed
	// the path (empty: the stream's :path); its array is kept from
	// request to request.
	path []byte
}

// Refuse turns away CONNECT.
func (c *call) Refuse() (int, string) {
	if string(c.st.Method()) == http.MethodConnect {
		return http.StatusMethodNotAllowed, forward.MsgConnect
	}
	return 0, ""
}

// SetPath has the request go upstream with path instead of the stream's
// (with the query as sent). The stream keeps its :path, which the access
// log and the server span show.
func (c *call) SetPath(path []byte) {
	c.path = append(c.path[:0], path...)
	raw := c.st.Path()
	if i := bytes.IndexByte(raw, '?'); i >= 0 {
		c.path = append(c.path, raw[i:]...)
	}
}

// target returns the request target that goes upstream: the stream's
// :path, or what SetPath made of it.
func (c *call) target() []byte {
	if len(c.path) > 0 {
		return c.path
	}
	return c.st.Path()
}

// Prepare holds the body to limits.max_body_bytes (buffering it when
// retries.buffer_body allows), builds the upstream request in the form
// the cluster's transport takes, and applies the header rules.
func (c *call) Prepare(rt *route.Route) (int, string) {
	st := c.st
	t := c.l.Table()
	limit := t.MaxBodyBytes
	size := st.ContentLength()
	if limit > 0 && size > limit {
		return http.StatusRequestEntityTooLarge, forward.MsgBodyTooLarge
	}
	announced := st.Fields().Get("trailer") != nil
	if st.HasBody() && size != 0 {
		if rt.Cluster.NetHTTP() && bytes.HasPrefix(st.Fields().Get("content-type"), []byte("application/grpc")) {
			// A stream of messages the client sends as it has them, to
			// an upstream that multiplexes streams: only its silence is
			// bounded, not its rate.
			st.MessageStream()
		}
		c.body = upstream.AcquireBody(st.Body(), nil, limit, size, pace.Budget{})
		// With trailers announced, the body streams: they come after it.
		if !announced && c.body.Bufferable(rt.Cluster.Config().Retries.BufferBody) {
			if err := c.body.Fill(); err != nil {
				return c.l.Failure(st.Context(), rt, nil, c.body, err)
			}
		}
	}
	hop := headers.Hop{Host: st.Authority(), TLS: st.TLS(), TETrailers: rt.Cluster.NetHTTP(), Via: t.Via2, RequestID: t.RequestID}
	if c.conn != nil {
		hop.ClientIP, hop.Trust = c.conn.ClientIP, t.Trusts(c.conn.Peer)
	} else {
		hop.Trust = t.TrustForwarded
	}
	if rt.Cluster.NetHTTP() {
		return c.prepareHTTP(hop, announced)
	}
	c.prepareH1(hop, announced)
	return 0, ""
}

// scratchPool holds buffers for building header values of HTTP/2
// requests, which, unlike HTTP/1 ones, run concurrently on one connection
// and so cannot share the connection's scratch buffer.
var scratchPool = sync.Pool{New: func() any { return new([]byte) }}

// prepareH1 builds the request for an HTTP/1 upstream, which goes
// through the same transport HTTP/1 requests use, straight from the
// decoded fields.
func (c *call) prepareH1(hop headers.Hop, announced bool) {
	st, body := c.st, c.body
	req := fasthttp.AcquireRequest()
	c.req, c.resp = req, fasthttp.AcquireResponse()
	h := &req.Header
	h.SetMethodBytes(st.Method())
	h.SetRequestURIBytes(c.target())
	h.SetHostBytes(st.Authority())
	req.UseHostHeader = true
	scratch := scratchPool.Get().(*[]byte)
	cookie := (*scratch)[:0]
	fields := st.Fields()
	for i := range fields.Len() {
		name, value := fields.At(i)
		switch string(name) {
		case "content-length", "host":
			continue // framing is the transport's; Host is set above
		case "cookie":
			// HTTP/2 may split cookies into fields; HTTP/1.1 wants one
			// line (RFC 9113 §8.2.3).
			if len(cookie) > 0 {
				cookie = append(cookie, "; "...)
			}
			cookie = append(cookie, value...)
			continue
		case "trailer":
			_ = h.AddTrailerBytes(value) // names HTTP/1.1 forbids are dropped
			continue
		}
		h.AddBytesKV(name, value)
	}
	if len(cookie) > 0 {
		h.SetBytesKV([]byte("Cookie"), cookie)
	}
	switch {
	case body != nil && body.Buffered() != nil:
		req.SetBodyRaw(body.Buffered()) // the transport can send it again
		// Read whole, the body's trailers have come with its end;
		// fasthttp sends a body with trailers chunked.
		addTrailersH1(h, st.Trailers())
	case body != nil && announced:
		// Chunked, so that the trailers can follow the last chunk.
		req.SetBodyStream(body, -1)
	case body != nil:
		req.SetBodyStream(body, int(st.ContentLength()))
	}
	*scratch = headers.FastRequest(h, hop, cookie[:0])
	scratchPool.Put(scratch)
	if body != nil && body.Buffered() == nil && (announced || st.ContentLength() < 0) {
		// A chunked body's trailers, announced or not, have arrived when
		// it ends, and fasthttp writes them after the last chunk.
		body.OnEOF = func() { addTrailersH1(&req.Header, st.Trailers()) }
	}
}

// addTrailersH1 adds the client's trailers to h, the trailer section of
// a chunked request, announcing the names it did not announce (RFC 9110
// §6.6.2: the Trailer field is optional). fasthttp refuses the names
// HTTP/1.1 forbids in trailers (framing, routing, authentication, …):
// those are dropped.
func addTrailersH1(h *fasthttp.RequestHeader, t *fieldList) {
	for i := range t.Len() {
		name, value := t.At(i)
		if h.AddTrailerBytes(name) == nil {
			h.AddBytesKV(name, value)
		}
	}
}

// prepareHTTP builds the request for an h2c, h2 or auto upstream.
func (c *call) prepareHTTP(hop headers.Hop, announced bool) (int, string) {
	st := c.st
	// net/http's Transport may read the body and watch the context after
	// the exchange: the stream must not be pooled.
	st.pin()
	u, err := url.ParseRequestURI(string(c.target()))
	if err != nil {
		return http.StatusBadRequest, "ebb: invalid request path\n"
	}
	h := make(http.Header, st.Fields().Len())
	var cookies []string
	fields := st.Fields()
	for i := range fields.Len() {
		name, value := fields.At(i)
		switch string(name) {
		case "cookie":
			cookies = append(cookies, string(value))
			continue
		case "trailer":
			// The transport announces the names out.Trailer holds:
			// copied into the header too, the field would go twice.
			if c.trailer == nil {
				c.trailer = make(http.Header)
			}
			for k := range bytes.SplitSeq(value, []byte(",")) {
				if k = bytes.TrimSpace(k); trailerAllowed(k) {
					c.trailer[http.CanonicalHeaderKey(string(k))] = nil
				}
			}
			continue
		}
		k := http.CanonicalHeaderKey(string(name))
		h[k] = append(h[k], string(value))
	}
	if len(cookies) > 0 {
		h["Cookie"] = []string{joinCookies(cookies)}
	}
	out := &http.Request{
		Method: string(st.Method()), URL: u, Host: string(st.Authority()),
		Proto: "HTTP/2.0", ProtoMajor: 2, Header: h,
	}
	// 103 Early Hints from the upstream go on to the client as they come.
	out = out.WithContext(httptrace.WithClientTrace(st.Context(), &httptrace.ClientTrace{
		Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
			if code == http.StatusEarlyHints {
				var fields [][2]string
				for k, vv := range h {
					for _, v := range vv {
						fields = append(fields, [2]string{k, v})
					}
				}
				st.Interim(code, fields)
			}
			return nil
		},
	}))
	if c.body != nil {
		out.ContentLength = st.ContentLength()
		if out.ContentLength < 0 {
			out.ContentLength = -1
		}
	}
	switch {
	case c.body != nil && c.body.Buffered() != nil:
		// Read whole, the body's trailers have come with its end.
		c.trailer = addTrailers(c.trailer, st.Trailers())
		if len(c.trailer) > 0 {
			out.Trailer = c.trailer
		}
	case c.body != nil && (announced || !bytes.HasPrefix(st.Fields().Get("content-type"), []byte("application/grpc"))):
		// The trailers, announced or not, may end the body: the
		// transport sends what this map holds once it has read the body
		// to its end, which fills it in. The transport may read
		// after the handler has returned and c is pooled: the closure
		// holds the map and the stream (pinned), not c. gRPC requests
		// have no trailers (its PROTOCOL-HTTP2.md): without the map,
		// their last DATA frame upstream ends the stream, as the
		// client's did, not an empty one after it.
		if c.trailer == nil {
			c.trailer = make(http.Header)
		}
		trailer := c.trailer
		out.Trailer = trailer
		c.body.OnEOF = func() { addTrailers(trailer, st.Trailers()) }
	}
	headers.StdRequest(out.Header, hop)
	c.out = out
	return 0, ""
}

// addTrailers adds the client's trailers t to dst (made if nil and
// needed), which it returns, but for the names trailerAllowed refuses.
func addTrailers(dst http.Header, t *fieldList) http.Header {
	for i := range t.Len() {
		name, value := t.At(i)
		if !trailerAllowed(name) {
			continue
		}
		if dst == nil {
			dst = make(http.Header)
		}
		k := http.CanonicalHeaderKey(string(name))
		dst[k] = append(dst[k], string(value))
	}
	return dst
}

// trailerAllowed reports whether a field name may be relayed as a
// request trailer: not empty, and none of those that frame or route a
// message (RFC 9110 §6.5.1), which an upstream would take for the
// message's own (net/http's Transport fails the request for some).
func trailerAllowed(name []byte) bool {
	var tmp [32]byte
	switch string(lower(tmp[:0], name)) {
	case "", "content-length", "host", "trailer", "transfer-encoding":
		return false
	}
	return true
}

func joinCookies(c []string) string {
	n := 0
	for _, s := range c {
		n += len(s) + 2
	}
	b := make([]byte, 0, n)
	for i, s := range c {
		if i > 0 {
			b = append(b, "; "...)
		}
		b = append(b, s...)
	}
	return string(b)
}

// Send relays the request to ep by the cluster's transport.
func (c *call) Send(rt *route.Route, ep *cluster.Endpoint) (int, *cluster.Endpoint, error) {
	if c.out != nil {
		return c.sendHTTP(rt, ep)
	}
	return c.sendH1(rt, ep)
}

// sendH1 exchanges with an HTTP/1 upstream and relays the response.
func (c *call) sendH1(rt *route.Route, ep *cluster.Endpoint) (int, *cluster.Endpoint, error) {
	st, resp := c.st, c.resp
	ep, err := rt.Cluster.ExchangeH1(st.Context(), ep, c.req, resp, &c.trip, c.l.Log)
	if err != nil {
		return 0, ep, err
	}
	headers.FastResponse(&resp.Header, false, c.l.Table().Via11)
	for k, v := range resp.Header.All() {
		st.AddHeader(k, v)
	}
	status := resp.StatusCode()
	if s := resp.BodyStream(); s != nil {
		if b, ok := s.(upstream.CutBody); ok && events.IsEventStream(resp.Header.ContentType()) {
			// An event stream ends on an event boundary at the
			// connection's close signal (its GOAWAY).
			if cut, done := c.l.EventStream(c.conn, int64(resp.Header.ContentLength()), b.Interrupt); done != nil {
				b.CutWith(cut, done)
			}
		}
		_ = st.WriteHeader(status, false)
		c.sent, c.relayErr = copyBody(st, s)
		_ = resp.CloseBodyStream() // gives the upstream connection back, or closes it
		if c.relayErr == nil {
			// The upstream's trailers, received with the body's end.
			for name := range resp.Header.Trailers() {
				if v := resp.Header.PeekBytes(name); len(v) > 0 {
					st.AddHeader(name, v)
				}
			}
			c.relayErr = st.End()
		}
		return status, ep, nil
	}
	b := resp.Body()
	if len(b) == 0 {
		c.relayErr = st.WriteHeader(status, true)
		return status, ep, nil
	}
	_ = st.WriteHeader(status, false)
	n, err := st.Write(b)
	c.sent = int64(n)
	if err != nil {
		c.relayErr = err
	} else {
		c.relayErr = st.End()
	}
	return status, ep, nil
}

// sendHTTP exchanges with an h2c, h2 or auto upstream, full duplex: the
// request body streams up while the response streams down. Trailers
// follow the body.
func (c *call) sendHTTP(rt *route.Route, ep *cluster.Endpoint) (int, *cluster.Endpoint, error) {
	st, out := c.st, c.out
	out.URL.Scheme, out.URL.Host = rt.Cluster.Scheme(), ep.Addr()
	// A retry's copy of the request must keep reading the trailer map the
	// body's end fills in (see prepareHTTP).
	var keepTrailer func(*http.Request)
	if out.Trailer != nil {
		keepTrailer = func(o *http.Request) { o.Trailer = c.trailer }
	}
	resp, ep, err := rt.Cluster.ExchangeHTTP(st.Context(), ep, out, c.body, keepTrailer, &c.trip, c.l.Log)
	var se http2.StreamError
	if err != nil && errors.As(err, &se) && se.Code == http2.ErrCodeCancel && st.Context().Err() == nil {
		// The upstream cancelled the stream before answering (a gRPC
		// server does at the call's deadline): the client's stream is
		// cancelled in turn, which tells it more than a 502 would (gRPC
		// reports the deadline it set).
		rt.Cluster.Metrics().UpstreamError(upstream.KindBroken)
		c.l.Log.Debug("upstream cancelled the stream; cancelling the client's", "listener", c.l.Config.Name, "cluster", rt.Cluster.Name(), "endpoint", ep.Addr())
		c.relayErr, c.resetCode = err, http2.ErrCodeCancel
		return http.StatusBadGateway, ep, nil
	}
	if err != nil {
		return 0, ep, err
	}
	defer ep.Release()
	defer resp.Body.Close()
	headers.StdResponse(resp.Header, c.l.Table().ViaFor(resp.ProtoMajor))
	noBody := bodyless(resp.StatusCode) || string(st.Method()) == http.MethodHead
	if bodyless(resp.StatusCode) {
		// As the HTTP/1 transport does: nothing frames what is not there.
		delete(resp.Header, "Content-Length")
	}
	for k, vv := range resp.Header {
		for _, v := range vv {
			st.AddHeaderString(k, v)
		}
	}
	if _, ok := resp.Header["Content-Length"]; !ok && resp.ContentLength >= 0 && !bodyless(resp.StatusCode) {
		st.AddHeaderString("content-length", strconv.FormatInt(resp.ContentLength, 10))
	}
	if noBody {
		// A 204, a 304 or a HEAD answer ends with its header block (RFC
		// 9113 §8.1.1), whatever DATA the upstream sends after it:
		// closing the body resets the upstream's stream.
		c.relayErr = st.WriteHeader(resp.StatusCode, true)
		return resp.StatusCode, ep, nil
	}
	if resp.ContentLength == 0 && len(resp.Trailer) == 0 {
		// One HEADERS frame that ends the stream: what a gRPC server's
		// trailers-only answer (an error status) must stay.
		c.relayErr = st.WriteHeader(resp.StatusCode, true)
		return resp.StatusCode, ep, nil
	}
	var body io.Reader = resp.Body
	if events.IsEventStream(resp.Header.Get("Content-Type")) {
		// An event stream ends on an event boundary at the connection's
		// close signal (its GOAWAY); closing the body wakes a read
		// waiting for the upstream, and cancels the upstream's stream.
		if cut, done := c.l.EventStream(c.conn, resp.ContentLength, func() { resp.Body.Close() }); done != nil {
			defer done()
			if cut != nil {
				body = cut.Reader(body)
			}
		}
	}
	if err := st.WriteHeader(resp.StatusCode, false); err != nil {
		c.relayErr = err
		return resp.StatusCode, ep, nil
	}
	if c.sent, err = copyBody(st, body); err != nil {
		c.relayErr = err
		return resp.StatusCode, ep, nil
	}
	for k, vv := range resp.Trailer {
		for _, v := range vv {
			st.AddHeaderString(k, v)
		}
	}
	c.relayErr = st.End()
	return resp.StatusCode, ep, nil
}

// bodyless reports whether responses with status have no body.
func bodyless(status int) bool {
	return status == http.StatusNoContent || status == http.StatusNotModified || status < 200
}

// Reply writes a response ebb makes itself.
func (c *call) Reply(status int, msg string) {
	st := c.st
	st.AddHeaderString("content-type", "text/plain; charset=utf-8")
	if status == http.StatusServiceUnavailable {
		st.AddHeaderString("retry-after", forward.RetryAfter)
	}
	st.AddHeaderString("content-length", strconv.Itoa(len(msg)))
	if st.WriteHeader(status, len(msg) == 0) != nil || len(msg) == 0 {
		return
	}
	n, err := io.WriteString(st, msg)
	c.sent = int64(n)
	if err == nil {
		_ = st.End()
	}
}

// Body returns the request's body (nil: none).
func (c *call) Body() *upstream.Body { return c.body }

// Context ends when the client resets the stream or the connection is
// gone.
func (c *call) Context() context.Context { return c.st.Context() }

// Finish completes e and releases what the request held.
func (c *call) Finish(_ int, e *access.Entry) {
	if e != nil {
		c.account(e)
	}
	if c.req != nil {
		fasthttp.ReleaseRequest(c.req)
		fasthttp.ReleaseResponse(c.resp)
		c.req, c.resp = nil, nil
	}
	if c.body != nil {
		c.body.Release()
		c.body = nil
	}
}

// Trip returns the request's way through the exchange loops.
func (c *call) Trip() *cluster.Trip { return &c.trip }

// Traced returns the stream's header and what its server span starts
// with.
func (c *call) Traced() (tracing.Carrier, tracing.Request) {
	st := c.st
	path := st.Path()
	if i := bytes.IndexByte(path, '?'); i >= 0 {
		path = path[:i]
	}
	r := tracing.Request{
		Method:    st.Method(),
		Path:      path,
		Scheme:    "http",
		Authority: st.Authority(),
		Protocol:  "2",
		UserAgent: st.Fields().Get("user-agent"),
	}
	if st.TLS() {
		r.Scheme = "https"
	}
	if c.conn != nil {
		r.Client = c.conn.ClientIP
	}
	return streamCarrier{st}, r
}

// streamCarrier is a stream's request header as a trace context carrier,
// read only.
type streamCarrier struct{ st *Stream }

func (c streamCarrier) Get(name string) string { return string(c.st.Fields().Get(name)) }
func (streamCarrier) Set(string, string)       {}
func (streamCarrier) Keys() []string           { return nil }

// protoHTTP2 is the access log's protocol name.
const protoHTTP2 = "HTTP/2.0"

// account sets the engine's fields of e and ends it: the response has
// been relayed (or failed) by now.
func (c *call) account(e *access.Entry) {
	st := c.st
	fields := st.Fields()
	e.Protocol = protoHTTP2
	if c.conn != nil {
		e.Set(access.Client, c.conn.ClientIP)
	}
	e.Set(access.Method, st.Method())
	e.Set(access.Authority, st.Authority())
	e.Set(access.Path, st.Path())
	switch {
	case c.req != nil:
		e.Set(access.RequestID, c.req.Header.Peek(headers.XRequestID))
	case c.out != nil:
		e.SetString(access.RequestID, c.out.Header.Get(headers.XRequestID))
	default:
		e.Set(access.RequestID, fields.Get("x-request-id"))
	}
	e.SetTraceparent(fields.Get("traceparent"))
	e.Set(access.UserAgent, fields.Get("user-agent"))
	e.Set(access.Referer, fields.Get("referer"))
	e.Attempts = c.trip.Attempts
	e.RequestBytes = c.body.BytesRead()
	e.ResponseBytes = c.sent
	switch {
	case c.resetCode == http2.ErrCodeCancel:
		e.Error = "upstream_cancelled"
	case c.relayErr != nil && e.Error == "":
		e.Error = "response_incomplete"
	}
	e.End(time.Now())
}

// copyBufPool holds the buffers response bodies are relayed through.
var copyBufPool = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// copyBody relays a response body. Each piece goes to the client as soon
// as the connection's writer gets to it: a body of unknown length may be
// a stream of messages (gRPC, server-sent events) that must not wait for
// a buffer to fill. It returns the bytes written; the error is the
// upstream's or the client's.
func copyBody(st *Stream, src io.Reader) (int64, error) {
	bp := copyBufPool.Get().(*[]byte)
	defer copyBufPool.Put(bp)
	buf := *bp
	var sent int64
	for {
		n, err := src.Read(buf)
		if n > 0 {
			w, werr := st.Write(buf[:n])
			sent += int64(w)
			if werr != nil {
				return sent, werr
			}
		}
		if err == io.EOF {
			return sent, nil
		}
		if err != nil {
			return sent, err
		}
	}
}
