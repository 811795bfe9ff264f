package h2

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/ebb-proxy/ebb/drain"
	"github.com/ebb-proxy/ebb/proxy/cluster"
	"github.com/ebb-proxy/ebb/proxy/forward"
	"github.com/ebb-proxy/ebb/proxy/headers"
	"github.com/ebb-proxy/ebb/proxy/route"
	"github.com/ebb-proxy/ebb/proxy/upstream"
)

// connKey is the context key under which an HTTP/2 connection's requests
// find its *drain.Conn (see Serve's ctx).
type connKey struct{}

// WithConn returns a base context for the requests of the connection c.
func WithConn(ctx context.Context, c *drain.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

// Handler returns the handler serving each HTTP/2 stream of l's
// connections through the forwarding skeleton. The engine runs it on a
// goroutine of its own per stream. r.Context() ends when the client
// resets the stream or the connection is gone, never at a graceful
// shutdown, so it is the right context for the upstream request.
func Handler(l *forward.Listener) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, _ := r.Context().Value(connKey{}).(*drain.Conn)
		c := &call{l: l, w: w, r: r, conn: conn}
		path, _, _ := strings.Cut(r.RequestURI, "?")
		rt, _ := forward.Serve(l, c, drain.ProtoHTTP2, r.Host, path, time.Now())
		if c.relayErr != nil {
			// The client is gone, or the upstream failed mid-body: the
			// stream must end in a reset, not look complete. The engine
			// resets it, quietly, on this panic.
			l.Log.Debug("response body not relayed whole", "listener", l.Config.Name, "cluster", rt.Cluster.Name(), "err", c.relayErr)
			panic(http.ErrAbortHandler)
		}
	})
}

// call is one HTTP/2 stream's request going through the forwarding
// skeleton: the engine's side of forward.Call. It belongs to the
// stream's goroutine.
type call struct {
	l    *forward.Listener
	w    http.ResponseWriter
	r    *http.Request
	conn *drain.Conn
	body *upstream.Body
	// Towards an HTTP/1 upstream, the request and response in fasthttp's
	// form (released by Finish); towards others, the request for
	// net/http's Transport.
	req  *fasthttp.Request
	resp *fasthttp.Response
	out  *http.Request
	// relayErr is why the response body was not relayed whole, if it
	// was not.
	relayErr error
}

// Refuse turns away CONNECT.
func (c *call) Refuse() (int, string) {
	if c.r.Method == http.MethodConnect {
		return http.StatusMethodNotAllowed, forward.MsgConnect
	}
	return 0, ""
}

// Prepare holds the body to limits.max_body_bytes (buffering it when
// retries.buffer_body allows), builds the upstream request in the form
// the cluster's transport takes, and applies the header rules.
func (c *call) Prepare(rt *route.Route) (int, string) {
	r := c.r
	limit := int64(c.l.Config.Limits.MaxBodyBytes)
	if limit > 0 && r.ContentLength > limit {
		return http.StatusRequestEntityTooLarge, forward.MsgBodyTooLarge
	}
	if r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0 {
		c.body = upstream.AcquireBody(r.Body, nil, limit, r.ContentLength, 0)
		// With trailers announced, the body streams: they come after it.
		if len(r.Trailer) == 0 && c.body.Bufferable(rt.Cluster.Config().Retries.BufferBody) {
			if err := c.body.Fill(); err != nil {
				return c.l.Failure(r.Context(), rt, nil, c.body, err)
			}
		}
	}
	hop := headers.Hop{Host: []byte(r.Host), TLS: r.TLS != nil, Trust: c.l.Config.Headers.TrustForwarded,
		TETrailers: rt.Cluster.NetHTTP()}
	if c.conn != nil {
		hop.ClientIP = c.conn.ClientIP
	}
	if rt.Cluster.NetHTTP() {
		c.prepareHTTP(hop)
	} else {
		c.prepareH1(hop)
	}
	return 0, ""
}

// scratchPool holds buffers for building header values of HTTP/2
// requests, which, unlike HTTP/1 ones, run concurrently on one connection
// and so cannot share the connection's scratch buffer.
var scratchPool = sync.Pool{New: func() any { return new([]byte) }}

// prepareH1 builds the request for an HTTP/1 upstream, which goes
// through the same transport HTTP/1 requests use.
func (c *call) prepareH1(hop headers.Hop) {
	r, body := c.r, c.body
	req := fasthttp.AcquireRequest()
	c.req, c.resp = req, fasthttp.AcquireResponse()
	h := &req.Header
	h.SetMethod(r.Method)
	h.SetRequestURI(r.RequestURI)
	h.SetHost(r.Host)
	req.UseHostHeader = true
	for k, vv := range r.Header {
		switch k {
		case "Content-Length", "Transfer-Encoding", "Host":
			continue // framing is the transport's; Host is set above
		}
		for _, v := range vv {
			h.Add(k, v)
		}
	}
	switch {
	case body != nil && body.Buffered() != nil:
		req.SetBodyRaw(body.Buffered()) // the transport can send it again
	case body != nil:
		req.SetBodyStream(body, int(r.ContentLength))
	}
	scratch := scratchPool.Get().(*[]byte)
	*scratch = headers.FastRequest(h, hop, *scratch)
	scratchPool.Put(scratch)
	if body != nil && len(r.Trailer) > 0 {
		// Announced trailers follow the body: the engine fills in
		// r.Trailer when the body ends, and fasthttp writes them after
		// the last chunk.
		for k := range r.Trailer {
			_ = req.Header.AddTrailer(k) // names HTTP/1.1 forbids are dropped
		}
		body.OnEOF = func() {
			for k, vv := range r.Trailer {
				for _, v := range vv {
					req.Header.Add(k, v)
				}
			}
		}
	}
}

// prepareHTTP builds the request for an h2c, h2 or auto upstream.
func (c *call) prepareHTTP(hop headers.Hop) {
	r := c.r
	out := r.Clone(r.Context())
	out.RequestURI = ""
	out.Host = r.Host
	// The engine fills in the request's trailers when its body ends, in
	// r.Trailer itself: the transport must read that map, not a copy.
	out.Trailer = r.Trailer
	if c.body == nil {
		// The engine's Body is never nil, even for a request without one:
		// net/http would take it for one of unknown length and send it
		// (HEADERS, then an empty DATA frame ending the stream).
		out.Body = nil
	}
	headers.StdRequest(out.Header, hop)
	c.out = out
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
	w, resp := c.w, c.resp
	ep, err := rt.Cluster.ExchangeH1(c.r.Context(), ep, c.req, resp, c.l.Log)
	if err != nil {
		return 0, ep, err
	}
	wh := w.Header()
	headers.CopyResponse(wh, &resp.Header)
	if _, ok := wh["Content-Type"]; !ok {
		wh["Content-Type"] = nil // the engine would guess one
	}
	status := resp.StatusCode()
	w.WriteHeader(status)
	if s := resp.BodyStream(); s != nil {
		c.relayErr = copyBody(w, s, resp.Header.ContentLength() < 0)
		_ = resp.CloseBodyStream() // gives the upstream connection back, or closes it
		// The upstream's trailers, received with the body's end.
		for name := range resp.Header.Trailers() {
			if v := resp.Header.PeekBytes(name); len(v) > 0 {
				key := http.TrailerPrefix + string(name)
				wh[key] = append(wh[key], string(v))
			}
		}
		return status, ep, nil
	}
	if b := resp.Body(); len(b) > 0 {
		_, _ = w.Write(b) // a failure is the client's, and the handler ends anyway
	}
	return status, ep, nil
}

// sendHTTP exchanges with an h2c, h2 or auto upstream, full duplex: the
// request body streams up while the response streams down. Trailers
// follow the body.
func (c *call) sendHTTP(rt *route.Route, ep *cluster.Endpoint) (int, *cluster.Endpoint, error) {
	w, r, out := c.w, c.r, c.out
	out.URL.Scheme, out.URL.Host = rt.Cluster.Scheme(), ep.Addr()
	// A retry's copy of the request must keep reading the trailer map the
	// engine fills in (see prepareHTTP).
	keepTrailer := func(o *http.Request) { o.Trailer = r.Trailer }
	resp, ep, err := rt.Cluster.ExchangeHTTP(r.Context(), ep, out, c.body, keepTrailer, c.l.Log)
	if err != nil {
		return 0, ep, err
	}
	defer ep.Release()
	defer resp.Body.Close()
	wh := w.Header()
	headers.StdResponse(resp.Header)
	for k, vv := range resp.Header {
		wh[k] = append(wh[k], vv...)
	}
	if _, ok := wh["Content-Type"]; !ok {
		wh["Content-Type"] = nil // the engine would guess one
	}
	w.WriteHeader(resp.StatusCode)
	if err := copyBody(w, resp.Body, resp.ContentLength < 0); err != nil {
		c.relayErr = err
		return resp.StatusCode, ep, nil
	}
	for k, vv := range resp.Trailer {
		wh[http.TrailerPrefix+k] = vv
	}
	return resp.StatusCode, ep, nil
}

// Reply writes a response ebb makes itself.
func (c *call) Reply(status int, msg string) {
	h := c.w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("Content-Length", strconv.Itoa(len(msg)))
	c.w.WriteHeader(status)
	_, _ = io.WriteString(c.w, msg)
}

// Body returns the request's body (nil: none).
func (c *call) Body() *upstream.Body { return c.body }

// Context ends when the client resets the stream or the connection is
// gone.
func (c *call) Context() context.Context { return c.r.Context() }

// Finish releases what the request held.
func (c *call) Finish(int) {
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

// AccessFields returns what the access log shows of the request.
func (c *call) AccessFields() (client, method, host, uri string, bytes int) {
	if c.conn != nil {
		client = string(c.conn.ClientIP)
	}
	return client, c.r.Method, c.r.Host, c.r.RequestURI, -1
}

// copyBufPool holds the buffers response bodies are relayed through.
var copyBufPool = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// copyBody relays a response body. flush sends each piece on at once: a
// body of unknown length may be a stream of messages (gRPC, server-sent
// events) that must not wait for a buffer to fill. The headers are sent
// first in that case too. The error is the upstream's or the client's.
func copyBody(w http.ResponseWriter, src io.Reader, flush bool) error {
	rc := http.NewResponseController(w)
	if flush {
		if err := rc.Flush(); err != nil {
			return err
		}
	}
	bp := copyBufPool.Get().(*[]byte)
	defer copyBufPool.Put(bp)
	buf := *bp
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return werr
			}
			if flush {
				if werr := rc.Flush(); werr != nil {
					return werr
				}
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}
