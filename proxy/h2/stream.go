package h2

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"

	"github.com/ebb-proxy/ebb/proxy/h2/wire"
	"github.com/ebb-proxy/ebb/proxy/pace"
)

// Errors a stream's handler sees.
var (
	// ErrStreamReset: the client reset the stream, or the connection
	// failed or closed under it.
	ErrStreamReset = errors.New("h2: stream reset")
	// errHeadersSent: a second final response.
	errHeadersSent = errors.New("h2: response header already sent")
	// errNoHeaders: body bytes before the response header.
	errNoHeaders = errors.New("h2: response body before its header")
	// errBodyClosed: a read of a request body after its Close.
	errBodyClosed = errors.New("h2: request body closed")
)

// outCap is how many response body bytes a stream holds before Write
// waits for the writer to send them: a slow client costs at most this
// much per stream (plus the flow-control window it grants, which the
// writer never exceeds).
const outCap = 32 << 10

// Stream is one request of an HTTP/2 connection and its response, as the
// handler sees them. The request (pseudo-header fields, fields, body
// size) is read-only once the handler runs; the body is read with Read,
// the trailers with Trailers once Read has returned io.EOF. The response
// is written with AddHeader, WriteHeader, Write and End (or Reset), from
// the handler's goroutine only.
type Stream struct {
	c  *Conn
	id uint32

	// The request, set by the read loop before the handler runs.
	method, scheme, authority, path []byte
	fields                          wire.FieldList // regular fields, in order
	contentLength                   int64          // -1: unknown
	expectContinue                  bool
	pseudo                          wire.FieldList // the pseudo-header fields, validated when complete
	pseudoSeen                      uint8
	hasBody                         bool
	tooLarge                        bool           // the block exceeded limits.max_header_bytes
	malformed                       string         // why the request is malformed (RFC 9113 §8.1.1), if it is
	trailers                        wire.FieldList // the request's trailers, once its body has ended
	inTrailers                      bool           // the block being decoded is the trailers

	// The stream as its context (see streamContext): cancelled is set,
	// under c.mu, when the stream is reset or its handler has returned.
	cancelled atomic.Bool
	// stopWatch is st.unwatch, made once per Stream (streams are pooled).
	stopWatch func() bool

	// Guarded by c.mu.
	done         chan struct{} // the context's Done channel, made when asked for
	watched      io.Closer     // closed when the stream is cancelled (WatchConn)
	watchFired   bool          // the watch closed watched
	keep         bool          // something outside the engine may still hold the stream: it is not pooled
	decoding     bool          // the read loop decodes the stream's trailers
	inStall      time.Time     // when the handler began to wait for body bytes; zero: it does not
	inPace       pace.Budget   // how long its waits may last (limits.min_body_rate)
	outStall     time.Time     // when the response began to wait for a flow-control window; zero: it does not
	cond         sync.Cond     // the handler waits for body bytes or output room
	remoteClosed bool          // END_STREAM received (or the request refused)
	localClosed  bool          // END_STREAM sent
	reset        bool          // RST_STREAM sent or received, or the connection gone
	removed      bool          // no longer in c.streams
	in           []byte        // body bytes received; in[inOff:] not read yet
	inOff        int
	inErr        error // io.EOF once the body has ended whole; ErrStreamReset
	received     int64 // body bytes received
	recvWindow   int64 // what the client may still send on the stream
	unacked      int64 // body bytes read by the handler, not yet credited back
	continued    bool  // a 100 Continue has been queued
	handlerDone  bool
	unwinding    bool // reset while its handler ran (counted in c.unwinding until it returns)
	bodyClosed   bool // nobody reads the body any more

	sendWindow int64         // what the client lets us send
	hq         []byte        // header blocks to send, back to back
	hqItems    []headerItem  // their sizes, in order
	out        []byte        // response body bytes to send
	outOff     int           // out[:outOff] is sent
	outEnd     bool          // the response ends after out (and trailers)
	trailerBlk []byte        // the trailers' header block, sent after out
	rstWanted  bool          // a RST_STREAM(NO_ERROR) follows the end: the client is still sending a body nobody reads
	resetAfter http2.ErrCode // a RST_STREAM with this code follows the output queued (ResetAfterOutput); 0: none
	queued     bool          // in c.ready
	blocked    bool          // in c.blocked
	finalSent  bool          // a final (non-1xx) header block was queued

	// Owned by the handler.
	hb []byte // fields added since the last header block
}

type headerItem struct {
	n   int
	end bool
}

// ID returns the stream's identifier.
func (st *Stream) ID() uint32 { return st.id }

// Method returns the request's :method.
func (st *Stream) Method() []byte { return st.method }

// Scheme returns the request's :scheme.
func (st *Stream) Scheme() []byte { return st.scheme }

// Authority returns the request's :authority, or its Host field if it
// had no :authority (a request whose host fields disagree with it is
// malformed, never served).
func (st *Stream) Authority() []byte { return st.authority }

// Path returns the request's :path (with its query).
func (st *Stream) Path() []byte { return st.path }

// Fields returns the request's regular fields (names in lower case).
func (st *Stream) Fields() *wire.FieldList { return &st.fields }

// ContentLength returns the request's content-length, or -1.
func (st *Stream) ContentLength() int64 { return st.contentLength }

// HasBody reports whether the request has a body (it did not end with its
// header block).
func (st *Stream) HasBody() bool { return st.hasBody }

// TLS reports whether the connection is TLS.
func (st *Stream) TLS() bool { return st.c.tls }

// Context ends when the client resets the stream, the connection is gone
// or the handler has returned; never at a graceful shutdown. It carries
// the values of the context given to Serve.
func (st *Stream) Context() context.Context { return (*streamContext)(st) }

// Trailers returns the request's trailers; valid once Read has returned
// io.EOF.
func (st *Stream) Trailers() *wire.FieldList { return &st.trailers }

// Read reads the request body. It returns io.EOF at its end (with the
// last bytes when they are there), and
// ErrStreamReset if the stream was reset before. Reading credits the
// bytes back to the client's flow-control window: ebb holds at most a
// window of body per stream.
func (st *Stream) Read(p []byte) (int, error) {
	c := st.c
	c.mu.Lock()
	defer c.unlock()
	for st.inOff == len(st.in) && st.inErr == nil {
		if st.expectContinue && !st.continued && !st.finalSent {
			// The client waits for a 100 before it sends the body.
			st.continued = true
			n0 := len(st.hq)
			st.hq = wire.AppendStatus(st.hq, 100)
			st.hqItems = append(st.hqItems, headerItem{n: len(st.hq) - n0})
			c.queueLocked(st)
		}
		if st.inStall.IsZero() && st.inPace.Timed() && !st.finalSent {
			// Until the response begins, ebb waits on the upstream's
			// behalf; then the upstream decides (a bidirectional stream,
			// such as gRPC's, may idle).
			if st.inPace.Left() <= 0 {
				st.inErr, st.bodyClosed = pace.ErrTooSlow, true
				break
			}
			st.inStall = time.Now()
			c.armStallLocked(st.inStall.Add(st.inPace.Left()))
		}
		st.cond.Wait()
	}
	if st.inOff == len(st.in) {
		return 0, st.inErr
	}
	n := copy(p, st.in[st.inOff:])
	st.inOff += n
	if st.inOff == len(st.in) {
		st.in, st.inOff = st.in[:0], 0
	}
	st.unacked += int64(n)
	c.creditLocked(st)
	if st.inOff == len(st.in) && st.inErr == io.EOF {
		// The body's end with its last bytes: an HTTP/2 upstream then
		// gets them with END_STREAM in one DATA frame, not two.
		return n, io.EOF
	}
	return n, nil
}

// MessageStream exempts the request body from the server's MinBodyRate:
// it is a stream of messages (gRPC's) that may rightly be slow. Silence
// is still bounded by HeaderTimeout until the response begins.
func (st *Stream) MessageStream() {
	c := st.c
	c.mu.Lock()
	defer c.unlock()
	st.inPace = pace.New(0, c.srv.HeaderTimeout)
}

// AddHeader adds a response field (a trailer, after WriteHeader) to the
// next header block. Connection-specific fields are dropped, names go in
// lower case.
func (st *Stream) AddHeader(name, value []byte) { addHeader(st, name, value) }

// AddHeaderString is AddHeader for strings.
func (st *Stream) AddHeaderString(name, value string) { addHeader(st, name, value) }

func addHeader[S string | []byte](st *Stream, name, value S) {
	var tmp [64]byte
	lname := wire.Lower(tmp[:0], name)
	if len(lname) == 0 || lname[0] == ':' || wire.ConnectionSpecific(lname) {
		return
	}
	st.hb = wire.AppendField(st.hb, lname, value)
}

// WriteHeader queues the response's header block with status: the
// fields added since the last block. A 1xx status sends an interim
// response (103 Early Hints); a final one may end the stream (end: no
// body).
func (st *Stream) WriteHeader(status int, end bool) error {
	c := st.c
	c.mu.Lock()
	defer c.unlock()
	if st.reset {
		st.hb = st.hb[:0]
		return ErrStreamReset
	}
	if st.finalSent {
		return errHeadersSent
	}
	n := len(st.hq)
	st.hq = wire.AppendStatus(st.hq, status)
	st.hq = append(st.hq, st.hb...)
	st.hb = st.hb[:0]
	final := status >= 200
	st.hqItems = append(st.hqItems, headerItem{n: len(st.hq) - n, end: final && end})
	if final {
		st.finalSent = true
		st.outEnd = end
	}
	c.queueLocked(st)
	return nil
}

// Write queues response body bytes, waiting while the stream already
// holds outCap unsent ones.
func (st *Stream) Write(p []byte) (int, error) {
	c := st.c
	c.mu.Lock()
	defer c.unlock()
	if !st.finalSent {
		return 0, errNoHeaders
	}
	written := 0
	for len(p) > 0 {
		if st.reset {
			return written, ErrStreamReset
		}
		if st.outEnd {
			return written, errHeadersSent
		}
		room := outCap - (len(st.out) - st.outOff)
		if room <= 0 {
			st.cond.Wait()
			continue
		}
		if st.outOff > 0 && st.outOff == len(st.out) {
			st.out, st.outOff = st.out[:0], 0
		} else if st.outOff >= outCap {
			// What was sent goes, so that the buffer stays near outCap
			// however long the stream.
			k := copy(st.out, st.out[st.outOff:])
			st.out, st.outOff = st.out[:k], 0
		}
		n := min(room, len(p))
		st.out = append(st.out, p[:n]...)
		p = p[n:]
		written += n
		c.queueLocked(st)
	}
	return written, nil
}

// End ends the response: after the body written so far, with the fields
// added since WriteHeader as trailers if there are any.
func (st *Stream) End() error {
	c := st.c
	c.mu.Lock()
	defer c.unlock()
	if st.reset {
		return ErrStreamReset
	}
	if !st.finalSent {
		return errNoHeaders
	}
	if st.outEnd {
		return nil
	}
	if len(st.hb) > 0 {
		st.trailerBlk = append(st.trailerBlk[:0], st.hb...)
		st.hb = st.hb[:0]
	}
	st.outEnd = true
	c.queueLocked(st)
	return nil
}

// Interim sends an interim (1xx) response with fields, such as a 103
// Early Hints the upstream sent. Unlike the other response methods it may
// be called from any goroutine (an upstream transport's) until the final
// response is sent; after that it does nothing.
func (st *Stream) Interim(status int, fields [][2]string) {
	if status < 100 || status >= 200 || status == 101 {
		return
	}
	blk := wire.AppendStatus(nil, status)
	var tmp [64]byte
	for _, f := range fields {
		name := wire.Lower(tmp[:0], f[0])
		if len(name) == 0 || name[0] == ':' || wire.ConnectionSpecific(name) {
			continue
		}
		blk = wire.AppendField(blk, name, f[1])
	}
	c := st.c
	c.mu.Lock()
	defer c.unlock()
	if st.reset || st.finalSent {
		return
	}
	st.hq = append(st.hq, blk...)
	st.hqItems = append(st.hqItems, headerItem{n: len(blk)})
	c.queueLocked(st)
}

// Reset resets the stream with code (a response cut short: INTERNAL_ERROR;
// the client's request given up: CANCEL).
func (st *Stream) Reset(code http2.ErrCode) {
	c := st.c
	c.mu.Lock()
	defer c.unlock()
	c.resetLocked(st, code, true)
}

// ResetAfterOutput resets the stream (code not 0) once what the handler
// has written so far has gone out (within the flow-control windows, and
// the write timeout): a response cut short by its upstream reaches the
// client as far as it came, then the reset.
func (st *Stream) ResetAfterOutput(code http2.ErrCode) {
	c := st.c
	c.mu.Lock()
	defer c.unlock()
	if st.reset {
		return
	}
	if len(st.hq) == 0 && st.outOff == len(st.out) {
		c.resetLocked(st, code, true)
		return
	}
	st.resetAfter = code
	c.queueLocked(st)
}

// bodyReader is the request body as an io.Reader that is never the
// Stream itself, for APIs that must not see Stream's other methods.
type bodyReader struct{ st *Stream }

func (b bodyReader) Read(p []byte) (int, error) { return b.st.Read(p) }

// Close stops reading the body: a read blocked now or later fails, and
// what the client still sends is discarded (and credited back).
func (b bodyReader) Close() error {
	st := b.st
	c := st.c
	c.mu.Lock()
	defer c.unlock()
	if st.inErr == nil {
		st.inErr = errBodyClosed
	}
	st.bodyClosed = true
	st.unacked += int64(len(st.in) - st.inOff)
	st.in, st.inOff = nil, 0
	st.cond.Broadcast()
	c.creditLocked(st)
	return nil
}

// Body returns the request body as a plain io.Reader.
func (st *Stream) Body() io.Reader { return bodyReader{st} }

// streamContext is a Stream as its context.Context. It costs nothing
// unless Done is called (a channel, and the stream is then not pooled,
// since whoever waits on the channel may outlive the handler), and
// WatchConn lets the HTTP/1 upstream transport have its connection closed
// at the stream's end without a goroutine or an allocation per request,
// which context.AfterFunc costs.
type streamContext Stream

// Deadline returns no deadline.
func (sc *streamContext) Deadline() (time.Time, bool) { return time.Time{}, false }

// Done returns a channel closed when the stream ends.
func (sc *streamContext) Done() <-chan struct{} {
	st := (*Stream)(sc)
	st.c.mu.Lock()
	defer st.c.mu.Unlock()
	if st.done == nil {
		st.done = make(chan struct{})
		if st.cancelled.Load() {
			close(st.done)
		}
	}
	st.keep = true
	return st.done
}

// Err returns context.Canceled once the stream has ended.
func (sc *streamContext) Err() error {
	if sc.cancelled.Load() {
		return context.Canceled
	}
	return nil
}

// Value returns the value of the context given to Serve.
func (sc *streamContext) Value(key any) any { return sc.c.ctx.Value(key) }

func (sc *streamContext) String() string { return "h2.Stream.Context" }

// WatchConn closes conn (on a goroutine of its own) when the stream ends,
// at once if it has, unless stop is called first; stop reports whether it
// was, as the stop of context.AfterFunc does. One watch at a time.
func (sc *streamContext) WatchConn(conn io.Closer) (stop func() bool) {
	st := (*Stream)(sc)
	st.c.mu.Lock()
	defer st.c.mu.Unlock()
	st.watched, st.watchFired = conn, false
	if st.cancelled.Load() {
		st.fireWatchLocked()
	}
	return st.stopWatch
}

func (st *Stream) unwatch() bool {
	st.c.mu.Lock()
	defer st.c.mu.Unlock()
	st.watched = nil
	return !st.watchFired
}

func (st *Stream) fireWatchLocked() {
	if w := st.watched; w != nil {
		st.watched, st.watchFired = nil, true
		go w.Close()
	}
}

// pin keeps the stream out of the pool: something outside the engine
// may hold it after its handler has returned.
func (st *Stream) pin() {
	st.c.mu.Lock()
	st.keep = true
	st.c.mu.Unlock()
}

// cancelLocked ends the stream's context.
func (st *Stream) cancelLocked() {
	if st.cancelled.Swap(true) {
		return
	}
	if st.done != nil {
		close(st.done)
	}
	st.fireWatchLocked()
}

// streamPool holds streams (and their buffers) for new ones.
var streamPool sync.Pool

// bufKeep bounds the buffers a pooled stream keeps.
const bufKeep = 64 << 10

// clear makes st like new, keeping its buffers.
func (st *Stream) clear() {
	fields, pseudo, trailers := st.fields, st.pseudo, st.trailers
	hq, hqItems, trailerBlk, hb := st.hq[:0], st.hqItems[:0], st.trailerBlk[:0], st.hb[:0]
	in, out, stop := st.in[:0], st.out[:0], st.stopWatch
	if cap(in) > bufKeep {
		in = nil
	}
	if cap(out) > bufKeep {
		out = nil
	}
	fields.Reset()
	pseudo.Reset()
	trailers.Reset()
	*st = Stream{fields: fields, pseudo: pseudo, trailers: trailers, hq: hq, hqItems: hqItems,
		trailerBlk: trailerBlk, hb: hb, in: in, out: out, stopWatch: stop}
}

// Interim passes an upstream's interim response on (upstream.InterimSink).
func (sc *streamContext) Interim(status int, fields [][2]string) {
	(*Stream)(sc).Interim(status, fields)
}

// interimFields passes an upstream's interim response on to the client
// (Interim).
func (st *Stream) interimFields(status int, l *wire.FieldList) {
	fields := make([][2]string, 0, l.Len())
	for i := range l.Len() {
		k, v := l.At(i)
		fields = append(fields, [2]string{string(k), string(v)})
	}
	st.Interim(status, fields)
}

// trailerBlock encodes the request's trailers, once its body has ended,
// for an HTTP/2 upstream: but the names that frame or route a message.
func (st *Stream) trailerBlock() []byte {
	var blk []byte
	t := st.Trailers()
	for i := range t.Len() {
		name, value := t.At(i)
		if trailerAllowed(name) && !wire.ConnectionSpecific(name) {
			blk = wire.AppendField(blk, name, value)
		}
	}
	return blk
}

// BodyArrived returns the size of a request body that has arrived whole
// (its END_STREAM read, nothing of it read yet by the handler), or false.
// A gRPC unary call's message usually has by the time its handler runs.
func (st *Stream) BodyArrived() (int64, bool) {
	c := st.c
	c.mu.Lock()
	defer c.unlock()
	if st.inErr != io.EOF || st.reset || st.inOff != 0 {
		return 0, false
	}
	return int64(len(st.in)), true
}
