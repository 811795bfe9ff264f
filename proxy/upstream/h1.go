package upstream

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/ebb-proxy/ebb/config"
	"github.com/ebb-proxy/ebb/proxy/events"
)

// maxBufferedBody is the largest response body with a known length that is
// read whole before it is written downstream. Up to this size buffering
// frees the upstream connection sooner and costs nothing per request;
// anything larger, or of unknown length, is streamed through.
const maxBufferedBody = 64 << 10

// ReadBufferSize bounds an upstream response's status line and headers.
const ReadBufferSize = 16 << 10

var http11 = []byte("HTTP/1.1")

// pooledConn is what fasthttp's HostClient hands out: its clientConn type
// is unexported, so the transport is generic over it.
type pooledConn interface {
	Conn() net.Conn
}

// H1 sends requests to one endpoint over HTTP/1.1.
type H1 interface {
	// RoundTrip writes req and reads the response into resp; see
	// transport.RoundTrip.
	RoundTrip(ctx context.Context, req *fasthttp.Request, resp *fasthttp.Response) error
	// CloseIdle closes the idle connections of the pool.
	CloseIdle()
}

// transport drives one exchange over a connection of a fasthttp HostClient:
// HostClient owns dialling and the pool (most recent first, idle ones
// closed after the cluster's idle timeout); the transport owns the exchange,
// so that it can read small bodies whole, stream large ones without
// allocating, and classify failures precisely.
//
// All fields are read-only after construction.
type transport[C pooledConn] struct {
	hc              *fasthttp.HostClient
	acquire         func(time.Duration, bool) (C, error)
	release         func(C)
	discard         func(C)
	responseTimeout time.Duration
	// done is called when an exchange is over (the caller counted it in
	// before RoundTrip): it takes it off the endpoint's in-flight count.
	done     func()
	streams  sync.Pool // of *bodyStream[C]
	duplexes sync.Pool // of *duplex (see exchangeDuplex)
}

// NewH1 returns the HTTP/1.1 transport to the endpoint at addr of a
// cluster configured by cfg. dial opens its connections (wrapped in
// NewConn); done is called when an exchange is over, as RoundTrip's
// caller counted it in before.
func NewH1(addr string, cfg *config.Cluster, dial func() (net.Conn, error), done func()) H1 {
	hc := &fasthttp.HostClient{
		Addr:                     addr,
		Dial:                     func(string) (net.Conn, error) { return dial() },
		MaxConns:                 cfg.MaxConnsPerEndpoint,
		MaxIdleConnDuration:      cfg.Timeouts.Idle,
		MaxConnWaitTimeout:       cfg.Timeouts.Connect,
		ReadBufferSize:           ReadBufferSize,
		NoDefaultUserAgentHeader: true,
		DisablePathNormalizing:   true,
		// Most recently used first: the connection least likely to have
		// been closed by the upstream's keep-alive timeout.
		ConnPoolStrategy: fasthttp.LIFO,
	}
	return newTransportOf(hc, hc.AcquireConn, hc.ReleaseConn, hc.CloseConn, cfg.Timeouts.Response, done)
}

func newTransportOf[C pooledConn](hc *fasthttp.HostClient, acquire func(time.Duration, bool) (C, error), release, discard func(C), responseTimeout time.Duration, done func()) *transport[C] {
	t := &transport[C]{hc: hc, acquire: acquire, release: release, discard: discard, responseTimeout: responseTimeout, done: done}
	t.streams.New = func() any { return &bodyStream[C]{t: t} }
	t.duplexes.New = func() any { return &duplex{done: make(chan struct{}, 1)} }
	return t
}

func (t *transport[C]) CloseIdle() { t.hc.CloseIdleConnections() }

func (t *transport[C]) finish() { t.done() }

// earlyAnswerWait bounds the wait for an upstream's answer after it
// stopped reading the request body.
const earlyAnswerWait = time.Second

// maxStaleAttempts bounds how many pooled connections one request tries
// when each turns out to have been closed by the upstream while idle.
const maxStaleAttempts = 4

// RoundTrip writes req and reads the response into resp. The exchange is
// over (and the in-flight count taken down) when RoundTrip returns, except
// for a streamed body, where it is over when the stream is closed. A
// request body marked FullDuplex is written while the response is read
// (see exchangeDuplex); any other request is written whole first.
//
// A pooled connection that the upstream closed while it sat idle fails
// before any response byte: the classic keep-alive race. The request is
// then sent again on another connection when that is safe (see
// sendAgain); sending it to another endpoint is a policy decision made
// above the transport.
//
// When ctx ends (an HTTP/2 client reset its stream), the upstream
// connection is closed, which ends the exchange. HTTP/1 requests pass a
// context that never ends: their client's leaving shows as a failed write.
func (t *transport[C]) RoundTrip(ctx context.Context, req *fasthttp.Request, resp *fasthttp.Response) error {
	// Decided before the first attempt: writing a streamed body consumes
	// it and takes it off the request.
	idempotent, replayable := IsIdempotent(req), req.BodyStream() == nil
	for attempt := 1; ; attempt++ {
		streamed, err := t.exchange(ctx, req, resp)
		if streamed {
			return nil // the stream finishes the exchange when closed
		}
		if err != nil && replayable && attempt < maxStaleAttempts && ctx.Err() == nil {
			if ue, ok := err.(*Error); ok && sendAgain(ue, idempotent) {
				resp.Reset()
				continue
			}
		}
		t.finish()
		return err
	}
}

// sendAgain reports whether the transport sends a request that failed with
// ue again itself, on another connection to the same endpoint: only after
// the keep-alive race, when that is safe. Any other failure says something
// about the endpoint, and another one is tried instead (cluster.retry).
func sendAgain(ue *Error, idempotent bool) bool {
	return ue.Reused && SafeAgain(ue, idempotent)
}

// exchange is one attempt of RoundTrip on one connection. streamed reports
// that resp now streams the body from the connection.
func (t *transport[C]) exchange(ctx context.Context, req *fasthttp.Request, resp *fasthttp.Response) (streamed bool, err error) {
	a, err := t.acquireFor()
	if err != nil {
		return false, err
	}
	// The watch of ctx ends with the attempt; its end closes the
	// connection, which is then not given back.
	a.stop = watchCancel(ctx, a.conn)
	// Read before anything is written: a full-duplex exchange's writer
	// changes the request as it goes.
	q := asked{head: req.Header.IsHead(), close: req.Header.ConnectionClose()}
	if b, ok := req.BodyStream().(duplexBody); ok && b.fullDuplex() {
		return t.exchangeDuplex(ctx, &a, req, resp, b, q)
	}
	bw := t.hc.AcquireWriter(a.conn)
	writeErr := req.Write(bw)
	if writeErr == nil {
		writeErr = bw.Flush()
	}
	t.hc.ReleaseWriter(bw)
	wait := t.responseTimeout
	if writeErr != nil {
		if !isWriteError(writeErr) {
			// Reading the client's body failed: the handler knows why.
			return a.fail(KindBroken, writeErr)
		}
		// The upstream stopped reading. It may have answered early (a 401
		// or 413 to an upload it does not want): relay that answer if it
		// is there.
		wait = min(wait, earlyAnswerWait)
	}
	if err := a.conn.SetReadDeadline(time.Now().Add(wait)); err != nil {
		return a.fail(KindBroken, err)
	}
	br := t.hc.AcquireReader(a.conn)
	sink, _ := ctx.(InterimSink)
	if nothing, err := ReadResponseHeader(resp, br, sink); err != nil {
		t.hc.ReleaseReader(br)
		return a.headFailed(err, writeErr, nothing)
	}
	return a.readBody(resp, br, q, writeErr == nil)
}

// asked is what the framing of a response depends on in its request.
type asked struct {
	head  bool // a HEAD request: no body in the answer
	close bool // the request said Connection: close
}

// headFailed ends the attempt whose response head could not be read
// (err; nothing: not a byte of it arrived). writeErr is why writing the
// request failed (nil: it did not, or a full-duplex writer was cut short
// by the exchange).
func (a *attempt[C]) headFailed(err, writeErr error, nothing bool) (bool, error) {
	var invalid InvalidResponse
	switch {
	case writeErr != nil && !isWriteError(writeErr):
		// Reading the client's body failed: the handler knows why.
		return a.fail(KindBroken, writeErr)
	case writeErr != nil && IsTimeout(writeErr):
		return a.fail(KindTimeout, writeErr) // the upstream stopped reading
	case IsTimeout(err):
		return a.fail(KindTimeout, err)
	case errors.As(err, &invalid):
		return a.fail(KindInvalid, err)
	case !nothing:
		return a.fail(KindBroken, err) // a partial response
	case writeErr != nil:
		return a.unanswered(writeErr)
	}
	return a.unanswered(err)
}

// attempt is one try of an exchange on one pooled connection.
type attempt[C pooledConn] struct {
	t      *transport[C]
	cc     C
	conn   net.Conn
	uc     *Conn // nil for a connection ebb did not dial (tests)
	reused bool  // it carried an exchange before
	sent   int64 // bytes the connection carried before this request
	// stop ends the watch of the client's context (see watchCancel).
	stop func() bool
	// duplex writes the request while the response is read (nil: the
	// request was written whole first); the attempt waits for it before
	// it ends, unless a streamed response body takes it over.
	duplex *duplex
}

// acquireFor takes a connection from the pool for a request. A pooled
// connection is used again only if nothing has arrived on it since its
// last response ended, as far as the socket knows (see idleCheck): no
// FIN, no reset, no byte. The loop ends: each unusable connection leaves
// the pool, and once the pool is empty acquire dials a new one.
func (t *transport[C]) acquireFor() (attempt[C], error) {
	a := attempt[C]{t: t}
	for {
		cc, err := t.acquire(0, false)
		if err != nil {
			if errors.Is(err, fasthttp.ErrNoFreeConns) || errors.Is(err, fasthttp.ErrTimeout) {
				return a, &Error{Kind: KindOverloaded, Err: err}
			}
			return a, &Error{Kind: KindConnect, Err: err}
		}
		a.cc, a.conn = cc, cc.Conn()
		a.uc, _ = a.conn.(*Conn)
		a.reused = a.uc != nil && a.uc.used
		if !a.reused {
			break
		}
		if !a.uc.idle.unusable() {
			testHookChecked()
			break
		}
		t.discard(cc)
	}
	if a.uc != nil {
		a.sent = a.uc.sent
	}
	return a, nil
}

// fail ends the attempt with an error of kind; the connection is closed.
func (a *attempt[C]) fail(kind Kind, err error) (bool, error) {
	a.endDuplex(false)
	cancelled(a.stop)
	a.t.discard(a.cc)
	return false, &Error{Kind: kind, Err: err}
}

// unanswered fails the attempt when the connection ended before any
// response byte.
func (a *attempt[C]) unanswered(err error) (bool, error) {
	a.endDuplex(false)
	ue := &Error{Kind: KindBroken, Unanswered: true, Reused: a.reused, Err: err}
	// Read before the connection is closed. The acknowledgement of any
	// byte of the request would have come with (or before) the upstream's
	// FIN or RST, which has been seen by now.
	if a.uc != nil && a.uc.ackBase >= 0 {
		acked := ackedBytes(a.uc.tcp)
		ue.Unreceived = acked >= 0 && acked-a.uc.ackBase <= a.sent
	}
	cancelled(a.stop)
	a.t.discard(a.cc)
	return false, ue
}

// readBody reads the response body after its header: a small one whole,
// which frees the connection now, a larger one or one of unknown length
// as a stream that gives the connection back when closed. written says the
// whole request was written (else the connection cannot be reused), or,
// with a full-duplex writer, that it has not failed so far.
func (a *attempt[C]) readBody(resp *fasthttp.Response, br *bufio.Reader, q asked, written bool) (streamed bool, err error) {
	t := a.t
	if resp.StatusCode() == fasthttp.StatusSwitchingProtocols {
		// This transport never asks for an upgrade (package h1 relays
		// WebSocket upgrades on connections of their own): what follows
		// the 101 is not HTTP, and must reach no client.
		t.hc.ReleaseReader(br)
		resp.Reset()
		return a.fail(KindInvalid, errUnasked101)
	}
	// The client gets an HTTP/1.1 response whatever the upstream's version:
	// the framing ebb writes is HTTP/1.1's.
	if !resp.Header.IsHTTP11() {
		resp.Header.SetProtocol(http11)
	}
	status := resp.StatusCode()
	cl := resp.Header.ContentLength()
	noBody := q.head || status < 200 || status == fasthttp.StatusNoContent || status == fasthttp.StatusNotModified
	// A body delimited by the connection's close (no length, not chunked)
	// leaves nothing to reuse.
	keepAlive := written && !resp.Header.ConnectionClose() && !q.close && (cl != -2 || noBody)
	switch {
	case status == fasthttp.StatusNoContent && cl != -2 && cl != 0:
		// A 204 has no body whatever its fields say (RFC 9112 §6.3), but
		// one that announces a body (RFC 9110 §8.6 forbids it) comes from
		// an origin that may well send one: the connection is not used
		// again, and the client gets the 204 without the framing.
		keepAlive = false
		fallthrough
	case status == fasthttp.StatusNotModified || status == fasthttp.StatusNoContent:
		// A 304's Content-Length is the length of a body it does not
		// have (RFC 9110 §8.6): HTTP/1 clients never get it (fasthttp
		// does not write it), and some HTTP/2 clients (Go's) would wait
		// for that body. Nothing frames what is not there.
		resp.Header.Del(fasthttp.HeaderContentLength)
		resp.Header.Del(fasthttp.HeaderTransferEncoding)
	}

	switch {
	case noBody:
		resp.SkipBody = true
	case cl >= 0 && cl <= maxBufferedBody:
		// Small body: read it whole and free the connection now.
		if err := resp.ReadBody(br, 0); err != nil {
			t.hc.ReleaseReader(br)
			resp.Reset()
			if IsTimeout(err) {
				return a.fail(KindTimeout, err)
			}
			return a.fail(KindBroken, err)
		}
	default:
		s := t.streams.Get().(*bodyStream[C])
		s.cc, s.conn, s.br, s.keepAlive, s.stop, s.down = a.cc, a.conn, br, keepAlive, a.stop, &resp.Header
		// The request may still be going out: the stream's end waits for it.
		s.duplex, a.duplex = a.duplex, nil
		s.up.Header.SetContentLength(cl)
		s.up.StreamBody = true
		if err := s.up.ReadBody(br, 0); err != nil {
			s.release(err)
			resp.Reset()
			return false, &Error{Kind: KindBroken, Err: err}
		}
		// Downstream, a body that ends with the upstream connection is
		// sent chunked.
		resp.SetBodyStream(s, max(cl, -1))
		return true, nil
	}
	// Bytes beyond the response's end, already read: the next response
	// on this connection would not be the next request's. (Those that
	// arrive later are found before the connection is used again: see
	// acquireFor.)
	keepAlive = keepAlive && br.Buffered() == 0
	t.hc.ReleaseReader(br)
	if a.duplex != nil {
		// The response is whole; the request may not be (an early
		// answer). The connection is reused only if it is.
		written, _ := a.endDuplex(keepAlive)
		keepAlive = keepAlive && written
	}
	if keepAlive && !cancelled(a.stop) {
		if a.uc != nil {
			a.uc.used = true
		}
		t.release(a.cc)
	} else {
		t.discard(a.cc)
	}
	return false, nil
}

// ConnWatcher is a context that closes a connection itself when it ends,
// more cheaply than context.AfterFunc, which allocates per call (the
// HTTP/2 engine's streams are such contexts).
type ConnWatcher interface {
	// WatchConn closes conn when the context ends, unless stop is called
	// first; stop reports whether it was.
	WatchConn(conn io.Closer) (stop func() bool)
}

// watchCancel closes conn when ctx ends, and returns the function that
// ends the watch (nil when ctx never ends: HTTP/1 requests).
func watchCancel(ctx context.Context, conn net.Conn) func() bool {
	if w, ok := ctx.(ConnWatcher); ok {
		return w.WatchConn(conn)
	}
	if ctx.Done() == nil {
		return nil
	}
	return context.AfterFunc(ctx, func() { conn.Close() })
}

// cancelled ends the watch of watchCancel and reports whether the
// context's end closed the connection.
func cancelled(stop func() bool) bool { return stop != nil && !stop() }

// testHookChecked runs after a pooled connection was checked and found
// usable, before a request is written on it: a test closes the
// upstream's side there, as its idle timeout would.
var testHookChecked = func() {}

// InterimSink is a context whose client can be sent interim responses as
// the upstream sends them (the HTTP/2 engine's streams): 103 Early Hints
// are passed on (RFC 8297), other 1xx are not.
type InterimSink interface {
	Interim(status int, fields [][2]string)
}

// ReadResponseHeader reads the final response header, skipping interim
// (1xx) responses other than 101; a 103 goes to sink if there is one.
// Each head is checked first (see checkHead): one that breaks HTTP/1.1's
// rules fails as an InvalidResponse, as does any head fasthttp then cannot
// parse (it has arrived whole by then: the failure is the upstream's, not
// the connection's). nothing reports that the connection ended before a
// single response byte. No Content-Type is added to a response that has
// none: fasthttp would add its default when the header is visited.
func ReadResponseHeader(resp *fasthttp.Response, br *bufio.Reader, sink InterimSink) (nothing bool, err error) {
	for i := range 16 {
		head, none, err := peekHead(br)
		if err != nil {
			return i == 0 && none, err
		}
		if err := checkHead(head); err != nil {
			return false, err
		}
		resp.Header.SetNoDefaultContentType(true)
		if err := resp.Header.Read(br); err != nil {
			return false, InvalidResponse(err.Error())
		}
		s := resp.StatusCode()
		if s >= 200 || s == fasthttp.StatusSwitchingProtocols {
			return false, nil
		}
		if s == fasthttp.StatusEarlyHints && sink != nil {
			var fields [][2]string
			for k, v := range resp.Header.All() {
				fields = append(fields, [2]string{string(k), string(v)})
			}
			sink.Interim(s, fields)
		}
	}
	return false, errTooManyInterim
}

// bodyStream streams an upstream response body downstream. fasthttp's
// server reads it while writing the response and then calls CloseWithError,
// which returns the connection to the pool (body read whole, keep-alive) or
// closes it. Streams are pooled per transport so that streaming allocates
// nothing per request.
type bodyStream[C pooledConn] struct {
	t         *transport[C]
	up        fasthttp.Response // holds fasthttp's body decoder (length or chunked)
	cc        C
	conn      net.Conn
	br        *bufio.Reader
	keepAlive bool
	eof       bool
	stop      func() bool // see attempt.stop
	duplex    *duplex     // see attempt.duplex
	// down is the header of the response being sent downstream; the
	// upstream's trailers join it when the body ends.
	down *fasthttp.ResponseHeader
	// n counts the bytes read, for watch (nil: none).
	n     int64
	watch BodyWatcher
	// cut, if not nil, ends an event stream on an event boundary (see
	// CutBody); cutDone is called once the body is closed.
	cut         *events.Cutter
	cutDone     func()
	interrupted atomic.Bool
}

// Watch implements WatchedBody.
func (s *bodyStream[C]) Watch(w BodyWatcher) { s.watch = w }

// CutWith implements CutBody.
func (s *bodyStream[C]) CutWith(c *events.Cutter, done func()) { s.cut, s.cutDone = c, done }

// Interrupt implements CutBody: a read blocked waiting for the upstream
// returns (the deadline in the past); the next one waits again.
func (s *bodyStream[C]) Interrupt() {
	s.interrupted.Store(true)
	s.conn.SetReadDeadline(time.Unix(1, 0))
}

func (s *bodyStream[C]) Read(p []byte) (int, error) {
	if s.cut != nil && s.cut.Done() {
		return 0, io.EOF // not s.eof: the upstream's connection is closed
	}
	if err := s.conn.SetReadDeadline(time.Now().Add(s.t.responseTimeout)); err != nil {
		return 0, err
	}
	var n int
	var err error
	if s.interrupted.Swap(false) {
		err = os.ErrDeadlineExceeded
	} else {
		n, err = s.up.BodyStream().Read(p)
	}
	if s.cut != nil {
		if n, err = s.cut.After(p, n, err); s.cut.Ended() {
			// Cut short: the upstream's connection is closed, not reused.
			s.n += int64(n)
			return n, err
		}
	}
	s.n += int64(n)
	if err == io.EOF {
		s.eof = true
		copyTrailers(s.down, &s.up.Header)
	}
	return n, err
}

// copyTrailers adds the trailer fields src received to dst, whose header
// section has been sent: they go out in its trailer section.
func copyTrailers(dst, src *fasthttp.ResponseHeader) {
	for name := range src.Trailers() {
		if v := src.PeekBytes(name); len(v) > 0 {
			_ = dst.AddTrailerBytes(name) // forbidden names were refused on the way in
			dst.SetBytesKV(name, v)
		}
	}
}

// CloseWithError ends the stream and with it the exchange; err is why the
// writer stopped, if it did.
func (s *bodyStream[C]) CloseWithError(err error) error {
	t := s.t
	if s.cutDone != nil {
		s.cutDone() // before release: no Interrupt from then on
	}
	if w := s.watch; w != nil {
		w.BodyRelayed(s.n)
	}
	s.release(err)
	t.finish()
	return nil
}

// release gives the connection back (or closes it) and the stream to its
// pool.
func (s *bodyStream[C]) release(err error) {
	t := s.t
	// Reused only when the body ended exactly where its framing said,
	// with nothing read beyond it.
	reuse := !cancelled(s.stop) && err == nil && s.eof && s.keepAlive && s.br.Buffered() == 0
	if d := s.duplex; d != nil {
		// The response is over; the request may not be, and the
		// connection is reused only if it is.
		s.duplex = nil
		written, _ := t.endDuplex(d, reuse)
		reuse = reuse && written
	}
	if !reuse {
		// Unblock and end the connection first: the body decoder must not
		// be left mid-body on a pooled connection.
		s.conn.Close()
	}
	s.up.CloseBodyStream()
	t.hc.ReleaseReader(s.br)
	if reuse {
		if uc, ok := s.conn.(*Conn); ok {
			uc.used = true
		}
		t.release(s.cc)
	} else {
		t.discard(s.cc)
	}
	var zero C
	s.cc, s.conn, s.br, s.eof, s.keepAlive, s.stop, s.down = zero, nil, nil, false, false, nil, nil
	s.n, s.watch, s.cut, s.cutDone = 0, nil, nil, nil
	s.interrupted.Store(false)
	s.up.Reset()
	t.streams.Put(s)
}
