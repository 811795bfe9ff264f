// Package events ends server-sent event streams (text/event-stream
// responses) on an event boundary when ebb drains: a Cutter follows the
// stream's events as the body is relayed and, once asked, ends the body
// right after a complete event, so that the client's EventSource sees a
// normal end and reconnects (elsewhere, with Last-Event-ID) instead of a
// stream cut in the middle of an event at the drain's deadline.
//
// It imports nothing of ebb's; the engines use it on both transports.
package events

import (
	"io"
	"mime"
	"sync"
	"sync/atomic"
)

// IsEventStream reports whether a Content-Type is text/event-stream. It
// allocates nothing for any other.
func IsEventStream[T string | []byte](contentType T) bool {
	const mt = "text/event-stream"
	if len(contentType) < len(mt) {
		return false
	}
	for i := range len(mt) {
		if c := contentType[i]; c != mt[i] && c|0x20 != mt[i] {
			return false
		}
	}
	if len(contentType) == len(mt) {
		return true
	}
	t, _, err := mime.ParseMediaType(string(contentType))
	return err == nil && t == mt
}

// Cutter follows an event stream's bytes as they are relayed (Cut, on
// the goroutine reading the body) and, once asked (Ask, from any
// goroutine), ends the stream at the first event boundary: right after
// the blank line that ends an event, or at once if the bytes relayed so
// far end on one. Unless all, only a stream that has sent an id field is
// ended: its client resumes with Last-Event-ID; another (a finite answer
// streamed as events, say) is left to finish.
//
// Interrupt, if set, wakes a read of the body blocked while the stream
// sits on a boundary (an idle stream between events); the reader then
// calls Cut or Done, which end it. It is never called after Close. Ended,
// if set, is called once, by the reader, when the Cutter ends the stream:
// before the reader returns its end.
type Cutter struct {
	all       bool
	interrupt func()
	onEnd     func()

	asked     atomic.Bool
	boundary  atomic.Bool // the bytes relayed so far end on an event boundary
	resumable atomic.Bool // an id field has been relayed
	ended     atomic.Bool

	mu     sync.Mutex
	closed bool // guarded by mu: no more interrupts

	// The scanner's state, owned by the reader.
	lineEmpty bool // the current line has nothing on it yet
	pendingCR bool // the last byte was CR: an LF next ends the same line
	idMatch   int  // bytes of "id:" matched at the line's start; -1: not an id line
}

// NewCutter returns a Cutter for a stream about to be relayed; all ends
// every stream, not only resumable ones.
func NewCutter(all bool, interrupt, ended func()) *Cutter {
	c := &Cutter{all: all, interrupt: interrupt, onEnd: ended, lineEmpty: true}
	c.boundary.Store(true) // nothing relayed yet
	return c
}

func (c *Cutter) eligible() bool { return c.all || c.resumable.Load() }

// Ask asks for the stream's end at its next event boundary. It never
// blocks; it may be called any number of times.
func (c *Cutter) Ask() {
	c.asked.Store(true)
	if !c.boundary.Load() || !c.eligible() {
		return // the reader ends it at the next boundary
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closed && c.interrupt != nil {
		c.interrupt()
	}
}

// Close ends the Cutter's use: Interrupt is not called from then on.
func (c *Cutter) Close() {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
}

// Ended reports whether the Cutter ended the stream.
func (c *Cutter) Ended() bool { return c.ended.Load() }

// Done reports whether the stream ends now, before anything more is
// read: asked, and the bytes relayed end on a boundary. The reader calls
// it before each read of the body, and after a read that failed.
func (c *Cutter) Done() bool {
	if c.ended.Load() {
		return true
	}
	if c.asked.Load() && c.boundary.Load() && c.eligible() {
		c.end()
		return true
	}
	return false
}

// end marks the stream ended, and tells onEnd the first time.
func (c *Cutter) end() {
	if c.ended.CompareAndSwap(false, true) && c.onEnd != nil {
		c.onEnd()
	}
}

// Cut scans b, just read from the body, and returns how many of its
// bytes to relay; end says the stream ends after them.
func (c *Cutter) Cut(b []byte) (n int, end bool) {
	if c.Done() {
		return 0, true
	}
	for i, x := range b {
		if c.pendingCR && x == '\n' {
			c.pendingCR = false // CR LF: one line end
			continue
		}
		c.pendingCR = false
		if x != '\r' && x != '\n' {
			if c.lineEmpty {
				c.idMatch = 0
			}
			c.lineEmpty = false
			if c.idMatch >= 0 && c.idMatch < 3 {
				if x == "id:"[c.idMatch] {
					c.idMatch++
					if c.idMatch == 3 {
						c.resumable.Store(true)
					}
				} else {
					c.idMatch = -1
				}
			}
			c.boundary.Store(false)
			continue
		}
		// A line ends here. An empty one ends the event (the stream's
		// first bytes are a boundary too).
		c.pendingCR = x == '\r'
		if c.lineEmpty {
			c.boundary.Store(true)
			if c.asked.Load() && c.eligible() {
				c.end()
				return i + 1, true
			}
		}
		c.lineEmpty = true
	}
	return len(b), false
}

// Reader returns src relayed through c: it ends (io.EOF) where c cuts
// the stream.
func (c *Cutter) Reader(src io.Reader) io.Reader { return &reader{c: c, src: src} }

type reader struct {
	c   *Cutter
	src io.Reader
}

func (r *reader) Read(p []byte) (int, error) {
	if r.c.Done() {
		return 0, io.EOF
	}
	n, err := r.src.Read(p)
	return r.c.After(p, n, err)
}

// After applies c to a read of the body that put n bytes in p and
// returned err, and returns what the body's reader returns in its place:
// the bytes up to the cut and io.EOF when c cuts the stream there, or
// when the read failed (was interrupted) on a boundary after the ask.
// Callers call Done before the read.
func (c *Cutter) After(p []byte, n int, err error) (int, error) {
	if n > 0 {
		if k, end := c.Cut(p[:n]); end {
			return k, io.EOF
		}
	}
	if err != nil && err != io.EOF && c.Done() {
		return n, io.EOF
	}
	return n, err
}
