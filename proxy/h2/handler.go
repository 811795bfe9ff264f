// The stream handler of the forwarding skeleton (Forwarder) and call, the
// engine's side of forward.Call: its request is prepared in prepare.go,
// sent and relayed in relay.go.

package h2

import (
	"bytes"
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
	"golang.org/x/net/http2"

	"github.com/ebb-proxy/ebb/proxy/access"
	"github.com/ebb-proxy/ebb/proxy/cluster"
	"github.com/ebb-proxy/ebb/proxy/downstream"
	"github.com/ebb-proxy/ebb/proxy/forward"
	"github.com/ebb-proxy/ebb/proxy/h2/wire"
	"github.com/ebb-proxy/ebb/proxy/headers"
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
			c.h2f.Reset()
			*c = call{path: c.path[:0], h2f: c.h2f, h2r: cluster.H2Request{Block: c.h2r.Block[:0]}}
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
			st.ResetAfterOutput(code)
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
	// form (released by Finish); towards others, the request in
	// net/http's form and the trailer map its body's end fills in.
	req     *fasthttp.Request
	resp    *fasthttp.Response
	out     *http.Request
	trailer http.Header
	// Towards an h2c or h2 upstream (h2up): the request in HTTP/2's own
	// form; its field list and block buffer are kept from request to
	// request.
	h2up bool
	h2r  cluster.H2Request
	h2f  wire.FieldList
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
	case c.h2up:
		e.Set(access.RequestID, c.h2f.Get("x-request-id"))
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
