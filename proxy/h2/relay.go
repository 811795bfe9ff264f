// The exchange with the upstream (call.Send) and the relay of its
// response to the client, or ebb's own answer (call.Reply).

package h2

import (
	"errors"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"golang.org/x/net/http2"

	"github.com/ebb-proxy/ebb/proxy/cluster"
	"github.com/ebb-proxy/ebb/proxy/events"
	"github.com/ebb-proxy/ebb/proxy/forward"
	"github.com/ebb-proxy/ebb/proxy/h2client"
	"github.com/ebb-proxy/ebb/proxy/headers"
	"github.com/ebb-proxy/ebb/proxy/route"
	"github.com/ebb-proxy/ebb/proxy/upstream"
)

// Send relays the request to ep by the cluster's transport.
func (c *call) Send(rt *route.Route, ep *cluster.Endpoint) (int, *cluster.Endpoint, error) {
	if c.h2up {
		return c.sendH2(rt, ep)
	}
	if c.out != nil {
		return c.sendHTTP(rt, ep)
	}
	return c.sendH1(rt, ep)
}

// sendH1 exchanges with an HTTP/1 upstream and relays the response. A
// streamed request body may still be going up meanwhile (full duplex:
// see upstream.Body.FullDuplex); the transport is done with it once the
// response body is closed.
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
	if err != nil && c.upstreamCancelled(rt, ep, err) {
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
	// The body is over: closing it now gives the upstream connection back
	// (an auto endpoint's HTTP/1.1 one) before the client sees the end and
	// sends its next request, as sendH1 does.
	resp.Body.Close()
	c.relayErr = st.End()
	return resp.StatusCode, ep, nil
}

// sendH2 exchanges with an h2c or h2 upstream in HTTP/2's own form, full
// duplex: the request body streams up while the response streams down;
// the upstream's fields, the header rules applied, go to the client's
// header block as they were decoded. Trailers follow the body.
func (c *call) sendH2(rt *route.Route, ep *cluster.Endpoint) (int, *cluster.Endpoint, error) {
	st := c.st
	up, ep, err := rt.Cluster.ExchangeH2(st.Context(), ep, &c.h2r, c.body, &c.trip, c.l.Log)
	if err != nil {
		if c.upstreamCancelled(rt, ep, err) {
			return http.StatusBadGateway, ep, nil
		}
		if errors.Is(err, h2client.ErrDeadline) {
			// The call's grpc-timeout passed: its stream is cancelled,
			// as the upstream would have cancelled it.
			rt.Cluster.Metrics().UpstreamError(upstream.KindTimeout)
			c.relayErr, c.resetCode = err, http2.ErrCodeCancel
			return http.StatusGatewayTimeout, ep, nil
		}
		return 0, ep, err
	}
	if !c.h2r.Deadline.IsZero() && !up.Received() {
		// The deadline bounds the whole call: a response still streaming
		// then is cut, both streams cancelled. One that has arrived whole
		// (a unary call's, mostly) leaves nothing upstream to cancel, and
		// its client keeps its own deadline: no timer for it.
		t := time.AfterFunc(time.Until(c.h2r.Deadline), func() { up.Cancel(h2client.ErrDeadline) })
		defer t.Stop()
	}
	defer func() {
		// The upstream stream's end closes what it still reads of the
		// client's body; its writer returns before the handler does, so
		// that the client's stream can be pooled.
		up.Close()
		up.Wait()
		ep.Release()
	}()
	status := up.Status()
	h := up.Header()
	headers.WireResponse(h, c.l.Table().ViaFor(2))
	for i := range h.Len() {
		k, v := h.At(i)
		if bodyless(status) && string(k) == "content-length" {
			continue // as the HTTP/1 transport does: nothing frames what is not there
		}
		st.AddHeader(k, v)
	}
	if bodyless(status) || string(st.Method()) == http.MethodHead || up.Ended() {
		// A 204, a 304 or a HEAD answer ends with its header block (RFC
		// 9113 §8.1.1), whatever DATA the upstream sends after it; a
		// response that ended with its head stays one HEADERS frame (a
		// gRPC server's trailers-only answer). Closing the stream
		// resets the upstream's, if it is not over.
		c.relayErr = st.WriteHeader(status, true)
		return status, ep, nil
	}
	var body io.Reader = up
	if events.IsEventStream(string(h.Get("content-type"))) {
		// An event stream ends on an event boundary at the connection's
		// close signal (its GOAWAY); closing the upstream stream wakes a
		// read waiting for it.
		if cut, done := c.l.EventStream(c.conn, up.ContentLength(), up.Close); done != nil {
			defer done()
			if cut != nil {
				body = cut.Reader(body)
			}
		}
	}
	if err := st.WriteHeader(status, false); err != nil {
		c.relayErr = err
		return status, ep, nil
	}
	if c.sent, err = copyBody(st, body); err != nil {
		c.relayErr = err
		var se http2.StreamError
		switch {
		case errors.Is(err, h2client.ErrDeadline):
			c.resetCode = http2.ErrCodeCancel
		case errors.As(err, &se) && se.Code != http2.ErrCodeNo:
			// The upstream reset its stream: the client's is reset with
			// the same code (CANCEL from a gRPC server is a cancelled
			// call, not an internal error).
			c.resetCode = se.Code
		}
		return status, ep, nil
	}
	t := up.Trailer()
	for i := range t.Len() {
		k, v := t.At(i)
		st.AddHeader(k, v)
	}
	c.relayErr = st.End()
	return status, ep, nil
}

// upstreamCancelled handles an upstream that cancelled the stream before
// answering (a gRPC server does at the call's deadline): the client's
// stream is cancelled in turn, which tells it more than a 502 would (gRPC
// reports the deadline it set).
func (c *call) upstreamCancelled(rt *route.Route, ep *cluster.Endpoint, err error) bool {
	var se http2.StreamError
	if !errors.As(err, &se) || se.Code != http2.ErrCodeCancel || c.st.Context().Err() != nil {
		return false
	}
	rt.Cluster.Metrics().UpstreamError(upstream.KindBroken)
	c.l.Log.Debug("upstream cancelled the stream; cancelling the client's", "listener", c.l.Config.Name, "cluster", rt.Cluster.Name(), "endpoint", ep.Addr())
	c.relayErr, c.resetCode = err, http2.ErrCodeCancel
	return true
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
