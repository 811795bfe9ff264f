package proxy

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/ebb-proxy/ebb/drain"
)

// maxBufferedBody is the largest response body with a known length that is
// read whole before it is written downstream. Up to this size buffering
// frees the upstream connection sooner and costs nothing per request;
// anything larger, or of unknown length, is streamed through.
const maxBufferedBody = 64 << 10

// upstreamReadBufferSize bounds an upstream response's status line and
// headers.
const upstreamReadBufferSize = 16 << 10

// errKind says how an upstream exchange failed, which decides the status
// ebb answers with and, later, whether a retry is safe.
type errKind uint8

const (
	// errConnect: no connection could be established; nothing was sent.
	errConnect errKind = iota + 1
	// errOverloaded: every connection allowed to the endpoint is busy.
	errOverloaded
	// errTimeout: the response (or a read of its body) took too long.
	errTimeout
	// errBroken: the connection failed after the request was (maybe) sent
	// and before a complete response header arrived.
	errBroken
	// errRefused: an HTTP/2 upstream refused the stream, or went away
	// before it, unprocessed, and it could not be sent again.
	errRefused
)

var errKindNames = [...]string{
	errConnect:    "connect",
	errOverloaded: "overloaded",
	errTimeout:    "timeout",
	errBroken:     "broken",
	errRefused:    "refused",
}

// upstreamError is an upstream exchange's failure with its kind.
type upstreamError struct {
	kind errKind
	// unanswered: the request went out, and the connection (or stream)
	// ended before a complete response header. The upstream may still
	// have processed it; nothing of it reached the client.
	unanswered bool
	// reused: unanswered on a pooled connection that had carried an
	// exchange before, the classic keep-alive race (the upstream closed
	// it while idle).
	reused bool
	// unreceived: unanswered, and the upstream's TCP stack acknowledged no
	// byte of the request before the connection ended. The upstream had
	// closed the connection before the request reached it, so it cannot
	// have processed it.
	unreceived bool
	err        error
}

func (e *upstreamError) Error() string { return e.err.Error() }
func (e *upstreamError) Unwrap() error { return e.err }

// upConn is an upstream connection with what ebb needs to know about it.
// One exchange at a time uses it.
type upConn struct {
	net.Conn
	used bool  // it has carried a complete exchange
	sent int64 // bytes written to it
	// ackBase is the peer's acknowledged byte count (ackedBytes) right
	// after the connect, or -1 if unknown: later counts less ackBase are
	// the bytes of data the upstream's TCP stack received.
	ackBase       int64
	wrote         atomic.Bool   // the last operation was a write
	writeTimeout  time.Duration // bounds each write: a stalled upstream is let go
	writeDeadline drain.WriteDeadline
}

// Read yields the processor once before the first read after a write: the
// answer to what was just written is rarely there yet, and a read that
// finds nothing costs a system call (EAGAIN) before the goroutine parks.
// Under load, other goroutines run meanwhile and the read then finds data;
// alone, Gosched returns at once.
func (c *upConn) Read(p []byte) (int, error) {
	if c.wrote.Swap(false) {
		runtime.Gosched()
	}
	return c.Conn.Read(p)
}

func (c *upConn) Write(p []byte) (int, error) {
	c.wrote.Store(true)
	if c.writeTimeout > 0 {
		if err := c.writeDeadline.Renew(c.Conn, c.writeTimeout); err != nil {
			return 0, err
		}
	}
	n, err := c.Conn.Write(p)
	c.sent += int64(n)
	return n, err
}

// pooledConn is what fasthttp's HostClient hands out: its clientConn type
// is unexported, so the transport is generic over it.
type pooledConn interface {
	Conn() net.Conn
}

// roundTripper sends one request to one endpoint.
type roundTripper interface {
	roundTrip(ctx context.Context, req *fasthttp.Request, resp *fasthttp.Response) error
	close()
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
	// before roundTrip): it takes it off the endpoint's in-flight count.
	done    func()
	streams sync.Pool // of *bodyStream[C]
}

func newTransport(hc *fasthttp.HostClient, responseTimeout time.Duration, done func()) roundTripper {
	return newTransportOf(hc, hc.AcquireConn, hc.ReleaseConn, hc.CloseConn, responseTimeout, done)
}

func newTransportOf[C pooledConn](hc *fasthttp.HostClient, acquire func(time.Duration, bool) (C, error), release, discard func(C), responseTimeout time.Duration, done func()) *transport[C] {
	t := &transport[C]{hc: hc, acquire: acquire, release: release, discard: discard, responseTimeout: responseTimeout, done: done}
	t.streams.New = func() any { return &bodyStream[C]{t: t} }
	return t
}

func (t *transport[C]) close() { t.hc.CloseIdleConnections() }

func (t *transport[C]) finish() { t.done() }

// earlyAnswerWait bounds the wait for an upstream's answer after it
// stopped reading the request body.
const earlyAnswerWait = time.Second

// maxStaleAttempts bounds how many pooled connections one request tries
// when each turns out to have been closed by the upstream while idle.
const maxStaleAttempts = 4

// roundTrip writes req and reads the response into resp. The exchange is
// over (and the in-flight count taken down) when roundTrip returns, except
// for a streamed body, where it is over when the stream is closed.
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
func (t *transport[C]) roundTrip(ctx context.Context, req *fasthttp.Request, resp *fasthttp.Response) error {
	// Decided before the first attempt: writing a streamed body consumes
	// it and takes it off the request.
	idempotent, replayable := isIdempotent(req), req.BodyStream() == nil
	for attempt := 1; ; attempt++ {
		streamed, err := t.exchange(ctx, req, resp, idempotent, replayable)
		if streamed {
			return nil // the stream finishes the exchange when closed
		}
		if err != nil && replayable && attempt < maxStaleAttempts && ctx.Err() == nil {
			if ue, ok := err.(*upstreamError); ok && sendAgain(ue, idempotent) {
				resp.Reset()
				continue
			}
		}
		t.finish()
		return err
	}
}

// safeAgain reports whether a request whose exchange failed with ue may be
// sent again, its body permitting: the connection ended before a response
// header, and either its method is idempotent (RFC 9110 §9.2.2) or the
// upstream never received it.
func safeAgain(ue *upstreamError, idempotent bool) bool {
	return ue.unanswered && (idempotent || ue.unreceived)
}

// sendAgain reports whether the transport sends a request that failed with
// ue again itself, on another connection to the same endpoint: only after
// the keep-alive race, when that is safe. Any other failure says something
// about the endpoint, and another one is tried instead (cluster.retry).
func sendAgain(ue *upstreamError, idempotent bool) bool {
	return ue.reused && safeAgain(ue, idempotent)
}

// exchange is one attempt of roundTrip on one connection. streamed reports
// that resp now streams the body from the connection. replayable says
// whether the request's body (if any) can be sent again.
func (t *transport[C]) exchange(ctx context.Context, req *fasthttp.Request, resp *fasthttp.Response, idempotent, replayable bool) (streamed bool, err error) {
	var (
		cc     C
		conn   net.Conn
		uc     *upConn
		reused bool
		// sent is how many bytes the connection carried before this
		// request.
		sent int64
	)
	// A request that could not be sent again whatever happened is only
	// sent on a pooled connection that is still open as far as the socket
	// knows. The loop ends: each dead connection leaves the pool, and once
	// the pool is empty acquire dials a new one.
	for {
		if cc, err = t.acquire(0, false); err != nil {
			if errors.Is(err, fasthttp.ErrNoFreeConns) || errors.Is(err, fasthttp.ErrTimeout) {
				return false, &upstreamError{kind: errOverloaded, err: err}
			}
			return false, &upstreamError{kind: errConnect, err: err}
		}
		conn = cc.Conn()
		uc, _ = conn.(*upConn)
		reused = uc != nil && uc.used
		if !reused || (idempotent && replayable) {
			break
		}
		if !peerClosed(uc.Conn) {
			testHookChecked()
			break
		}
		t.discard(cc)
	}
	if uc != nil {
		sent = uc.sent
	}
	// stop ends the watch of ctx; false means ctx's end has closed the
	// connection, which is then not given back. nil: nothing watched.
	stop := watchCancel(ctx, conn)
	fail := func(kind errKind, err error) (bool, error) {
		cancelled(stop)
		t.discard(cc)
		return false, &upstreamError{kind: kind, err: err}
	}
	// unanswered fails the exchange when the connection ended before any
	// response byte.
	unanswered := func(err error) (bool, error) {
		ue := &upstreamError{kind: errBroken, unanswered: true, reused: reused, err: err}
		// Read before the connection is closed. The acknowledgement of
		// any byte of the request would have come with (or before) the
		// upstream's FIN or RST, which has been seen by now.
		if uc != nil && uc.ackBase >= 0 {
			acked := ackedBytes(uc.Conn)
			ue.unreceived = acked >= 0 && acked-uc.ackBase <= sent
		}
		cancelled(stop)
		t.discard(cc)
		return false, ue
	}

	bw := t.hc.AcquireWriter(conn)
	writeErr := req.Write(bw)
	if writeErr == nil {
		writeErr = bw.Flush()
	}
	t.hc.ReleaseWriter(bw)
	wait := t.responseTimeout
	if writeErr != nil {
		if !isWriteError(writeErr) {
			// Reading the client's body failed: the handler knows why.
			return fail(errBroken, writeErr)
		}
		// The upstream stopped reading. It may have answered early (a 401
		// or 413 to an upload it does not want): relay that answer if it
		// is there.
		wait = min(wait, earlyAnswerWait)
	}
	if err := conn.SetReadDeadline(time.Now().Add(wait)); err != nil {
		return fail(errBroken, err)
	}
	br := t.hc.AcquireReader(conn)
	if nothing, err := readResponseHeader(resp, br); err != nil {
		t.hc.ReleaseReader(br)
		switch {
		case writeErr != nil && isTimeout(writeErr):
			return fail(errTimeout, writeErr) // the upstream stopped reading
		case isTimeout(err):
			return fail(errTimeout, err)
		case !nothing:
			return fail(errBroken, err) // a partial response
		case writeErr != nil:
			return unanswered(writeErr)
		}
		return unanswered(err)
	}
	// The client gets an HTTP/1.1 response whatever the upstream's version:
	// the framing ebb writes is HTTP/1.1's.
	if !resp.Header.IsHTTP11() {
		resp.Header.SetProtocol(http11)
	}
	status := resp.StatusCode()
	cl := resp.Header.ContentLength()
	noBody := req.Header.IsHead() || status < 200 || status == fasthttp.StatusNoContent || status == fasthttp.StatusNotModified
	// A body delimited by the connection's close (no length, not chunked)
	// leaves nothing to reuse.
	keepAlive := writeErr == nil && !resp.Header.ConnectionClose() && !req.Header.ConnectionClose() && (cl != -2 || noBody)

	switch {
	case noBody:
		resp.SkipBody = true
	case cl >= 0 && cl <= maxBufferedBody:
		// Small body: read it whole and free the connection now.
		if err := resp.ReadBody(br, 0); err != nil {
			t.hc.ReleaseReader(br)
			resp.Reset()
			if isTimeout(err) {
				return fail(errTimeout, err)
			}
			return fail(errBroken, err)
		}
	default:
		s := t.streams.Get().(*bodyStream[C])
		s.cc, s.conn, s.br, s.keepAlive, s.stop, s.down = cc, conn, br, keepAlive, stop, &resp.Header
		s.up.Header.SetContentLength(cl)
		s.up.StreamBody = true
		if err := s.up.ReadBody(br, 0); err != nil {
			s.release(err)
			resp.Reset()
			return false, &upstreamError{kind: errBroken, err: err}
		}
		// Downstream, a body that ends with the upstream connection is
		// sent chunked.
		resp.SetBodyStream(s, max(cl, -1))
		return true, nil
	}
	t.hc.ReleaseReader(br)
	if keepAlive && !cancelled(stop) {
		if uc != nil {
			uc.used = true
		}
		t.release(cc)
	} else {
		t.discard(cc)
	}
	return false, nil
}

// watchCancel closes conn when ctx ends, and returns the function that
// ends the watch (nil when ctx never ends: HTTP/1 requests).
func watchCancel(ctx context.Context, conn net.Conn) func() bool {
	if ctx.Done() == nil {
		return nil
	}
	return context.AfterFunc(ctx, func() { conn.Close() })
}

// cancelled ends the watch of watchCancel and reports whether the
// context's end closed the connection.
func cancelled(stop func() bool) bool { return stop != nil && !stop() }

// testHookChecked runs after a pooled connection was checked and found
// open, before a request that is not idempotent is written on it: a test
// closes the upstream's side there, as its idle timeout would.
var testHookChecked = func() {}

// isIdempotent reports whether the request's method may be sent twice
// (RFC 9110 §9.2.2).
func isIdempotent(req *fasthttp.Request) bool {
	h := &req.Header
	return h.IsGet() || h.IsHead() || h.IsOptions() || h.IsPut() || h.IsDelete() || h.IsTrace()
}

// isIdempotentMethod is isIdempotent for a method name.
func isIdempotentMethod(m string) bool {
	switch m {
	case "GET", "HEAD", "OPTIONS", "PUT", "DELETE", "TRACE":
		return true
	}
	return false
}

// readResponseHeader reads the final response header, skipping interim
// (1xx) responses other than 101. nothing reports that the connection
// ended before a single response byte.
func readResponseHeader(resp *fasthttp.Response, br *bufio.Reader) (nothing bool, err error) {
	for i := range 16 {
		if err := resp.Header.Read(br); err != nil {
			// fasthttp reports any failure on the first byte as io.EOF.
			return i == 0 && err == io.EOF, err
		}
		if s := resp.StatusCode(); s >= 200 || s == fasthttp.StatusSwitchingProtocols {
			return false, nil
		}
	}
	return false, errors.New("proxy: too many interim responses")
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
	stop      func() bool // see transport.exchange
	// down is the header of the response being sent downstream; the
	// upstream's trailers join it when the body ends.
	down *fasthttp.ResponseHeader
}

func (s *bodyStream[C]) Read(p []byte) (int, error) {
	if err := s.conn.SetReadDeadline(time.Now().Add(s.t.responseTimeout)); err != nil {
		return 0, err
	}
	n, err := s.up.BodyStream().Read(p)
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
	s.release(err)
	t.finish()
	return nil
}

// release gives the connection back (or closes it) and the stream to its
// pool.
func (s *bodyStream[C]) release(err error) {
	t := s.t
	reuse := !cancelled(s.stop) && err == nil && s.eof && s.keepAlive
	if !reuse {
		// Unblock and end the connection first: the body decoder must not
		// be left mid-body on a pooled connection.
		s.conn.Close()
	}
	s.up.CloseBodyStream()
	t.hc.ReleaseReader(s.br)
	if reuse {
		if uc, ok := s.conn.(*upConn); ok {
			uc.used = true
		}
		t.release(s.cc)
	} else {
		t.discard(s.cc)
	}
	var zero C
	s.cc, s.conn, s.br, s.eof, s.keepAlive, s.stop, s.down = zero, nil, nil, false, false, nil, nil
	s.up.Reset()
	t.streams.Put(s)
}

// isWriteError reports whether err is a failure to write to a connection
// (as opposed to a failure to read the body being copied to it).
func isWriteError(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) && oe.Op == "write"
}

func isTimeout(err error) bool {
	if errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, fasthttp.ErrTimeout) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
