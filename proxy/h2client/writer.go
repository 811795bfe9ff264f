// The connection's writer: it writes what the other goroutines framed
// into the connection's output buffer, batch by batch.

package h2client

import (
	"runtime"
	"time"
)

// wakeLocked wakes the writer for what was just queued.
func (c *conn) wakeLocked() {
	if c.writerIdle {
		c.writerIdle = false
		select {
		case c.wake <- struct{}{}:
		default:
		}
	}
}

// writeLoop is the connection's writer: everything queued since its last
// write goes in one system call.
func (c *conn) writeLoop() {
	defer close(c.writerDone)
	yielded := false
	// deadline is the write deadline set: renewed once half of
	// writeTimeout has gone, not before each write (setting one costs a
	// lock and a timer change in the runtime).
	var deadline time.Time
	for {
		c.mu.Lock()
		for len(c.pend) == 0 && !c.wclose {
			c.writerIdle = true
			c.mu.Unlock()
			<-c.wake
			c.mu.Lock()
		}
		if len(c.pend) < minBatch && !yielded && !c.wclose {
			// Little to write: the requests about to be framed (the
			// client side's streams arrive in bursts, read together)
			// get to run first, so that one system call carries
			// several of them, as the server engine's writer does.
			yielded = true
			c.mu.Unlock()
			runtime.Gosched()
			continue
		}
		yielded = false
		if len(c.pend) == 0 {
			graceful := c.err == errClosedGracefully
			c.mu.Unlock()
			c.endWrites(graceful)
			return
		}
		buf := c.pend
		c.pend, c.spare = c.spare[:0], nil
		c.control = 0
		closing := c.wclose
		c.wcond.Broadcast() // writers waiting for room in pend
		c.mu.Unlock()
		if now := time.Now(); closing {
			deadline = now.Add(closeLinger)
			_ = c.nc.SetWriteDeadline(deadline)
		} else if deadline.Sub(now) < writeTimeout/2 {
			deadline = now.Add(writeTimeout)
			_ = c.nc.SetWriteDeadline(deadline)
		}
		_, err := c.sio.Write(buf)
		c.mu.Lock()
		if cap(buf) <= 2*maxBatch {
			c.spare = buf[:0]
		}
		c.mu.Unlock()
		if err != nil {
			c.fail(err)
		}
	}
}

// endWrites ends the connection's sending side once the writer is done:
// half-closing it after a graceful GOAWAY, and giving the upstream a
// moment to close first, so that nothing it sent crosses a close;
// closing it otherwise.
func (c *conn) endWrites(graceful bool) {
	if !graceful {
		c.nc.Close()
		return
	}
	if cw, ok := c.nc.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	_ = c.nc.SetReadDeadline(time.Now().Add(closeLinger))
}
