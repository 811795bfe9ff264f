// A stream: the request's HEADERS and body going up, the response's head,
// body and trailers coming down, and its end.

package h2client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"golang.org/x/net/http2"

	"github.com/ebb-proxy/ebb/proxy/h2/wire"
	"github.com/ebb-proxy/ebb/proxy/upstream"
)

// Request is what Open sends.
type Request struct {
	// Block is the request's header block, pseudo-header fields first,
	// encoded statelessly (package wire).
	Block []byte
	// Body is a body had whole (nil: none, or one that streams).
	Body []byte
	// Streamed says a body follows through Stream.Write and CloseWrite
	// (after Body, if any).
	Streamed bool
	// Head says the method is HEAD: the response has no body whatever
	// its content-length.
	Head bool
	// BodyCloser, if not nil, is closed when the stream ends before the
	// request body was all written: a writer blocked reading the body
	// from the client is woken so.
	BodyCloser io.Closer
	// Interim, if not nil, is given each interim (1xx) response but a
	// 101, on the connection's read loop: it must not block.
	Interim func(status int, fields *wire.FieldList)
	// Deadline, if not zero, bounds the wait for the response head
	// besides the pool's response timeout (a gRPC call's grpc-timeout):
	// past it the wait fails with ErrDeadline.
	Deadline time.Time
}

// ErrDeadline is the failure of an exchange whose Request.Deadline passed
// before the response head came: the upstream's stream is cancelled.
var ErrDeadline = &upstream.Error{Kind: upstream.KindTimeout, Err: errors.New("the call's deadline (grpc-timeout) passed")}

// Stream is one exchange. Its response head is read after Await; its
// body with Read, from one goroutine; its request body, if streamed, is
// written with Write and CloseWrite, from one goroutine. Close ends it.
type Stream struct {
	c     *conn
	id    uint32
	head  bool
	ready chan struct{} // closed when the response head, or the stream's failure, came

	// Guarded by c.mu.
	readyClosed   bool
	gotHead       bool
	headEnded     bool // the response ended with its head
	status        int
	contentLength int64
	header        wire.FieldList // written by the read loop until ready
	trailer       wire.FieldList // written by the read loop until the body's end
	buf           []byte         // body bytes received and not read yet
	off           int
	received      int64
	recvWindow    int64 // what the peer may still send on the stream
	unacked       int64 // bytes read, not credited back yet
	sendWindow    int64
	localClosed   bool
	remoteClosed  bool
	reset         bool
	removed       bool
	err           error
	cond          sync.Cond
	bodyCloser    io.Closer
	interim       func(int, *wire.FieldList)
	stopWatch     func() bool // ends the watch of the caller's context (Exchange)
	pumping       sync.WaitGroup
}

var (
	errStreamClosed = errors.New("h2client: stream closed")
	// errResponseTimeout: the upstream may be at work on the request; it
	// is not sent again (as the HTTP/1 transport's).
	errResponseTimeout = &upstream.Error{Kind: upstream.KindTimeout, Err: timeoutError{}}
)

type timeoutError struct{}

func (timeoutError) Error() string   { return "upstream response timeout" }
func (timeoutError) Timeout() bool   { return true }
func (timeoutError) Temporary() bool { return true }

// Open sends req's HEADERS (and its body, as much of it as the windows
// allow) on a connection with room for a stream, opening one if needed.
// If Body was not all sent, the caller writes the rest (Rest). An error
// means nothing was sent.
func (p *Pool) Open(ctx context.Context, req *Request) (*Stream, error) {
	for tries := 1; ; tries++ {
		c, fresh, err := p.acquire(ctx)
		if err != nil {
			return nil, err
		}
		if st := c.open(req); st != nil {
			return st, nil
		}
		p.release(c)
		if fresh || tries == 3 {
			// The connection ended before the stream could go on it.
			return nil, errNotOpened
		}
	}
}

// errNotOpened: nothing went out, the request may go again anywhere.
var errNotOpened = fmt.Errorf("%w: its HTTP/2 connection ended before the request went out", upstream.ErrResend)

// open opens a stream on c, whose slot the caller reserved; nil if c
// takes no new stream any more.
func (c *conn) open(req *Request) *Stream {
	st := &Stream{c: c, head: req.Head, ready: make(chan struct{}), contentLength: -1, bodyCloser: req.BodyCloser, interim: req.Interim}
	st.cond.L = &c.mu
	c.mu.Lock()
	defer c.unlock()
	if c.closed || c.goAway || c.retiring || c.nextID > 1<<31-1 {
		return nil
	}
	st.id = c.nextID
	c.nextID += 2
	st.sendWindow, st.recvWindow = c.peerWindow, int64(c.p.cfg.StreamWindow)
	c.streams[st.id] = st
	blk := req.Block
	if !c.sentTableSize {
		// The first block says the dynamic table is empty and stays so.
		c.sentTableSize = true
		blk = append([]byte{wire.TableSizeZero}, blk...)
	}
	end := len(req.Body) == 0 && !req.Streamed
	wire.WriteBlock(c.wfr, st.id, blk, end, c.peerFrame)
	st.localClosed = end
	if len(req.Body) > 0 {
		n := st.dataLocked(req.Body, !req.Streamed)
		if n < len(req.Body) {
			// The windows are shut: the rest goes as they open, written
			// by the stream's one goroutine (see Wait).
			st.pumping.Add(1)
			go st.writeRest(req.Body[n:], !req.Streamed)
		}
	}
	c.wakeLocked()
	return st
}

// writeRest writes what the windows did not let open send.
func (st *Stream) writeRest(b []byte, end bool) {
	defer st.pumping.Done()
	_ = st.write(b, end)
}

// dataLocked frames as much of b as the windows allow, the last frame
// ending the stream if end and b is all sent; it returns how much.
func (st *Stream) dataLocked(b []byte, end bool) int {
	c, sent := st.c, 0
	for len(b) > 0 {
		n := int(min(int64(len(b)), st.sendWindow, c.sendWindow, int64(c.peerFrame)))
		if n <= 0 {
			break
		}
		last := end && n == len(b)
		_ = c.wfr.WriteData(st.id, last, b[:n])
		c.sentData.Store(true)
		st.sendWindow -= int64(n)
		c.sendWindow -= int64(n)
		b, sent = b[n:], sent+n
		if last {
			st.localClosed = true
			c.removeLocked(st)
		}
	}
	return sent
}

// Write sends b as request body, waiting for the windows to open.
func (st *Stream) Write(b []byte) (int, error) {
	if err := st.write(b, false); err != nil {
		return 0, err
	}
	return len(b), nil
}

// write sends b as request body, the last of it if end.
func (st *Stream) write(b []byte, end bool) error {
	c := st.c
	c.mu.Lock()
	defer c.unlock()
	for len(b) > 0 {
		for !st.reset && !st.localClosed && !c.closed && (st.sendWindow <= 0 || c.sendWindow <= 0 || len(c.pend) >= maxPend) {
			c.wcond.Wait()
		}
		if st.reset || st.localClosed || c.closed {
			return st.writeErrLocked()
		}
		n := st.dataLocked(b, end)
		b = b[n:]
		c.wakeLocked()
	}
	if end {
		st.bodyCloser = nil
	}
	return nil
}

// CloseWrite ends the request body, with the trailer block trailers (nil:
// none).
func (st *Stream) CloseWrite(trailers []byte) error {
	c := st.c
	c.mu.Lock()
	defer c.unlock()
	if st.reset || st.localClosed || c.closed {
		return st.writeErrLocked()
	}
	if len(trailers) > 0 {
		wire.WriteBlock(c.wfr, st.id, trailers, true, c.peerFrame)
	} else {
		_ = c.wfr.WriteData(st.id, true, nil)
	}
	st.localClosed = true
	st.bodyCloser = nil
	c.removeLocked(st)
	c.wakeLocked()
	return nil
}

func (st *Stream) writeErrLocked() error {
	if st.err != nil {
		return st.err
	}
	if st.c.err != nil {
		return st.c.err
	}
	return errStreamClosed
}

// timerPool holds the timers of the waits for a response head.
var timerPool = sync.Pool{New: func() any {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}}

// Await waits for the response head (1xx answers are skipped), for at
// most timeout (0: no bound), or until ctx ends; then the stream is
// reset.
func (st *Stream) Await(ctx context.Context, timeout time.Duration) error {
	return st.await(ctx, timeout, errResponseTimeout)
}

// await is Await failing with timeoutErr when timeout passes.
func (st *Stream) await(ctx context.Context, timeout time.Duration, timeoutErr error) error {
	var tc <-chan time.Time
	if timeout > 0 {
		t := timerPool.Get().(*time.Timer)
		t.Reset(timeout)
		defer func() {
			t.Stop() // since Go 1.23, nothing stale is left to receive
			timerPool.Put(t)
		}()
		tc = t.C
	}
	select {
	case <-st.ready:
	case <-ctx.Done():
		st.abort(context.Cause(ctx))
		return ctx.Err()
	case <-tc:
		st.abort(timeoutErr)
		return timeoutErr
	}
	c := st.c
	c.mu.Lock()
	defer c.unlock()
	if !st.gotHead {
		return st.err
	}
	return nil
}

// abort resets the stream (CANCEL) with err as its failure.
func (st *Stream) abort(err error) {
	c := st.c
	c.mu.Lock()
	c.resetLocked(st, http2.ErrCodeCancel, err)
	c.unlock()
}

// Status returns the response's status.
func (st *Stream) Status() int { return st.status }

// Header returns the response's regular fields, valid once Await
// returned nil, until Close.
func (st *Stream) Header() *wire.FieldList { return &st.header }

// ContentLength returns the response's content-length, or -1.
func (st *Stream) ContentLength() int64 { return st.contentLength }

// Ended reports whether the response ended with its head: no body, no
// trailers.
func (st *Stream) Ended() bool { return st.headEnded }

// Received reports whether the whole response has arrived (the
// upstream ended its side of the stream, without a reset): reading the
// rest of it waits for nothing upstream.
func (st *Stream) Received() bool {
	st.c.mu.Lock()
	defer st.c.mu.Unlock()
	return st.remoteClosed && !st.reset && st.err == nil
}

// Trailer returns the response's trailers, valid once Read returned
// io.EOF, until Close.
func (st *Stream) Trailer() *wire.FieldList { return &st.trailer }

// Read reads the response body. Bytes read are credited back to the
// upstream (WINDOW_UPDATE) a quarter of the window at a time.
func (st *Stream) Read(b []byte) (int, error) {
	c := st.c
	c.mu.Lock()
	defer c.unlock()
	for st.off == len(st.buf) && !st.remoteClosed && !st.reset {
		st.cond.Wait()
	}
	// What came before a failure is read first: the client gets as much
	// of the body as arrived, then the cut.
	if st.off < len(st.buf) {
		n := copy(b, st.buf[st.off:])
		st.off += n
		if st.off == len(st.buf) {
			st.buf, st.off = st.buf[:0], 0
		}
		st.unacked += int64(n)
		if !st.remoteClosed && !st.reset && st.unacked >= int64(c.p.cfg.StreamWindow)/4 && !c.closed {
			_ = c.wfr.WriteWindowUpdate(st.id, uint32(st.unacked))
			st.recvWindow += st.unacked
			st.unacked = 0
			c.wakeLocked()
		}
		return n, nil
	}
	if st.reset {
		if st.err != nil {
			return 0, st.err
		}
		return 0, errStreamClosed
	}
	return 0, io.EOF
}

// Close ends the stream: if the response or the request body is not
// over, it is reset (CANCEL). Safe to call from any goroutine, more than
// once; it wakes a Read or Write waiting.
func (st *Stream) Close() {
	c := st.c
	c.mu.Lock()
	if !st.removed {
		c.resetLocked(st, http2.ErrCodeCancel, errStreamClosed)
	}
	stop := st.stopWatch
	st.stopWatch = nil
	c.unlock()
	if stop != nil {
		stop()
	}
}

// resetLocked ends st abnormally with err: reads and writes waiting fail,
// and (code not 0) a RST_STREAM with code goes to the upstream.
func (c *conn) resetLocked(st *Stream, code http2.ErrCode, err error) {
	if st.reset {
		return
	}
	st.reset = true
	if st.err == nil {
		st.err = err
	}
	if code != 0 && !st.removed && !c.closed {
		_ = c.wfr.WriteRSTStream(st.id, code)
		c.wakeLocked()
	}
	if st.bodyCloser != nil && !st.localClosed {
		c.toClose = append(c.toClose, st.bodyCloser)
	}
	st.bodyCloser = nil
	if err == errStreamClosed {
		st.buf, st.off = nil, 0 // the caller's Close: nobody reads it
	}
	st.readyLocked()
	st.cond.Broadcast()
	c.wcond.Broadcast()
	c.removeLocked(st)
}

func (st *Stream) readyLocked() {
	if !st.readyClosed {
		st.readyClosed = true
		close(st.ready)
	}
}

// removeLocked takes st out of the connection's streams once both sides
// are done with it, or it was reset; its slot goes back to the pool.
func (c *conn) removeLocked(st *Stream) {
	if st.removed || !(st.reset || st.localClosed && st.remoteClosed) {
		return
	}
	st.removed = true
	delete(c.streams, st.id)
	c.toRelease++
	if len(c.streams) == 0 {
		c.idleSince = time.Now()
		c.closeIfDoneLocked()
	}
}

// endRemoteLocked marks the response as ended, checking the body
// against its content-length.
func (c *conn) endRemoteLocked(st *Stream) {
	if !st.head && st.contentLength >= 0 && st.received != st.contentLength {
		c.resetLocked(st, http2.ErrCodeProtocol, &upstream.Error{Kind: upstream.KindInvalid, Err: errors.New("response body shorter than its content-length")})
		return
	}
	st.remoteClosed = true
	st.readyLocked()
	st.cond.Broadcast()
	c.removeLocked(st)
}

// onData handles a DATA frame: flow control, then the bytes go to the
// stream's buffer.
func (c *conn) onData(f *http2.DataFrame) error {
	n := int64(f.Length)
	if n > c.recvWindow {
		return connError{http2.ErrCodeFlowControl, "DATA beyond the connection's window"}
	}
	// The connection's window is credited back as bytes arrive: each
	// stream's own window bounds what ebb holds.
	c.recvWindow -= n
	c.recvUnack += n
	c.mu.Lock()
	defer c.unlock()
	if c.recvUnack >= int64(c.p.cfg.ConnWindow)/4 {
		_ = c.wfr.WriteWindowUpdate(0, uint32(c.recvUnack))
		c.recvWindow += c.recvUnack
		c.recvUnack = 0
		c.wakeLocked()
	}
	if len(f.Data()) == 0 && !f.StreamEnded() {
		if err := c.idleFrame(); err != nil {
			return err
		}
	} else {
		c.idleRun = 0
	}
	st := c.streams[f.StreamID]
	if st == nil {
		if f.StreamID%2 == 0 || f.StreamID >= c.nextID {
			return connError{http2.ErrCodeProtocol, "DATA on a stream ebb did not open"}
		}
		return nil // a stream ebb reset: what the upstream sent before it saw that
	}
	switch {
	case !st.gotHead:
		c.resetLocked(st, http2.ErrCodeProtocol, &upstream.Error{Kind: upstream.KindInvalid, Err: errors.New("DATA before the response's HEADERS")})
		return nil
	case n > st.recvWindow:
		// A connection error (RFC 9113 §6.9.1 allows either): an
		// upstream that ignores flow control would go on sending on the
		// connection, whose window ebb credits as bytes arrive.
		return connError{http2.ErrCodeFlowControl, "DATA beyond the stream's window"}
	}
	st.recvWindow -= n
	data := f.Data()
	st.unacked += n - int64(len(data)) // padding: credited with the next update
	st.received += int64(len(data))
	if st.contentLength >= 0 && st.received > st.contentLength && !st.head {
		c.resetLocked(st, http2.ErrCodeProtocol, &upstream.Error{Kind: upstream.KindInvalid, Err: errors.New("response body longer than its content-length")})
		return nil
	}
	if !st.head {
		st.buf = append(st.buf, data...)
	}
	if f.StreamEnded() {
		c.endRemoteLocked(st)
		return nil
	}
	st.cond.Broadcast()
	return nil
}

// onReset handles the upstream's RST_STREAM: a stream refused was not
// processed; any other ends the stream with a StreamError.
func (c *conn) onReset(f *http2.RSTStreamFrame) error {
	c.mu.Lock()
	defer c.unlock()
	st := c.streams[f.StreamID]
	if st == nil {
		if f.StreamID%2 == 0 || f.StreamID >= c.nextID {
			// RST_STREAM on a stream never opened (RFC 9113 §6.4).
			return connError{http2.ErrCodeProtocol, "RST_STREAM on a stream ebb did not open"}
		}
		return nil
	}
	se := http2.StreamError{StreamID: f.StreamID, Code: f.ErrCode}
	var err error = se
	switch {
	case f.ErrCode == http2.ErrCodeRefusedStream && !st.gotHead:
		err = errRefused
	case !st.gotHead:
		err = &upstream.Error{Kind: upstream.KindBroken, Unanswered: true, Err: se}
	case st.remoteClosed:
		// The response is whole; the upstream wants no more of the
		// request's body (RFC 9113 §8.1).
		st.localClosed = true
		if st.bodyCloser != nil {
			c.toClose = append(c.toClose, st.bodyCloser)
			st.bodyCloser = nil
		}
		c.wcond.Broadcast()
		c.removeLocked(st)
		return nil
	}
	c.resetLocked(st, 0, err)
	return nil
}

// Cancel resets the stream (CANCEL) with err as its failure: a read
// waiting for the response body returns err.
func (st *Stream) Cancel(err error) { st.abort(err) }
