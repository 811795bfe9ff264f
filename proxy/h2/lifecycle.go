// A stream's life on its connection once it is open: resets, either
// side's; its removal from the connection and its return to the
// pool; its handler's run on a worker and what follows its return.

package h2

import (
	"io"
	"runtime/debug"

	"golang.org/x/net/http2"
)

// streamError resets stream id with code (RFC 9113 §5.4.2).
func (c *Conn) streamError(id uint32, code http2.ErrCode) error {
	c.mu.Lock()
	defer c.unlock()
	if st := c.streams[id]; st != nil {
		c.resetLocked(st, code, true)
		return nil
	}
	c.queueRSTLocked(id, code)
	return nil
}

// queueRSTLocked queues a RST_STREAM and remembers that ebb reset the
// stream: frames the client had sent on it before seeing the reset are
// ignored (RFC 9113 §5.1, "closed").
func (c *Conn) queueRSTLocked(id uint32, code http2.ErrCode) {
	if c.closed {
		return
	}
	_ = c.wfr.WriteRSTStream(id, code)
	c.srv.Resets.add(&c.srv.Resets.sent, code)
	c.resetIDs[c.resetNext] = id
	c.resetNext = (c.resetNext + 1) % len(c.resetIDs)
	c.controlLocked()
}

func (c *Conn) wasReset(id uint32) bool {
	for _, r := range c.resetIDs {
		if r == id {
			return true
		}
	}
	return false
}

// resetLocked resets st: its handler's reads and writes fail, its output
// is dropped, and (send) a RST_STREAM with code goes to the client.
func (c *Conn) resetLocked(st *Stream, code http2.ErrCode, send bool) {
	if st.reset {
		return
	}
	st.reset = true
	if !st.handlerDone {
		st.unwinding = true
		c.unwinding++
	}
	if st.inErr != io.EOF || st.inOff < len(st.in) {
		st.inErr = ErrStreamReset
	}
	st.in, st.inOff = st.in[:0], 0
	st.cancelLocked()
	st.cond.Broadcast()
	if send && !(st.localClosed && st.remoteClosed) {
		c.queueRSTLocked(st.id, code)
	}
	c.removeLocked(st)
}

// removeLocked takes st out of the connection's streams once both sides
// are done with it (or it was reset).
func (c *Conn) removeLocked(st *Stream) {
	if st.removed || !(st.reset || st.localClosed && st.remoteClosed) {
		return
	}
	st.removed = true
	delete(c.streams, st.id)
	if len(c.streams) == 0 {
		if c.idle != nil && !c.closed {
			c.idle.Reset(c.srv.IdleTimeout)
		}
		c.maybeFinishLocked()
		c.stateDirty = true
	}
	c.recycleLocked(st)
}

// recycleLocked gives st back to the pool once nothing refers to it: its
// handler has returned, it has left c.streams, the writer's queues and the
// read loop, and nothing outside the engine may hold it (st.keep).
func (c *Conn) recycleLocked(st *Stream) {
	if !st.handlerDone || !st.removed || st.queued || st.blocked || st.decoding || st.keep {
		return
	}
	// Pooled by unlock, so that every check of this critical section
	// sees the stream as it is, kept (st.keep).
	st.keep = true
	c.free = append(c.free, st)
}

func (c *Conn) onRSTStream(f *http2.RSTStreamFrame) error {
	c.srv.Resets.add(&c.srv.Resets.received, f.ErrCode)
	c.mu.Lock()
	defer c.unlock()
	st := c.streams[f.StreamID]
	if st == nil {
		if f.StreamID > c.maxClientID {
			return c.connErrLocked(http2.ErrCodeProtocol, "RST_STREAM on an idle stream")
		}
		return nil
	}
	if !st.handlerDone {
		// A reset before the answer: the upstream request is cancelled
		// (the stream's context), and it counts against the budget.
		c.resetBudget--
		if c.resetBudget < 0 {
			return c.connErrLocked(http2.ErrCodeEnhanceYourCalm, "too many streams reset before their answer")
		}
	}
	c.resetLocked(st, f.ErrCode, false)
	return nil
}

// serveStream runs the handler for st, and makes sure the stream is
// answered.
// It runs on a worker's goroutine, and is the last to touch st there.
func (c *Conn) serveStream(st *Stream) {
	defer c.handlers.Done()
	defer c.handlerDone(st)
	defer func() {
		if r := recover(); r != nil && c.srv.Log != nil {
			// A bug of ebb's: the stream is reset, the connection and
			// the process live on.
			c.srv.Log.Error("HTTP/2 stream handler panicked", "stream", st.id, "panic", r, "stack", string(debug.Stack()))
		}
	}()
	c.srv.Handler.ServeStream(st)
}

// handlerDone is what happens when a stream's handler returns: an
// unanswered stream is reset; an answered one whose body is still coming
// is reset (NO_ERROR) once the answer is out, so the client stops sending
// (RFC 9113 §8.1).
func (c *Conn) handlerDone(st *Stream) {
	c.mu.Lock()
	defer c.unlock()
	st.handlerDone = true
	c.running--
	if st.unwinding {
		c.unwinding--
	}
	st.cancelLocked()
	defer c.recycleLocked(st)
	if st.reset {
		return
	}
	if st.outEnd && c.resetBudget < int(c.srv.maxStreams()) {
		c.resetBudget++
	}
	if !st.outEnd {
		c.resetLocked(st, http2.ErrCodeInternal, true)
		return
	}
	// Bytes not read are credited back: nobody will read them.
	st.unacked += int64(len(st.in) - st.inOff)
	st.in, st.inOff = st.in[:0], 0
	if !st.remoteClosed {
		st.rstWanted = true
		if st.localClosed {
			c.resetLocked(st, http2.ErrCodeNo, true)
		}
	}
}
