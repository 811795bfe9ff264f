// The upstream request of a stream (call.Prepare): its body held to
// the limits, then built in the form the cluster's transport takes,
// fasthttp's for HTTP/1 upstreams, net/http's for the others, with
// the client's trailers.

package h2

import (
	"bytes"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/ebb-proxy/ebb/proxy/forward"
	"github.com/ebb-proxy/ebb/proxy/h2/wire"
	"github.com/ebb-proxy/ebb/proxy/headers"
	"github.com/ebb-proxy/ebb/proxy/pace"
	"github.com/ebb-proxy/ebb/proxy/route"
	"github.com/ebb-proxy/ebb/proxy/upstream"
)

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
		if n, ok := st.BodyArrived(); size < 0 && ok && rt.Cluster.H2() {
			// Arrived whole, a body of unknown length (gRPC's) has one:
			// read into memory, it goes up with the request's HEADERS,
			// without a writer of its own.
			size = n
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
	if rt.Cluster.H2() {
		c.prepareH2(hop, announced)
		return 0, ""
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
	if body != nil && body.Buffered() == nil {
		// Streamed, it goes up while the response comes down, which this
		// engine relays as it arrives (full duplex).
		body.FullDuplex = true
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
func addTrailersH1(h *fasthttp.RequestHeader, t *wire.FieldList) {
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
	// An exchange in net/http's form may read the body and watch the
	// context until its response body is closed, which may come after
	// the handler returned: the stream must not be pooled.
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
		// Streamed, it goes up while the response comes down (HTTP/2
		// upstreams, and an auto cluster's endpoint that speaks HTTP/1.1:
		// see upstream.RoundTripHTTP).
		c.body.FullDuplex = c.body.Buffered() == nil
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
func addTrailers(dst http.Header, t *wire.FieldList) http.Header {
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
// message's own.
func trailerAllowed(name []byte) bool {
	var tmp [32]byte
	switch string(wire.Lower(tmp[:0], name)) {
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

// prepareH2 builds the request for an h2c or h2 upstream in HTTP/2's own
// form: the stream's decoded fields, the header rules applied, go into
// the upstream's header block without net/http's types in between.
func (c *call) prepareH2(hop headers.Hop, announced bool) {
	st, body := c.st, c.body
	// The stream is not pinned: the body's writer returns before the
	// handler (sendH2), and the client's reset reaches the upstream
	// through WatchConn, not a context's channel.
	l := &c.h2f
	l.Reset()
	fields := st.Fields()
	for i := range fields.Len() {
		name, value := fields.At(i)
		switch string(name) {
		case "host", "content-length", "trailer":
			continue // :authority says the one; the length and the trailers' names are set below
		}
		l.AddBytes(name, value)
	}
	if body != nil && st.ContentLength() >= 0 {
		var b [20]byte
		l.AddBytes([]byte("content-length"), strconv.AppendInt(b[:0], st.ContentLength(), 10))
	}
	scratch := scratchPool.Get().(*[]byte)
	*scratch = headers.WireRequest(l, hop, (*scratch)[:0])
	scratchPool.Put(scratch)
	c.h2up = true
	r := &c.h2r
	r.Method, r.Authority, r.Path, r.Fields = st.Method(), st.Authority(), c.target(), l
	r.Interim = st.interimFields
	if d, ok := grpcTimeout(fields.Get("grpc-timeout")); ok {
		// The call's deadline bounds its attempts (the header goes on
		// too: the upstream bounds its work by it).
		r.Deadline = time.Now().Add(d)
	}
	switch {
	case body == nil:
	case body.Buffered() != nil && st.Trailers().Len() > 0, body.Buffered() == nil && (announced || !bytes.HasPrefix(fields.Get("content-type"), []byte("application/grpc"))):
		// The trailers, announced or not, may end the body (read
		// whole, they have come with its end). gRPC requests have none
		// (its PROTOCOL-HTTP2.md): without trailers, their last DATA
		// frame upstream ends the stream, as the client's did.
		r.Trailers = st.trailerBlock
		// The names announced: those of the trailers read with a whole
		// body, or those the client announced, without the ones that
		// would not go.
		var names []string
		if body.Buffered() != nil {
			t := st.Trailers()
			for i := range t.Len() {
				k, _ := t.At(i)
				names = addTrailerName(names, k)
			}
		} else {
			for k := range bytes.SplitSeq(fields.Get("trailer"), []byte(",")) {
				names = addTrailerName(names, bytes.TrimSpace(k))
			}
		}
		if len(names) > 0 {
			slices.Sort(names)
			l.Add("trailer", strings.Join(names, ","))
		}
	}
}

// addTrailerName adds a trailer's name to names, in canonical form, once,
// if it may go as a trailer.
func addTrailerName(names []string, name []byte) []string {
	if !trailerAllowed(name) {
		return names
	}
	k := http.CanonicalHeaderKey(string(name))
	if slices.Contains(names, k) {
		return names
	}
	return append(names, k)
}

// grpcTimeout parses a gRPC call's grpc-timeout (gRPC's PROTOCOL-HTTP2.md:
// at most 8 digits and a unit, H, M, S, m, u or n).
func grpcTimeout(v []byte) (time.Duration, bool) {
	if len(v) < 2 || len(v) > 9 {
		return 0, false
	}
	var n int64
	for _, c := range v[:len(v)-1] {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	var unit time.Duration
	switch v[len(v)-1] {
	case 'H':
		unit = time.Hour
	case 'M':
		unit = time.Minute
	case 'S':
		unit = time.Second
	case 'm':
		unit = time.Millisecond
	case 'u':
		unit = time.Microsecond
	case 'n':
		unit = time.Nanosecond
	default:
		return 0, false
	}
	return time.Duration(n) * unit, true
}
