package upstream

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"sync"

	"github.com/valyala/fasthttp"
)

// An auto cluster's endpoint whose TLS handshake negotiated HTTP/1.1 is
// reached through the HTTP/1 transport, as an http1 cluster's are. The
// engines build requests to auto clusters in net/http's form (an endpoint
// learns which protocol it speaks only at its first connection, and a
// retry may go to another that speaks the other one), so RoundTripHTTP
// carries such a request over to fasthttp's form and the answer back.
// It is the rare path; an endpoint that speaks HTTP/2 is package
// h2client's.

// RoundTripHTTP sends out through t, the HTTP/1 transport of an endpoint
// of an auto cluster, and returns the answer in net/http's form. a is the
// attempt's body (nil: none): written whole before the response is read,
// or, when its Body is FullDuplex, while it is read. out.Trailer's names
// are announced, and its values, which the body's end fills in, follow
// the last chunk. ctx is as for transport.RoundTrip. The exchange is over
// once the response body is closed.
func RoundTripHTTP(ctx context.Context, t H1, out *http.Request, a *Attempt) (*http.Response, error) {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	fastRequest(out, a, req)
	if err := t.RoundTrip(ctx, req, resp); err != nil {
		fasthttp.ReleaseRequest(req)
		fasthttp.ReleaseResponse(resp)
		return nil, err // the caller ends the attempt
	}
	return stdResponse(req, resp, a), nil
}

// fastRequest puts out into req, with a (nil: none) as its body.
func fastRequest(out *http.Request, a *Attempt, req *fasthttp.Request) {
	h := &req.Header
	// Names as the engines wrote them, already canonical.
	h.DisableNormalizing()
	h.SetMethod(out.Method)
	req.SetRequestURI(out.URL.RequestURI())
	host := out.Host
	if host == "" {
		host = out.URL.Host
	}
	h.SetHost(host)
	for k, vv := range out.Header {
		for _, v := range vv {
			h.Add(k, v)
		}
	}
	if a == nil {
		return
	}
	b := &attemptStream{a: a}
	size := out.ContentLength
	if size <= 0 || len(out.Trailer) > 0 {
		size = -1 // chunked: unknown, or followed by trailers
	}
	for name := range out.Trailer {
		// A name HTTP/1.1 forbids in trailers is left out, as its value.
		_ = h.AddTrailer(name)
	}
	if len(out.Trailer) > 0 {
		b.a.onEOF = func() {
			for k, vv := range out.Trailer {
				for _, v := range vv {
					h.Add(k, v) // into the trailer section: announced above
				}
			}
		}
	}
	req.SetBodyStream(b, int(size))
}

// attemptStream is an Attempt as the HTTP/1 transport's request body:
// not an io.Closer, so that fasthttp does not end the attempt when it
// drops the stream (the full-duplex writer puts itself in the stream's
// place); the response body's end does (see bridgedBody.release), or the
// failed exchange's.
type attemptStream struct{ a *Attempt }

func (s *attemptStream) Read(p []byte) (int, error) { return s.a.Read(p) }
func (s *attemptStream) Complete() bool             { return s.a.b.Complete() }
func (s *attemptStream) fullDuplex() bool           { return s.a.b.FullDuplex }
func (s *attemptStream) interrupt()                 { s.a.End(false) }

// stdResponse returns resp, the answer to req, in net/http's form. Its
// body keeps both until it is closed.
func stdResponse(req *fasthttp.Request, resp *fasthttp.Response, a *Attempt) *http.Response {
	status := resp.StatusCode()
	out := &http.Response{
		Status:     strconv.Itoa(status) + " " + http.StatusText(status),
		StatusCode: status,
		Proto:      "HTTP/1.1",
		ProtoMajor: 1,
		ProtoMinor: 1,
		Header:     make(http.Header, resp.Header.Len()),
	}
	for k, v := range resp.Header.All() {
		switch string(k) {
		case "Transfer-Encoding", "Trailer":
			continue // framing: net/http's responses have neither
		}
		key := http.CanonicalHeaderKey(string(k))
		out.Header[key] = append(out.Header[key], string(v))
	}
	for name := range resp.Header.Trailers() {
		if out.Trailer == nil {
			out.Trailer = make(http.Header)
		}
		out.Trailer[http.CanonicalHeaderKey(string(name))] = nil
	}
	b := &bridgedBody{req: req, resp: resp, out: out, a: a}
	out.ContentLength = int64(max(resp.Header.ContentLength(), -1))
	switch s := resp.BodyStream(); {
	case s != nil:
		b.r, b.stream = s, true
	case resp.SkipBody:
		out.Body = http.NoBody
		b.release()
		return out
	default:
		out.ContentLength = int64(len(resp.Body()))
		b.r = bytes.NewReader(resp.Body())
	}
	out.Body = b
	return out
}

// errBodyClosed is a read of a bridged response body after its close.
var errBodyClosed = errors.New("upstream: read of a closed response body")

// bridgedBody is the body of a response of the HTTP/1 transport in
// net/http's form. As net/http's, it may be closed while a read waits for
// the upstream (a relay cutting an event stream does): the read is woken,
// and whichever of the two ends last lets the exchange go.
type bridgedBody struct {
	req    *fasthttp.Request
	resp   *fasthttp.Response
	out    *http.Response
	a      *Attempt // the request's body (nil: none)
	r      io.Reader
	stream bool // r is the transport's stream: closing it ends the exchange

	mu      sync.Mutex
	reading bool
	closed  bool
}

func (b *bridgedBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return 0, errBodyClosed
	}
	b.reading = true
	b.mu.Unlock()

	n, err := b.r.Read(p)
	if err == io.EOF && b.stream {
		// The transport has added the upstream's trailers, announced or
		// not, to the header.
		for name := range b.resp.Header.Trailers() {
			if v := b.resp.Header.PeekBytes(name); len(v) > 0 {
				if b.out.Trailer == nil {
					b.out.Trailer = make(http.Header)
				}
				b.out.Trailer[http.CanonicalHeaderKey(string(name))] = []string{string(v)}
			}
		}
	}

	b.mu.Lock()
	b.reading = false
	last := b.closed // closed during the read: the release is this read's
	b.mu.Unlock()
	if last {
		b.release()
	}
	return n, err
}

// Close ends the exchange: the connection goes back to the pool if the
// body was read to its end, else it is closed.
func (b *bridgedBody) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	if b.reading {
		// Under the lock: the read cannot have ended and released yet.
		if s, ok := b.r.(CutBody); ok {
			s.Interrupt() // the read returns, and releases
		}
		b.mu.Unlock()
		return nil
	}
	b.mu.Unlock()
	b.release()
	return nil
}

// release lets go of the exchange, once: from Close, or from the read
// that Close interrupted.
func (b *bridgedBody) release() {
	if b.stream {
		_ = b.resp.CloseBodyStream() // waits for a full-duplex writer
	}
	if b.a != nil {
		// Nothing reads it any more: the request went out whole before the
		// response was read, or its writer has ended.
		b.a.End(false)
	}
	fasthttp.ReleaseRequest(b.req)
	fasthttp.ReleaseResponse(b.resp)
}
