package proxy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/ebb-proxy/ebb/drain"
)

// prefetchedBody is how much of a request body fasthttp reads before the
// handler runs; a body up to this size never touches the socket again.
const prefetchedBody = 8 << 10

const msgBodyTooLarge = "ebb: request body too large\n"

// handle serves one HTTP/1 request: route, forward, answer. It runs on a
// fasthttp worker goroutine; it starts no goroutine and, in steady state,
// allocates nothing. The upstream call is never bound to ctx (whose Done
// fires when the engine shuts down, which would abort every request in
// flight at the start of a drain).
func (l *listener) handle(ctx *fasthttp.RequestCtx) {
	conn := connOf(ctx.Conn())
	l.serveRequest(ctx, conn)
	if conn == nil {
		return
	}
	if conn.CloseRequested() && !ctx.Response.ConnectionClose() && conn.State() != drain.StateUpgraded {
		// The drain's close signal reached this connection: this response
		// is its last, and the client learns it in-band.
		ctx.Response.SetConnectionClose()
		l.p.reg.Stats.CloseSignals[drain.ProtoHTTP1].Add(1)
	}
	if l.p.reg.Draining() {
		l.p.reg.Stats.Requests.Add(1)
	}
}

// serveRequest routes, forwards and answers one request.
func (l *listener) serveRequest(ctx *fasthttp.RequestCtx, conn *drain.Conn) {
	start := ctx.Time()
	const proto = drain.ProtoHTTP1
	req := &ctx.Request
	resp := &ctx.Response

	t := l.p.snap.Load().tables[l.idx]
	if req.Header.IsConnect() {
		l.reject(ctx, conn, t.noRoute, "", fasthttp.StatusMethodNotAllowed, "ebb: CONNECT is not supported\n", start)
		return
	}
	uri := req.URI()
	// Forward the path, and the Host header, exactly as the client sent
	// them (fasthttp would normalize the path and lower-case the host).
	uri.DisablePathNormalizing = true
	req.UseHostHeader = true
	if raw := req.Header.RequestURI(); len(raw) > 0 && raw[0] != '/' && raw[0] != '*' {
		// Absolute form (RFC 9112 §3.2.2): the URI's host replaces Host.
		req.Header.SetHostBytes(uri.Host())
	}

	if len(req.Header.Host()) == 0 && req.Header.IsHTTP11() {
		// RFC 9112 §3.2: an HTTP/1.1 request without Host is a 400.
		l.reject(ctx, conn, t.noRoute, "", fasthttp.StatusBadRequest, "ebb: missing Host header\n", start)
		return
	}
	r := t.match(uri.Host(), uri.PathOriginal())
	if r == nil {
		l.reject(ctx, conn, t.noRoute, "", fasthttp.StatusNotFound, "ebb: no route for this request\n", start)
		return
	}
	if req.Header.ConnectionUpgrade() && isWebSocket(req.Header.Peek("Upgrade")) {
		if r.cluster.netHTTP {
			// An upgrade is an HTTP/1.1 exchange, and the cluster's
			// endpoints may speak only HTTP/2 (and TLS).
			l.reject(ctx, conn, r.metrics, r.cluster.name, fasthttp.StatusNotImplemented, "ebb: protocol upgrades are relayed to http1 clusters only\n", start)
			return
		}
		status := l.upgrade(ctx, conn, r)
		r.metrics.record(proto, status, start)
		l.accessLog(ctx, conn, r.cluster.name, status, start)
		return
	}

	cl := req.Header.ContentLength()
	limit := int64(l.cfg.Limits.MaxBodyBytes)
	if limit > 0 && int64(cl) > limit {
		l.reject(ctx, conn, r.metrics, r.cluster.name, fasthttp.StatusRequestEntityTooLarge, msgBodyTooLarge, start)
		resp.SetConnectionClose()
		lingerOnClose(ctx)
		return
	}
	var body *reqBody
	if rs := req.BodyStream(); rs != nil && cl != 0 {
		body = acquireReqBody(rs, conn, limit, int64(cl), l.cfg.Timeouts.Header)
		req.SetBodyStream(body, cl)
		if body.bufferable(r.cluster.cfg.Retries.BufferBody) {
			if err := body.fill(); err != nil {
				status := l.upstreamFailed(ctx, r, nil, body, err)
				body.release()
				r.metrics.record(proto, status, start)
				l.accessLog(ctx, conn, r.cluster.name, status, start)
				return
			}
			// In memory, the transport can send it again.
			req.SetBodyRaw(body.buf)
		}
	}

	if conn != nil {
		conn.Scratch = l.prepareRequest(req, conn.ClientIP, ctx.IsTLS(), conn.Scratch)
	} else {
		l.prepareRequest(req, nil, ctx.IsTLS(), nil)
	}
	var status int
	if r.cluster.netHTTP {
		status = l.forwardHTTP(ctx, r, body)
	} else {
		status = l.forward(ctx, r, body)
	}
	if body != nil {
		if !body.complete() && conn != nil {
			// Answered before the whole body arrived (an upstream's early
			// answer): close the connection, gracefully, since the client
			// may still be sending.
			ctx.Response.SetConnectionClose()
			conn.LingerOnClose()
		}
		body.release()
	}
	r.metrics.record(proto, status, start)
	l.accessLog(ctx, conn, r.cluster.name, status, start)
}

// reject answers a request ebb will not forward, and counts it.
func (l *listener) reject(ctx *fasthttp.RequestCtx, conn *drain.Conn, rm *routeMetrics, cluster string, status int, msg string, start time.Time) {
	localReply(ctx, status, msg)
	rm.record(drain.ProtoHTTP1, status, start)
	l.accessLog(ctx, conn, cluster, status, start)
}

// accessLog writes one access log line when telemetry.log.access is on.
// It allocates, so it is off by default.
func (l *listener) accessLog(ctx *fasthttp.RequestCtx, conn *drain.Conn, cluster string, status int, start time.Time) {
	if l.p.access == nil {
		return
	}
	var client string
	if conn != nil {
		client = string(conn.ClientIP)
	}
	l.logAccess(client, string(ctx.Method()), string(ctx.Request.Header.Host()), string(ctx.Request.Header.RequestURI()),
		cluster, status, ctx.Response.Header.ContentLength(), start)
}

// logAccess writes one access log line. bytes is the response's
// Content-Length, or negative when it has none.
func (l *listener) logAccess(client, method, host, uri, cluster string, status, bytes int, start time.Time) {
	l.p.access.LogAttrs(context.Background(), slog.LevelInfo, "request",
		slog.String("listener", l.cfg.Name),
		slog.String("client", client),
		slog.String("method", method),
		slog.String("host", host),
		slog.String("uri", uri),
		slog.String("cluster", cluster),
		slog.Int("status", status),
		slog.Int("bytes", bytes),
		slog.Float64("duration_ms", float64(time.Since(start).Microseconds())/1000),
	)
}

// prepareRequest applies the header rules to a request about to go
// upstream. clientIP is appended to X-Forwarded-For; tls says whether the
// client came over TLS. scratch is reused to build header values and
// returned for the next request.
func (l *listener) prepareRequest(req *fasthttp.Request, clientIP []byte, tls bool, scratch []byte) []byte {
	stripRequestHopByHop(&req.Header, false)
	if req.MayContinue() {
		// fasthttp has already answered 100 Continue and read on; the
		// upstream gets the body without waiting.
		req.Header.DelBytes(hdrExpect)
	}
	// The client's Connection: close is about its own connection; the
	// upstream connection stays pooled.
	req.Header.ResetConnectionClose()
	// fasthttp would add a Content-Type the client did not send.
	req.Header.SetNoDefaultContentType(true)
	if !l.cfg.Headers.TrustForwarded {
		// RFC 7239's Forwarded carries the same claims as X-Forwarded-*;
		// from an untrusted client it is dropped, not passed on.
		req.Header.DelBytes(hdrForwarded)
	}
	if !req.Header.IsHTTP11() {
		req.Header.SetProtocolBytes(http11)
	}
	return setForwarded(&req.Header, clientIP, tls, l.cfg.Headers.TrustForwarded, scratch)
}

// forward sends the request to an endpoint of r's cluster and puts the
// answer, or ebb's error response, into ctx. It returns the status sent.
func (l *listener) forward(ctx *fasthttp.RequestCtx, r *route, body *reqBody) int {
	ep := r.cluster.pick()
	if ep == nil {
		localReply(ctx, fasthttp.StatusServiceUnavailable, msgNoEndpoint)
		return fasthttp.StatusServiceUnavailable
	}
	if len(ctx.Request.Header.Host()) == 0 {
		// HTTP/1.0 without Host: name the endpoint, as HTTP/1.1 requires.
		ctx.Request.Header.SetHost(ep.addr)
	}
	r.cluster.budget.request(ctx.Time())
	resp := &ctx.Response
	if ep, err := r.cluster.exchangeH1(context.Background(), ep, &ctx.Request, resp, l.p.log); err != nil {
		return l.upstreamFailed(ctx, r, ep, body, err)
	}
	// The upstream's Connection: close was honoured on the upstream
	// connection; it never closes the client's.
	stripResponseHopByHop(&resp.Header, false)
	resp.Header.ResetConnectionClose()
	return resp.StatusCode()
}

// forwardHTTP sends an HTTP/1 request to an endpoint of an h2c, h2 or
// auto cluster through net/http, and puts the answer, or ebb's error
// response, into ctx. The response body streams to the client.
func (l *listener) forwardHTTP(ctx *fasthttp.RequestCtx, r *route, body *reqBody) int {
	ep := r.cluster.pick()
	if ep == nil {
		localReply(ctx, fasthttp.StatusServiceUnavailable, msgNoEndpoint)
		return fasthttp.StatusServiceUnavailable
	}
	req := &ctx.Request
	uri := req.URI()
	out := &http.Request{
		Method: string(req.Header.Method()),
		URL:    &url.URL{Scheme: r.cluster.scheme, Host: ep.addr, Opaque: string(uri.PathOriginal()), RawQuery: string(uri.QueryString())},
		Host:   string(req.Header.Host()),
		Header: make(http.Header, req.Header.Len()),
	}
	if strings.HasPrefix(out.URL.Opaque, "//") {
		// An opaque "//..." would read as a scheme-relative URL.
		out.URL.Opaque, out.URL.Path = "", out.URL.Opaque
	}
	if out.Host == "" {
		out.Host = ep.addr // HTTP/1.0 without Host
	}
	for k, v := range req.Header.All() {
		switch string(k) {
		case "Host", "Content-Length", "Transfer-Encoding", "Trailer":
			continue // framing is the transport's; Host is set above
		}
		key := string(k)
		out.Header[key] = append(out.Header[key], string(v))
	}
	if body != nil {
		out.ContentLength = int64(req.Header.ContentLength())
		if out.ContentLength < 0 {
			out.ContentLength = -1 // chunked: unknown
			// A chunked body may end with trailers; the transport
			// announces the names the client announced and sends what
			// the map holds when the body ends.
			out.Trailer = http.Header{}
			for _, name := range req.Header.PeekTrailerKeys() {
				out.Trailer[string(name)] = nil
			}
			body.onEOF = func() {
				// The trailer section as received (Peek may find an
				// empty header-section entry of the same name first).
				for line := range bytes.SplitSeq(req.Header.TrailerHeader(), []byte("\r\n")) {
					if k, v, ok := bytes.Cut(line, []byte(":")); ok {
						k := http.CanonicalHeaderKey(string(k))
						out.Trailer[k] = append(out.Trailer[k], string(bytes.TrimSpace(v)))
					}
				}
			}
		}
	}
	r.cluster.budget.request(ctx.Time())
	// A retry's copy of the request must keep the trailer map onEOF fills.
	trailer := out.Trailer
	keepTrailer := func(o *http.Request) { o.Trailer = trailer }
	resp, ep, err := r.cluster.exchangeHTTP(context.Background(), ep, out, body, keepTrailer, l.p.log)
	if err != nil {
		body.stopAttempt()
		return l.upstreamFailed(ctx, r, ep, body, err)
	}
	fr := &ctx.Response
	fr.SetStatusCode(resp.StatusCode)
	endToEnd(resp.Header, func(k string, vv []string) {
		if k == "Content-Length" {
			return // the body stream's length is set below
		}
		for _, v := range vv {
			fr.Header.Add(k, v)
		}
	})
	if _, ok := resp.Header["Content-Type"]; !ok {
		fr.Header.SetNoDefaultContentType(true)
	}
	s := resp.StatusCode
	if req.Header.IsHead() || s < 200 || s == http.StatusNoContent || s == http.StatusNotModified {
		resp.Body.Close()
		ep.release()
		body.stopAttempt()
		fr.SkipBody = true
		if resp.ContentLength >= 0 {
			fr.Header.SetContentLength(int(resp.ContentLength))
		}
		return s
	}
	size := max(resp.ContentLength, -1)
	if len(resp.Trailer) > 0 {
		// Announced trailers need chunked framing on HTTP/1.1 (an HTTP/2
		// response may have both a length and trailers).
		size = -1
	}
	if body != nil {
		body.hold() // for the response body: see httpBody.Close
	}
	fr.SetBodyStream(&httpBody{ReadCloser: resp.Body, ep: ep, resp: resp, down: &fr.Header, req: body}, int(size))
	return s
}

// httpBody is a net/http response body on its way to an HTTP/1 client;
// fasthttp closes it once written, which ends the exchange. Trailers
// arrive with the body's end and join the downstream trailer section
// (sent when the body is chunked).
type httpBody struct {
	io.ReadCloser
	ep   *endpoint
	resp *http.Response
	down *fasthttp.ResponseHeader
	// req is the request's body, if any: net/http may still be sending
	// it (full duplex), but the client's connection is fasthttp's again
	// once the response is written.
	req  *reqBody
	once sync.Once
}

func (b *httpBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		for k, vv := range b.resp.Trailer {
			if b.down.AddTrailer(k) != nil {
				continue // a name HTTP/1.1 forbids in trailers
			}
			for _, v := range vv {
				b.down.Add(k, v)
			}
		}
	}
	return n, err
}

func (b *httpBody) Close() error {
	err := b.ReadCloser.Close()
	b.once.Do(func() {
		b.ep.release()
		if b.req != nil {
			b.req.stopAttempt()
			b.req.release()
		}
	})
	return err
}

// upstreamFailed answers for a failed exchange and returns the status.
func (l *listener) upstreamFailed(ctx *fasthttp.RequestCtx, r *route, ep *endpoint, body *reqBody, err error) int {
	if err := body.failed(); err != nil {
		// The client, not the upstream, failed: it sent too much, or
		// stopped sending. Either way its connection cannot be reused.
		if errors.Is(err, errBodyTooLarge) {
			localReply(ctx, fasthttp.StatusRequestEntityTooLarge, msgBodyTooLarge)
			ctx.Response.SetConnectionClose()
			lingerOnClose(ctx)
			return fasthttp.StatusRequestEntityTooLarge
		}
		localReply(ctx, fasthttp.StatusBadRequest, "ebb: could not read the request body\n")
		ctx.Response.SetConnectionClose()
		return fasthttp.StatusBadRequest
	}
	status, msg := l.failure(context.Background(), r, ep, nil, err)
	localReply(ctx, status, msg)
	return status
}

// localReply replaces the response with one ebb makes itself.
func localReply(ctx *fasthttp.RequestCtx, status int, msg string) {
	resp := &ctx.Response
	resp.Reset()
	resp.SetStatusCode(status)
	resp.Header.SetContentType("text/plain; charset=utf-8")
	resp.SetBodyString(msg)
}
