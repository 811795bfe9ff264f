package proxy

import (
	"context"
	"errors"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/ebb-proxy/ebb/drain"
)

// serveHTTP2 serves one HTTP/2 stream: route, forward, answer. The engine
// runs it on a goroutine of its own per stream. r.Context() ends when the
// client resets the stream or the connection is gone, never at a graceful
// shutdown, so it is the right context for the upstream request.
func (l *listener) serveHTTP2(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	conn, _ := r.Context().Value(connKey{}).(*drain.Conn)
	if l.p.reg.Draining() {
		l.p.reg.Stats.Requests.Add(1)
	}
	t := l.p.snap.Load().tables[l.idx]
	if r.Method == http.MethodConnect {
		l.rejectH2(w, r, conn, t.noRoute, "", http.StatusMethodNotAllowed, "ebb: CONNECT is not supported\n", start)
		return
	}
	path, _, _ := strings.Cut(r.RequestURI, "?")
	rt := t.matchString(r.Host, path)
	if rt == nil {
		l.rejectH2(w, r, conn, t.noRoute, "", http.StatusNotFound, "ebb: no route for this request\n", start)
		return
	}
	limit := int64(l.cfg.Limits.MaxBodyBytes)
	if limit > 0 && r.ContentLength > limit {
		l.rejectH2(w, r, conn, rt.metrics, rt.cluster.name, http.StatusRequestEntityTooLarge, msgBodyTooLarge, start)
		return
	}
	var body *reqBody
	if r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0 {
		body = acquireReqBody(r.Body, nil, limit, r.ContentLength, 0)
		defer body.release()
		// With trailers announced, the body streams: they come after it.
		if len(r.Trailer) == 0 && body.bufferable(rt.cluster.cfg.Retries.BufferBody) {
			if err := body.fill(); err != nil {
				status, msg := l.failure(r.Context(), rt, nil, body, err)
				l.rejectH2(w, r, conn, rt.metrics, rt.cluster.name, status, msg, start)
				return
			}
		}
	}
	var status int
	var err error
	if rt.cluster.netHTTP {
		status, err = l.h2ToHTTP(w, r, conn, rt, body)
	} else {
		status, err = l.h2ToH1(w, r, conn, rt, body)
	}
	rt.metrics.record(drain.ProtoHTTP2, status, start)
	l.logAccessH2(r, conn, rt.cluster.name, status, start)
	if err != nil {
		// The client is gone, or the upstream failed mid-body: the
		// stream must end in a reset, not look complete. The engine
		// resets it, quietly, on this panic.
		l.p.log.Debug("response body not relayed whole", "listener", l.cfg.Name, "cluster", rt.cluster.name, "err", err)
		panic(http.ErrAbortHandler)
	}
}

// rejectH2 answers a request ebb will not forward, and counts it.
func (l *listener) rejectH2(w http.ResponseWriter, r *http.Request, conn *drain.Conn, rm *routeMetrics, cluster string, status int, msg string, start time.Time) {
	replyH2(w, status, msg)
	rm.record(drain.ProtoHTTP2, status, start)
	l.logAccessH2(r, conn, cluster, status, start)
}

// replyH2 writes a response ebb makes itself.
func replyH2(w http.ResponseWriter, status int, msg string) {
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("Content-Length", strconv.Itoa(len(msg)))
	w.WriteHeader(status)
	_, _ = io.WriteString(w, msg)
}

func (l *listener) logAccessH2(r *http.Request, conn *drain.Conn, cluster string, status int, start time.Time) {
	if l.p.access == nil {
		return
	}
	var client string
	if conn != nil {
		client = string(conn.ClientIP)
	}
	l.logAccess(client, r.Method, r.Host, r.RequestURI, cluster, status, -1, start)
}

// scratchPool holds buffers for building header values of HTTP/2
// requests, which, unlike HTTP/1 ones, run concurrently on one connection
// and so cannot share the connection's scratch buffer.
var scratchPool = sync.Pool{New: func() any { return new([]byte) }}

// h2ToH1 forwards an HTTP/2 request to an HTTP/1 upstream through the
// same transport HTTP/1 requests use. It returns the status sent, and an
// error if the response body could not be relayed whole.
func (l *listener) h2ToH1(w http.ResponseWriter, r *http.Request, conn *drain.Conn, rt *route, body *reqBody) (int, error) {
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)

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
	case body != nil && body.buffered:
		req.SetBodyRaw(body.buf) // the transport can send it again
	case body != nil:
		req.SetBodyStream(body, int(r.ContentLength))
	}
	var clientIP []byte
	if conn != nil {
		clientIP = conn.ClientIP
	}
	scratch := scratchPool.Get().(*[]byte)
	*scratch = l.prepareRequest(req, clientIP, r.TLS != nil, *scratch)
	scratchPool.Put(scratch)
	if body != nil && len(r.Trailer) > 0 {
		// Announced trailers follow the body: the engine fills in
		// r.Trailer when the body ends, and fasthttp writes them after
		// the last chunk.
		for k := range r.Trailer {
			_ = req.Header.AddTrailer(k) // names HTTP/1.1 forbids are dropped
		}
		body.onEOF = func() {
			for k, vv := range r.Trailer {
				for _, v := range vv {
					req.Header.Add(k, v)
				}
			}
		}
	}

	ep := rt.cluster.pick()
	if ep == nil {
		replyH2(w, http.StatusServiceUnavailable, msgNoEndpoint)
		return http.StatusServiceUnavailable, nil
	}
	rt.cluster.budget.request(time.Now())
	if ep, err := rt.cluster.exchangeH1(r.Context(), ep, req, resp, l.p.log); err != nil {
		status, msg := l.failure(r.Context(), rt, ep, body, err)
		replyH2(w, status, msg)
		return status, nil
	}
	stripResponseHopByHop(&resp.Header, false)
	wh := w.Header()
	fillHeader(wh, &resp.Header)
	if _, ok := wh["Content-Type"]; !ok {
		wh["Content-Type"] = nil // the engine would guess one
	}
	status := resp.StatusCode()
	w.WriteHeader(status)
	if s := resp.BodyStream(); s != nil {
		err := copyBody(w, s, resp.Header.ContentLength() < 0)
		_ = resp.CloseBodyStream() // gives the upstream connection back, or closes it
		// The upstream's trailers, received with the body's end.
		for name := range resp.Header.Trailers() {
			if v := resp.Header.PeekBytes(name); len(v) > 0 {
				key := http.TrailerPrefix + string(name)
				wh[key] = append(wh[key], string(v))
			}
		}
		return status, err
	}
	if b := resp.Body(); len(b) > 0 {
		_, _ = w.Write(b) // a failure is the client's, and the handler ends anyway
	}
	return status, nil
}

// fillHeader copies a fasthttp response header into an http.Header with
// three allocations whatever the number of fields: one string holding
// every value, one slice of value slices, and the keys, which for common
// fields are constants.
func fillHeader(dst http.Header, src *fasthttp.ResponseHeader) {
	n, size := 0, 0
	for k, v := range src.All() {
		if string(k) != "Connection" {
			n++
			size += len(v)
		}
	}
	buf := make([]byte, 0, size)
	for k, v := range src.All() {
		if string(k) != "Connection" {
			buf = append(buf, v...)
		}
	}
	all := string(buf)
	vals := make([]string, n)
	i, off := 0, 0
	for k, v := range src.All() {
		if string(k) == "Connection" {
			continue // "close", kept by fasthttp apart from the other fields
		}
		vals[i] = all[off : off+len(v)]
		off += len(v)
		key := commonHeaderKey(k)
		if prev, ok := dst[key]; ok {
			dst[key] = append(prev, vals[i])
		} else {
			dst[key] = vals[i : i+1 : i+1]
		}
		i++
	}
}

// commonHeaderKey returns k as a string, without allocating for the
// fields most responses carry.
func commonHeaderKey(k []byte) string {
	switch string(k) {
	case "Content-Type":
		return "Content-Type"
	case "Content-Length":
		return "Content-Length"
	case "Date":
		return "Date"
	case "Server":
		return "Server"
	case "Cache-Control":
		return "Cache-Control"
	case "Etag":
		return "Etag"
	case "Last-Modified":
		return "Last-Modified"
	case "Vary":
		return "Vary"
	case "Set-Cookie":
		return "Set-Cookie"
	case "Content-Encoding":
		return "Content-Encoding"
	}
	return string(k)
}

// h2ToHTTP forwards an HTTP/2 request to an h2c, h2 or auto upstream, full
// duplex: the request body streams up while the response streams down.
// Trailers follow the body. It returns like h2ToH1.
func (l *listener) h2ToHTTP(w http.ResponseWriter, r *http.Request, conn *drain.Conn, rt *route, body *reqBody) (int, error) {
	ep := rt.cluster.pick()
	if ep == nil {
		replyH2(w, http.StatusServiceUnavailable, msgNoEndpoint)
		return http.StatusServiceUnavailable, nil
	}
	out := r.Clone(r.Context())
	out.RequestURI = ""
	out.URL.Scheme, out.URL.Host = rt.cluster.scheme, ep.addr
	out.Host = r.Host
	// The engine fills in the request's trailers when its body ends, in
	// r.Trailer itself: the transport must read that map, not a copy.
	out.Trailer = r.Trailer
	var clientIP []byte
	if conn != nil {
		clientIP = conn.ClientIP
	}
	prepareHeader(out.Header, clientIP, r.TLS != nil, l.cfg.Headers.TrustForwarded, r.Host)

	rt.cluster.budget.request(time.Now())
	// A retry's copy of the request must keep reading the trailer map the
	// engine fills in (see above).
	keepTrailer := func(o *http.Request) { o.Trailer = r.Trailer }
	resp, ep, err := rt.cluster.exchangeHTTP(r.Context(), ep, out, body, keepTrailer, l.p.log)
	if err != nil {
		status, msg := l.failure(r.Context(), rt, ep, body, err)
		replyH2(w, status, msg)
		return status, nil
	}
	defer ep.release()
	defer resp.Body.Close()
	wh := w.Header()
	copyResponseHeader(wh, resp.Header)
	if _, ok := wh["Content-Type"]; !ok {
		wh["Content-Type"] = nil // the engine would guess one
	}
	w.WriteHeader(resp.StatusCode)
	if err := copyBody(w, resp.Body, resp.ContentLength < 0); err != nil {
		return resp.StatusCode, err
	}
	for k, vv := range resp.Trailer {
		wh[http.TrailerPrefix+k] = vv
	}
	return resp.StatusCode, nil
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

// prepareHeader applies the header rules to a request header going to an
// upstream through net/http: hop-by-hop headers go (but "TE: trailers",
// which HTTP/2 allows and gRPC servers expect, stays), Expect goes (the
// body is sent without waiting), Forwarded goes unless trusted, and
// X-Forwarded-* are set as single lines.
func prepareHeader(h http.Header, clientIP []byte, tls, trust bool, host string) {
	for _, line := range h["Connection"] {
		for opt := range strings.SplitSeq(line, ",") {
			opt = strings.TrimSpace(opt)
			if opt != "" && !isProtected([]byte(opt)) {
				h.Del(opt)
			}
		}
	}
	teTrailers := false
	for _, v := range h["Te"] {
		for opt := range strings.SplitSeq(v, ",") {
			if name, _, _ := strings.Cut(opt, ";"); strings.EqualFold(strings.TrimSpace(name), "trailers") {
				teTrailers = true
			}
		}
	}
	for _, name := range hopByHop {
		delete(h, name)
	}
	if teTrailers {
		h["Te"] = []string{"trailers"}
	}
	delete(h, "Expect")
	if !trust {
		delete(h, "Forwarded")
	}
	xff := strings.Join(h["X-Forwarded-For"], ", ")
	switch {
	case xff == "":
		xff = string(clientIP)
	case len(clientIP) > 0:
		xff += ", " + string(clientIP)
	}
	if xff != "" {
		h["X-Forwarded-For"] = []string{xff}
	}
	proto := "http"
	if tls {
		proto = "https"
	}
	setHeaderOnce(h, "X-Forwarded-Proto", proto, trust)
	setHeaderOnce(h, "X-Forwarded-Host", host, trust)
}

func setHeaderOnce(h http.Header, name, value string, trust bool) {
	if _, ok := h[name]; ok && trust {
		return
	}
	if value == "" {
		delete(h, name)
		return
	}
	h[name] = []string{value}
}

// copyResponseHeader copies an upstream response's header without its
// hop-by-hop headers (an HTTP/2 client must never see them).
func copyResponseHeader(dst, src http.Header) {
	endToEnd(src, func(k string, vv []string) { dst[k] = append(dst[k], vv...) })
}

// endToEnd calls f for each header of src that is not hop-by-hop: not
// one of the usual ones, not Transfer-Encoding, not named by Connection.
func endToEnd(src http.Header, f func(k string, vv []string)) {
	var named []string
	for _, line := range src["Connection"] {
		for opt := range strings.SplitSeq(line, ",") {
			if opt = strings.TrimSpace(opt); opt != "" {
				named = append(named, http.CanonicalHeaderKey(opt))
			}
		}
	}
	for k, vv := range src {
		if hopBit([]byte(k)) != 0 || k == "Transfer-Encoding" || slices.Contains(named, k) && !isProtected([]byte(k)) {
			continue
		}
		f(k, vv)
	}
}

// failure classifies a failed upstream exchange, logs and counts it, and
// returns the status and body to answer with. ctx is the client's side of
// the request: when it has ended, the client left and nothing is blamed on
// the upstream.
func (l *listener) failure(ctx context.Context, rt *route, ep *endpoint, body *reqBody, err error) (int, string) {
	if ctx != nil && ctx.Err() != nil {
		// 499, as nginx logs it: the client closed the request (a body
		// that could not be read then is its doing too).
		return statusClientClosed, "ebb: client closed the request\n"
	}
	if err := body.failed(); err != nil {
		if errors.Is(err, errBodyTooLarge) {
			return http.StatusRequestEntityTooLarge, msgBodyTooLarge
		}
		return http.StatusBadRequest, "ebb: could not read the request body\n"
	}
	var kind errKind
	var ue *upstreamError
	if errors.As(err, &ue) {
		kind = ue.kind
	} else {
		kind, _ = classifyHTTPError(err)
	}
	rt.cluster.metrics.upstreamError(kind)
	status, msg := http.StatusBadGateway, "ebb: upstream failed\n"
	switch kind {
	case errConnect:
		msg = "ebb: upstream connect failed\n"
	case errOverloaded:
		status, msg = http.StatusServiceUnavailable, "ebb: upstream connection limit reached\n"
	case errTimeout:
		status, msg = http.StatusGatewayTimeout, "ebb: upstream timed out\n"
	case errRefused:
		status, msg = http.StatusServiceUnavailable, "ebb: upstream refused the request\n"
	}
	l.p.log.Warn("upstream error", "listener", l.cfg.Name, "cluster", rt.cluster.name,
		"endpoint", ep.addr, "kind", errKindNames[kind], "status", status, "err", err)
	return status, msg
}

// statusClientClosed is recorded for requests whose client left before
// the answer (it never reaches the client).
const statusClientClosed = 499

const msgNoEndpoint = "ebb: no upstream endpoint available\n"
