package upstream

import (
	"errors"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ebb-proxy/ebb/config"
	"github.com/ebb-proxy/ebb/proxy/downstream"
	"github.com/ebb-proxy/ebb/proxy/pace"
)

// Body wraps the client's request body on its way upstream: it
// enforces limits.max_body_bytes and the Content-Length, gives each read a
// deadline, and keeps the read error so that a failure of the client is
// not blamed on the upstream.
//
// With retries.buffer_body, Fill reads it whole before the request goes
// out, and each attempt sends it from its start; otherwise it streams,
// once. The fasthttp transport reads it (Read) within the exchange, or,
// FullDuplex, on a goroutine of its own while it reads the response.
// An exchange in net/http's form (cluster.ExchangeHTTP: ebb's HTTP/2
// client, or the HTTP/1 transport through RoundTripHTTP) reads it
// through one Attempt per attempt, possibly on a goroutine of its own,
// and may go on after the response has begun (the body streams up while
// the response streams down), until the attempt ends.
//
// Pooled: it goes back to the pool when its last user lets go. The
// handler holds it from AcquireBody to Release; each attempt, and a
// response body that outlives the handler, holds it too.
type Body struct {
	r        io.Reader
	conn     *downstream.Conn
	limit    int64 // 0: none
	size     int64 // Content-Length, or -1 (unknown: chunked)
	n        int64
	got      atomic.Int64 // n, for the handler while another goroutine reads
	deadline bool         // the body is still on the socket: time each read...
	pace     pace.Budget  // ...by this
	// answered: the upstream's response has begun; its reads are then
	// the upstream's business, untimed (a bidirectional stream may idle).
	answered atomic.Bool
	eof      bool
	// OnEOF, if set, runs once, when the body has been read whole: the
	// request's trailers have arrived then.
	OnEOF func()
	// FullDuplex, set by the engine, says that it relays the response
	// while the body may still be read, from another goroutine, and that
	// interrupt ends a read in progress (r is an io.Closer): the HTTP/1
	// transport then writes the body while it reads the response (see
	// duplex.go). An HTTP/2 stream's body is; an HTTP/1 client's is not,
	// as fasthttp's server reads it into the request the handler and the
	// server go on using once the exchange returns.
	FullDuplex bool
	// whole and fault are what the handler may look at while an attempt
	// is still reading: the body was read to its end; the client failed
	// (its error).
	whole atomic.Bool
	fault atomic.Pointer[error]
	// interrupted makes reads fail: see interrupt.
	interrupted atomic.Bool
	// buf holds the whole body once fill has read it.
	buf      []byte
	buffered bool
	refs     atomic.Int32
	cur      *Attempt // the latest attempt of a net/http exchange
}

var bodyPool = sync.Pool{New: func() any { return new(Body) }}

// Errors of the client's body, answered with a 4xx.
var (
	ErrBodyTooLarge = errors.New("upstream: request body exceeds limits.max_body_bytes")
	ErrBodyTooLong  = errors.New("upstream: request body longer than its Content-Length")
)

// errAttemptOver is what a Attempt's reads return once the attempt is
// over: the body is another attempt's, or nobody's, now.
var errAttemptOver = errors.New("upstream: request body no longer sent on this attempt")

// AcquireBody wraps a request body read from r, of size bytes (-1:
// unknown), at most limit (0: no limit). conn is the client's HTTP/1
// connection (nil for HTTP/2, whose stream bodies are closed instead);
// a timed pace gives each read from conn its deadline, for a body
// still on the socket, until the response begins (Answered). The caller
// releases it.
func AcquireBody(r io.Reader, conn *downstream.Conn, limit, size int64, p pace.Budget) *Body {
	b := bodyPool.Get().(*Body)
	b.r, b.conn, b.limit, b.size, b.pace = r, conn, limit, size, p
	b.deadline = conn != nil && p.Timed()
	b.refs.Store(1)
	return b
}

// maxPooledBodyBuffer bounds the buffer a pooled Body keeps for the
// next request: one the size of the default retries.buffer_body is kept,
// a larger one left to the collector.
const maxPooledBodyBuffer = 64<<10 + 512

// Hold keeps b for one more user, who releases it too.
func (b *Body) Hold() { b.refs.Add(1) }

// Release lets go of b; the last user's release pools it.
func (b *Body) Release() {
	if b.refs.Add(-1) != 0 {
		return
	}
	buf := b.buf[:0]
	if cap(buf) > maxPooledBodyBuffer {
		buf = nil
	}
	b.r, b.conn, b.OnEOF, b.cur, b.FullDuplex = nil, nil, nil, nil, false
	b.n, b.eof, b.buffered, b.buf = 0, false, false, buf
	b.got.Store(0)
	b.whole.Store(false)
	b.fault.Store(nil)
	b.interrupted.Store(false)
	b.answered.Store(false)
	bodyPool.Put(b)
}

// BytesRead returns how many bytes of the body have been read from the
// client so far (b may be nil: 0).
func (b *Body) BytesRead() int64 {
	if b == nil {
		return 0
	}
	return b.got.Load()
}

// Buffered returns the whole body once Fill has read it, or nil: the
// transport can then send it more than once.
func (b *Body) Buffered() []byte {
	if !b.buffered {
		return nil
	}
	return b.buf
}

// Complete reports whether the whole body has been read.
func (b *Body) Complete() bool { return b.whole.Load() }

func (b *Body) fullDuplex() bool { return b.FullDuplex }

// Failed returns the client's failure to send the body, if any (b may be
// nil: no body).
func (b *Body) Failed() error {
	if b == nil {
		return nil
	}
	if p := b.fault.Load(); p != nil {
		return *p
	}
	return nil
}

func (b *Body) fail(err error) error {
	b.fault.CompareAndSwap(nil, &err)
	return err
}

// Bufferable reports whether the body is read whole before the request
// is sent (retries.buffer_body), which lets it be sent more than once.
func (b *Body) Bufferable(limit config.Size) bool {
	return b.size > 0 && b.size <= int64(limit)
}

// Fill reads the whole body into memory, growing the buffer as the body
// arrives rather than trusting the Content-Length up front. Its error is
// also kept (failed): the client failed.
func (b *Body) Fill() error {
	buf := b.buf[:0]
	for {
		if len(buf) == cap(buf) {
			// Room for one byte more than announced: the end shows as
			// EOF without another grow.
			buf = slices.Grow(buf, min(int(b.size)+1-len(buf), max(len(buf), 4<<10)))
		}
		n, err := b.read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			b.buf = buf[:0]
			return err
		}
	}
	b.buf, b.buffered = buf, true
	return nil
}

// Read reads the body from the client (the fasthttp transport's streamed
// request body).
func (b *Body) Read(p []byte) (int, error) { return b.read(p) }

// read reads from the client.
func (b *Body) read(p []byte) (int, error) {
	var start time.Time
	if b.deadline && !b.answered.Load() {
		// The engine's header timeout would otherwise cut a long upload
		// short; a body must instead keep pace.
		left := b.pace.Left()
		if left <= 0 {
			return 0, b.fail(pace.ErrTooSlow)
		}
		start = time.Now()
		if err := b.conn.SetReadDeadline(start.Add(left)); err != nil {
			return 0, b.fail(err)
		}
		if b.answered.Load() {
			// Answered meanwhile: its clearing may have come first.
			_ = b.conn.SetReadDeadline(time.Time{})
		}
	}
	if b.interrupted.Load() {
		return 0, errAttemptOver
	}
	n, err := b.r.Read(p)
	if !start.IsZero() {
		b.pace.Waited(time.Since(start), n)
	}
	b.n += int64(n)
	if n > 0 {
		b.got.Store(b.n)
	}
	if err != nil && b.interrupted.Load() {
		// ebb cut the read short, not the client: whatever ended the
		// attempt is the request's failure.
		return n, errAttemptOver
	}
	switch {
	case b.limit > 0 && b.n > b.limit:
		return n, b.fail(ErrBodyTooLarge)
	case b.size >= 0 && b.n > b.size:
		// The engines hold a body to its Content-Length; this is a
		// guard.
		return n, b.fail(ErrBodyTooLong)
	case err == io.EOF && b.size >= 0 && b.n < b.size:
		// Cut short: never forwarded as if whole.
		return n, b.fail(io.ErrUnexpectedEOF)
	case err == io.EOF:
		first := !b.eof
		b.eof = true
		b.whole.Store(true)
		if b.OnEOF != nil && first {
			// Once: a writer may read again after the end (fasthttp's
			// chunked writer does), and the trailers are added once.
			b.OnEOF()
		}
	case err != nil:
		b.fail(err)
	case b.size >= 0 && b.n == b.size:
		b.whole.Store(true)
	}
	return n, err
}

// Answered tells b that the upstream's response has begun: what is left
// of the body is read without a deadline (b may be nil). An upstream that
// answers before it has the whole body (a bidirectional stream, such as
// gRPC's) decides how long it waits for the rest; the pace and the stall
// bound hold only while ebb waits for the body on the upstream's behalf.
func (b *Body) Answered() {
	if b == nil || !b.deadline || b.answered.Swap(true) {
		return
	}
	_ = b.conn.SetReadDeadline(time.Time{})
}

// aLongTimeAgo is a read deadline that has passed, and still has once a
// connection's skew (downstream.Conn.Skew) is added: time.Now() would not.
var aLongTimeAgo = time.Unix(1, 0)

// interrupt makes a read from the client that is blocked, or about to
// start, fail now: the HTTP/1 connection's read deadline passes, an
// HTTP/2 stream's body is closed. The client's connection (its stream)
// is then closed after the response: its request body was not read to
// its end.
func (b *Body) interrupt() {
	b.interrupted.Store(true)
	if b.conn != nil {
		_ = b.conn.SetReadDeadline(aLongTimeAgo)
	} else if c, ok := b.r.(io.Closer); ok {
		_ = c.Close()
	}
}

// StartAttempt starts an attempt of a net/http exchange: the body as that
// attempt sends it, from its start.
func (b *Body) StartAttempt() *Attempt {
	b.Hold()
	a := &Attempt{b: b}
	a.idle.L = &a.mu
	b.cur = a
	return a
}

// StopAttempt ends the latest attempt and waits until nothing reads the
// client's body for it: the client's connection, and the body's engine
// state, are then the handler's again. b may be nil (no body).
func (b *Body) StopAttempt() {
	if b != nil && b.cur != nil {
		b.cur.End(true)
	}
}

// Replayable reports whether an attempt can send the body from its start
// again: it is in memory, or not a byte of it has been read. Only called
// when no attempt reads it.
func (b *Body) Replayable() bool {
	return b.buffered || (b.n == 0 && !b.eof && b.Failed() == nil && !b.interrupted.Load())
}

// Attempt is a request body as one attempt of a net/http exchange
// reads it. Its reads serve the buffered body from the attempt's own
// offset, or read the client's stream; once the attempt is over (closed
// by the Transport, or ended by ebb), they fail, so that no two attempts
// ever read the client's stream and the Body can be released.
type Attempt struct {
	b   *Body
	off int
	// onEOF, if set, runs when a read finds the body's end (after the
	// Body's OnEOF): the HTTP/1 transport's request takes the trailers then.
	onEOF   func()
	mu      sync.Mutex
	idle    sync.Cond // signalled when a read of the client's stream ends
	reading bool
	over    bool
}

func (a *Attempt) Read(p []byte) (int, error) {
	a.mu.Lock()
	if a.over {
		a.mu.Unlock()
		return 0, errAttemptOver
	}
	if b := a.b; b.buffered {
		defer a.mu.Unlock()
		if a.off >= len(b.buf) {
			if a.onEOF != nil {
				a.onEOF()
			}
			return 0, io.EOF
		}
		n := copy(p, b.buf[a.off:])
		a.off += n
		return n, nil
	}
	a.reading = true
	a.mu.Unlock()

	n, err := a.b.read(p)

	a.mu.Lock()
	a.reading = false
	last := a.over // ended during the read: the reference is this read's to drop
	a.idle.Broadcast()
	a.mu.Unlock()
	if last {
		a.b.Release()
	} else if err == io.EOF && a.onEOF != nil {
		a.onEOF()
	}
	return n, err
}

// Close is the Transport's: it is done with the body. It may come while
// the Transport's Read waits for the client (the stream was reset, the
// upstream answered early), and must end that Read: net/http waits for
// it before it returns.
func (a *Attempt) Close() error {
	a.End(false)
	return nil
}

// End ends the attempt, interrupting the read of the client's stream in
// progress, if any. Its reference to the body goes now, or when that read
// returns; with wait, end waits for it. idle reports that no read was in
// progress.
func (a *Attempt) End(wait bool) (idle bool) {
	a.mu.Lock()
	idle = !a.reading
	first := !a.over
	a.over = true
	if first && !idle {
		a.b.interrupt()
	}
	for wait && a.reading {
		a.idle.Wait()
	}
	a.mu.Unlock()
	if first && idle {
		a.b.Release()
	}
	return idle
}
