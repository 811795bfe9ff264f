package upstream

import (
	"bufio"
	"context"
	"io"
	"net"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
)

// Full duplex over HTTP/1.1: a request body that streams from a client
// whose response can be relayed while the body still arrives (an HTTP/2
// stream's, Body.FullDuplex) is written on a goroutine of its own, the
// duplex writer, while the exchange reads the response. An upstream that
// answers each piece of the body as it reads it (an echo, a
// bidirectional stream) is then heard by the client piece by piece,
// rather than in one burst after the body's end; and one that answers
// before it has read the body (a 401 or 413 to an upload it does not
// want) is heard at once.
//
// The exchange owns the writer: it waits for it before the attempt ends,
// or hands it to the streamed response body, whose end waits for it. The
// connection goes back to the pool only when both directions ended
// cleanly; once the response is whole, a writer still waiting for the
// client's body is cut short (its read interrupted, the connection
// closed). Requests without such a body are written whole before the
// response is read, on the exchange's goroutine, as before.

// duplexBody is a request body the duplex writer writes: a Body, or an
// attemptStream (an auto cluster's request, see RoundTripHTTP).
type duplexBody interface {
	io.Reader
	// Complete reports whether the whole body has been read.
	Complete() bool
	// fullDuplex reports whether the engine relays the response while
	// the body may still be read (Body.FullDuplex).
	fullDuplex() bool
	// interrupt ends a read of the client's body in progress.
	interrupt()
}

// duplex is the writer of one full-duplex exchange. The exchange sets
// conn, body and timeout before it starts the writer and reads them only;
// bw and buf are the writer's; err is the writer's until it signals done,
// the exchange's after; headRead is guarded by mu. Pooled per transport.
type duplex struct {
	conn    net.Conn
	body    duplexBody
	size    int64         // the body's Content-Length, or -1 (chunked)
	timeout time.Duration // timeouts.response
	bw      *bufio.Writer
	err     error
	done    chan struct{} // one value: the writer has ended (capacity 1)
	// headRead: the exchange has read the response head, or given up on
	// it, and sets the connection's read deadline itself from then on.
	mu       sync.Mutex
	headRead bool
	buf      [16 << 10]byte // one HTTP/2 DATA frame at the default size
}

// exchangeDuplex is exchange for a request whose body is full duplex: the
// writer sends the request while the response head, and then the body,
// are read. q is what the response's framing needs of the request, read
// before the writer started.
func (t *transport[C]) exchangeDuplex(ctx context.Context, a *attempt[C], req *fasthttp.Request, resp *fasthttp.Response, body duplexBody, q asked) (bool, error) {
	// No deadline for the head while the request goes out: the upstream
	// may rightly wait for the whole body before it answers, for as long
	// as the client takes to send it (which the engine bounds). The
	// writer arms timeouts.response at the request's end, as exchange
	// does once it has written the request.
	if err := a.conn.SetReadDeadline(time.Time{}); err != nil {
		return a.fail(KindBroken, err)
	}
	a.duplex = t.startDuplex(a.conn, req, body)
	br := t.hc.AcquireReader(a.conn)
	sink, _ := ctx.(InterimSink)
	nothing, err := ReadResponseHeader(resp, br, sink)
	a.duplex.headDone()
	if err != nil {
		t.hc.ReleaseReader(br)
		_, writeErr := a.endDuplex(false)
		return a.headFailed(err, writeErr, nothing)
	}
	// From the head on, timeouts.response bounds each read of the
	// response, whatever the request's writer is doing.
	if err := a.conn.SetReadDeadline(time.Now().Add(t.responseTimeout)); err != nil {
		t.hc.ReleaseReader(br)
		resp.Reset()
		return a.fail(KindBroken, err)
	}
	return a.readBody(resp, br, q, true)
}

// startDuplex starts the writer of req, whose body is body, on conn.
func (t *transport[C]) startDuplex(conn net.Conn, req *fasthttp.Request, body duplexBody) *duplex {
	d := t.duplexes.Get().(*duplex)
	size := req.Header.ContentLength()
	d.conn, d.body, d.size, d.timeout = conn, body, int64(max(size, -1)), t.responseTimeout
	// The writer goes through d (see WriteTo): fasthttp would keep the
	// head, and the pieces of a body with a Content-Length, in its
	// buffer until it fills.
	req.SetBodyStream(d, size)
	go t.writeRequest(d, req)
	return d
}

// writeRequest is the writer: it writes req, then tells the exchange.
func (t *transport[C]) writeRequest(d *duplex, req *fasthttp.Request) {
	bw := t.hc.AcquireWriter(d.conn)
	d.bw = bw
	err := req.Write(bw)
	if err == nil {
		err = bw.Flush()
	}
	if req.IsBodyStream() {
		// The request failed before its body (fasthttp drops the stream
		// once it has written it): the pooled d must not stay in it.
		req.ResetBody()
	}
	d.bw = nil
	t.hc.ReleaseWriter(bw)
	d.mu.Lock()
	if !d.headRead && (err == nil || isWriteError(err)) {
		// The response head is still awaited: from the request's end
		// (or from the moment the upstream stopped reading it, when it
		// may have answered early), as without full duplex.
		wait := d.timeout
		if err != nil {
			wait = min(wait, earlyAnswerWait)
		}
		_ = d.conn.SetReadDeadline(time.Now().Add(wait))
	}
	d.mu.Unlock()
	if err != nil && !isWriteError(err) {
		// The client's body failed (or the exchange cut it short): the
		// upstream must neither wait for the rest nor take what it got
		// for a whole request, and the exchange's read must end.
		_ = d.conn.Close()
	}
	d.err = err
	d.done <- struct{}{}
}

// WriteTo is how fasthttp writes the body (see fasthttp.BodyWriterTo):
// what is buffered (the head, the last piece) is flushed before each read
// of the client's body, which may wait, so that the upstream gets each
// piece as the client sent it. A body with a Content-Length is whole once
// that many bytes are written: the writer does not wait for the client to
// say it has ended (the HTTP/2 engine holds a stream to its
// content-length).
func (d *duplex) WriteTo(w io.Writer) (int64, error) {
	var n int64
	for d.size < 0 || n < d.size {
		if err := d.bw.Flush(); err != nil {
			return n, err
		}
		p := d.buf[:]
		if d.size >= 0 {
			p = p[:min(int64(len(p)), d.size-n)]
		}
		nr, err := d.body.Read(p)
		if err != nil && err != io.EOF {
			// The client's body failed (too large, too slow, reset):
			// nothing more of it goes up.
			return n, err
		}
		if nr > 0 {
			nw, werr := w.Write(d.buf[:nr])
			n += int64(nw)
			if werr != nil {
				return n, werr
			}
		}
		if err == io.EOF {
			return n, nil
		}
	}
	return n, nil
}

// SupportsBodyWriteTo has fasthttp use WriteTo, whatever the framing.
func (*duplex) SupportsBodyWriteTo() bool { return true }

// Read makes d a body stream; fasthttp writes it through WriteTo.
func (d *duplex) Read(p []byte) (int, error) { return d.body.Read(p) }

// headDone tells the writer that the exchange sets the connection's read
// deadline from now on.
func (d *duplex) headDone() {
	d.mu.Lock()
	d.headRead = true
	d.mu.Unlock()
}

// endDuplex ends the attempt's writer, if it has one: see
// transport.endDuplex. Without one, the request was written whole.
func (a *attempt[C]) endDuplex(clean bool) (written bool, writeErr error) {
	d := a.duplex
	if d == nil {
		return true, nil
	}
	a.duplex = nil
	return a.t.endDuplex(d, clean)
}

// endDuplex waits for d's writer to end and gives d back to the pool.
// clean says that the response ended whole and its connection could be
// reused: a writer that has read the client's body whole is then given
// earlyAnswerWait to finish writing it. Otherwise a writer still at work
// is cut short: its read of the client's body interrupted, the
// connection closed. written reports that the whole request went out;
// writeErr is why it did not, unless the exchange cut it short (nil).
func (t *transport[C]) endDuplex(d *duplex, clean bool) (written bool, writeErr error) {
	ended := false
	select {
	case <-d.done:
		ended = true
	default:
		if clean && d.body.Complete() {
			timer := time.NewTimer(earlyAnswerWait)
			select {
			case <-d.done:
				ended = true
			case <-timer.C:
			}
			timer.Stop()
		}
	}
	if !ended {
		d.body.interrupt()
		_ = d.conn.Close()
		<-d.done
	}
	if ended {
		writeErr = d.err
	}
	written = ended && d.err == nil
	d.conn, d.body, d.err, d.headRead = nil, nil, nil, false
	t.duplexes.Put(d)
	return written, writeErr
}
