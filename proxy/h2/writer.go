// The connection's writer: it frames what streams have to send,
// within the flow-control windows, and writes it batch by batch.

package h2

import (
	"runtime"
	"time"

	"golang.org/x/net/http2"

	"github.com/ebb-proxy/ebb/proxy/h2/wire"
)

// pendWriter appends the frames wfr writes to c.pend; it runs with c.mu
// held.
type pendWriter struct{ c *Conn }

func (w pendWriter) Write(p []byte) (int, error) {
	w.c.pend = append(w.c.pend, p...)
	return len(p), nil
}

// queueLocked puts st among the streams with output for the writer.
func (c *Conn) queueLocked(st *Stream) {
	if !st.queued {
		st.queued = true
		c.ready = append(c.ready, st)
	}
	c.wakeLocked()
}

func (c *Conn) wakeLocked() {
	if c.writerIdle {
		c.writerIdle = false
		select {
		case c.wake <- struct{}{}:
		default:
		}
	}
}

// writeLoop is the connection's writer: it gathers what is queued into
// one buffer and writes it in one system call, batch after batch.
func (c *Conn) writeLoop() {
	defer close(c.writerDone)
	yielded := false
	for {
		c.mu.Lock()
		c.fillLocked()
		if len(c.pend) > 0 && len(c.pend) < minBatch && c.running > 0 && !yielded && !c.wclose {
			// Little to write while handlers are still at work: those
			// about to queue more get to run first, so that one system
			// call carries what several of them answer (grpc-go's writer
			// does the same). With none running, nothing is coming.
			yielded = true
			c.unlock()
			runtime.Gosched()
			continue
		}
		yielded = false
		if len(c.pend) == 0 {
			if c.wclose {
				abort := c.abortOnExit
				c.unlock()
				c.endWrites(abort)
				return
			}
			c.writerIdle = true
			c.unlock()
			<-c.wake
			continue
		}
		buf := c.pend
		c.pend, c.spare = c.spare[:0], nil
		c.unlock()
		_, err := c.nc.Write(buf)
		c.mu.Lock()
		if cap(buf) <= 2*maxBatch {
			c.spare = buf[:0]
		}
		if err != nil {
			c.closeLocked()
			c.pend = c.pend[:0]
			c.unlock()
			c.nc.Close()
			return
		}
		c.unlock()
	}
}

// endWrites ends the connection's sending side once the writer is done:
// closing it when the connection failed; otherwise half-closing it (the
// final GOAWAY is out, no stream is left) and giving the client a moment
// to close first, so that nothing it sent crosses a close (a reset).
func (c *Conn) endWrites(abort bool) {
	if abort {
		c.nc.Close()
		return
	}
	if cw, ok := c.nc.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	_ = c.nc.SetReadDeadline(time.Now().Add(closeLinger))
}

// fillLocked moves the output of ready streams into c.pend, within the
// flow-control windows and about maxBatch bytes.
func (c *Conn) fillLocked() {
	i := 0
	for ; i < len(c.ready) && len(c.pend) < maxBatch; i++ {
		st := c.ready[i]
		st.queued = false
		c.emitLocked(st)
		c.recycleLocked(st)
	}
	n := copy(c.ready, c.ready[i:])
	clear(c.ready[n:])
	c.ready = c.ready[:n]
}

// emitLocked frames what st has to send.
func (c *Conn) emitLocked(st *Stream) {
	if st.reset {
		st.hq, st.hqItems = st.hq[:0], st.hqItems[:0]
		st.out, st.outOff = nil, 0
		return
	}
	off := 0
	for _, it := range st.hqItems {
		c.writeBlockLocked(st.id, st.hq[off:off+it.n], it.end)
		off += it.n
		if it.end {
			st.localClosed = true
		}
	}
	st.hq, st.hqItems = st.hq[:0], st.hqItems[:0]
	sent, stalled := false, false
	for st.outOff < len(st.out) {
		if len(c.pend) >= maxBatch {
			c.queueLocked(st)
			break
		}
		n := int(min(int64(len(st.out)-st.outOff), st.sendWindow, c.sendWindow, int64(c.peerFrame)))
		if n <= 0 {
			if c.sendWindow <= 0 && !st.blocked {
				st.blocked = true
				c.blocked = append(c.blocked, st)
			}
			stalled = true
			break // the stream's window: its WINDOW_UPDATE queues it again
		}
		end := st.outEnd && st.outOff+n == len(st.out) && len(st.trailerBlk) == 0
		_ = c.wfr.WriteData(st.id, end, st.out[st.outOff:st.outOff+n])
		st.outOff += n
		st.sendWindow -= int64(n)
		c.sendWindow -= int64(n)
		sent = true
		if end {
			st.localClosed = true
		}
	}
	if st.outOff == len(st.out) {
		st.out, st.outOff = st.out[:0], 0
	}
	if st.outEnd && st.outOff == len(st.out) && !st.localClosed {
		if len(st.trailerBlk) > 0 {
			c.writeBlockLocked(st.id, st.trailerBlk, true)
		} else {
			_ = c.wfr.WriteData(st.id, true, nil)
		}
		st.localClosed = true
	}
	if sent {
		st.outStall = time.Time{}
		st.cond.Broadcast()
	}
	if stalled && st.outStall.IsZero() && c.srv.WriteTimeout > 0 {
		st.outStall = time.Now()
		c.armStallLocked(st.outStall.Add(c.srv.WriteTimeout))
	}
	if st.resetAfter != 0 && len(st.hq) == 0 && st.outOff == len(st.out) {
		// What the handler wrote is out: now the reset (ResetAfterOutput).
		c.resetLocked(st, st.resetAfter, true)
		return
	}
	if st.localClosed {
		if st.rstWanted && !st.remoteClosed {
			c.resetLocked(st, http2.ErrCodeNo, true)
			return
		}
		c.removeLocked(st)
	}
}

// writeBlockLocked frames a header block: HEADERS, then CONTINUATION
// frames if it is larger than a frame.
func (c *Conn) writeBlockLocked(id uint32, blk []byte, end bool) {
	if !c.sentTableSize {
		// The first block says the dynamic table is empty and stays so.
		c.sentTableSize = true
		b := make([]byte, 0, len(blk)+1)
		blk = append(append(b, wire.TableSizeZero), blk...)
	}
	wire.WriteBlock(c.wfr, id, blk, end, c.peerFrame)
}
