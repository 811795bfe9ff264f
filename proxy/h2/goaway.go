// How a connection ends: the drain's two-phase GOAWAY, Terminate,
// connection errors (a GOAWAY with the error), and the close once
// the last stream is done.

package h2

import (
	"crypto/rand"
	"errors"
	"time"

	"golang.org/x/net/http2"
)

// GoAway starts the two-phase graceful shutdown of RFC 9113 §6.8: a
// GOAWAY with the highest stream id and no error ("stop opening streams;
// those on their way are still served") and a PING are sent at once; once
// the PING is acknowledged, or after grace, the final GOAWAY carries the
// real last stream id. The connection closes after its last stream.
// Calling it again does nothing.
//
// On a connection where the client has not opened a stream yet (one
// accepted during the drain, a spare one) the first GOAWAY waits for the
// first stream, which is served, or for idle to pass without one (idle
// <= 0: for the first stream only). Sent before, it would close the
// connection under the request the client dialled it for, and a client
// that has not begun a request on a connection does not expect it to end:
// Go's, for one, fails that request ("client conn could not be
// established") rather than retry it. An HTTP/1 connection accepted during
// the drain likewise serves its first request, with Connection: close.
func (c *Conn) GoAway(grace, idle time.Duration) {
	c.mu.Lock()
	defer c.unlock()
	if c.goAwayStarted || c.goAwayPending || c.finalGoAway || c.closed {
		return
	}
	c.pendingGrace = grace
	if c.maxClientID > 0 {
		c.beginGoAwayLocked()
		return
	}
	c.goAwayPending = true
	if idle <= 0 {
		return
	}
	c.wg.Go(func() {
		t := time.NewTimer(idle)
		defer t.Stop()
		select {
		case <-t.C:
		case <-c.done:
			return
		}
		c.mu.Lock()
		defer c.unlock()
		if c.goAwayPending && !c.closed {
			c.beginGoAwayLocked()
		}
	})
}

// beginGoAwayLocked sends the first GOAWAY and the PING, and has the
// final GOAWAY sent at the PING's acknowledgement or after pendingGrace.
func (c *Conn) beginGoAwayLocked() {
	c.goAwayPending = false
	c.goAwayStarted = true
	_, _ = rand.Read(c.pingData[:])
	_ = c.wfr.WriteGoAway(1<<31-1, http2.ErrCodeNo, nil)
	_ = c.wfr.WritePing(false, c.pingData)
	c.wakeLocked()
	grace := c.pendingGrace
	c.wg.Go(func() {
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-c.pingAck:
		case <-t.C:
		case <-c.done:
			return
		}
		c.Shutdown()
	})
}

// Shutdown sends the final GOAWAY (the real last stream id) now; the
// connection closes after its last stream.
func (c *Conn) Shutdown() {
	c.mu.Lock()
	defer c.unlock()
	c.finalLocked()
}

func (c *Conn) finalLocked() {
	if c.finalGoAway || c.closed {
		return
	}
	c.finalGoAway = true
	_ = c.wfr.WriteGoAway(c.maxClientID, http2.ErrCodeNo, nil)
	c.wakeLocked()
	c.maybeFinishLocked()
}

// Terminate ends the connection at once, as cleanly as that can be: the
// final GOAWAY, a RST_STREAM(CANCEL) for each stream still open, then the
// close once they are written.
func (c *Conn) Terminate() {
	c.mu.Lock()
	defer c.unlock()
	if c.closed {
		return
	}
	c.finalLocked()
	for _, st := range c.streams {
		c.resetLocked(st, http2.ErrCodeCancel, true)
	}
	c.abortOnExit = true
	_ = c.nc.SetWriteDeadline(time.Now().Add(closeLinger))
	c.closeLocked()
}

// fatal ends the connection with a connection error (RFC 9113 §5.4.1),
// from any goroutine.
func (c *Conn) fatal(code http2.ErrCode, why string) {
	c.mu.Lock()
	defer c.unlock()
	c.fatalLocked(code, why)
}

func (c *Conn) fatalLocked(code http2.ErrCode, why string) {
	if c.closed {
		return
	}
	c.debug("connection error", "code", code.String(), "reason", why)
	c.failed.Store(true)
	_ = c.wfr.WriteGoAway(c.maxClientID, code, []byte(why))
	c.finalGoAway = true
	c.abortOnExit = true
	// A writer stuck on a client that does not read gives up soon.
	_ = c.nc.SetWriteDeadline(time.Now().Add(closeLinger))
	c.closeLocked()
}

var errConnFailed = errors.New("h2: connection error sent")

// connError is a connection error the read loop ends with.
type connError struct {
	code http2.ErrCode
	why  string
}

func (e connError) Error() string { return "h2: connection error " + e.code.String() + ": " + e.why }

func (c *Conn) connErr(code http2.ErrCode, why string) error {
	c.fatal(code, why)
	return connError{code, why}
}

func (c *Conn) connErrLocked(code http2.ErrCode, why string) error {
	c.fatalLocked(code, why)
	return connError{code, why}
}

// closeLocked stops the connection: every stream is reset (without
// RST_STREAM: the connection is going), and the writer ends once what is
// queued is written.
func (c *Conn) closeLocked() {
	if c.closed {
		return
	}
	c.closed = true
	for _, st := range c.streams {
		c.resetLocked(st, http2.ErrCodeCancel, false)
	}
	c.wclose = true
	c.wakeLocked()
}

// maybeFinishLocked ends the connection gracefully once the final GOAWAY
// is out and no stream is left.
func (c *Conn) maybeFinishLocked() {
	if (c.finalGoAway || c.peerGoAway) && len(c.streams) == 0 && !c.closed {
		if !c.finalGoAway {
			c.finalLocked()
			return
		}
		c.closed = true
		c.wclose = true
		c.wakeLocked()
	}
}
