// Request bodies and flow control (RFC 9113 §6.9): DATA, WINDOW_UPDATE,
// the client's SETTINGS and PINGs; the bound on the control frames
// a client leaves unread, and the timers of streams that wait on the
// client (a body too slow, a window that stays closed).

package h2

import (
	"io"
	"time"

	"golang.org/x/net/http2"

	"github.com/ebb-proxy/ebb/proxy/h2/wire"
	"github.com/ebb-proxy/ebb/proxy/pace"
)

// controlLocked wakes the writer for a control frame just queued, and
// ends the connection if the client lets them pile up.
func (c *Conn) controlLocked() {
	if len(c.pend) > maxControl {
		c.pend = c.pend[:0]
		c.fatalLocked(http2.ErrCodeEnhanceYourCalm, "control frames not read")
		return
	}
	c.wakeLocked()
}

// endBodyLocked marks st's body as ended, checking it against its
// content-length.
func (c *Conn) endBodyLocked(st *Stream) {
	if st.reset {
		return
	}
	if st.contentLength >= 0 && st.received != st.contentLength {
		c.resetLocked(st, http2.ErrCodeProtocol, true)
		return
	}
	st.remoteClosed = true
	st.inErr = io.EOF
	st.cond.Broadcast()
	c.removeLocked(st)
}

// onData handles a DATA frame: flow control, then the bytes go to the
// stream's body.
func (c *Conn) onData(f *http2.DataFrame) error {
	id, n := f.StreamID, int64(f.Length)
	if n > c.recvWindow {
		return c.connErr(http2.ErrCodeFlowControl, "DATA beyond the connection's window")
	}
	// The connection's window is credited back as soon as bytes arrive:
	// each stream's own window bounds what ebb holds.
	c.recvWindow -= n
	c.recvUnack += n
	c.mu.Lock()
	defer c.unlock()
	if c.recvUnack >= c.srv.connWindow()/4 {
		_ = c.wfr.WriteWindowUpdate(0, uint32(c.recvUnack))
		c.recvWindow += c.recvUnack
		c.recvUnack = 0
		c.controlLocked()
	}
	st := c.streams[id]
	if st == nil {
		if id > c.maxClientID {
			return c.connErrLocked(http2.ErrCodeProtocol, "DATA on an idle stream")
		}
		if !c.wasReset(id) {
			c.queueRSTLocked(id, http2.ErrCodeStreamClosed)
		}
		return nil
	}
	if st.remoteClosed {
		c.resetLocked(st, http2.ErrCodeStreamClosed, true)
		return nil
	}
	if n > st.recvWindow {
		c.resetLocked(st, http2.ErrCodeFlowControl, true)
		return nil
	}
	st.recvWindow -= n
	data := f.Data()
	// Padding is credited back at once; so is everything once the
	// handler no longer reads.
	st.unacked += n - int64(len(data))
	st.received += int64(len(data))
	if st.contentLength >= 0 && st.received > st.contentLength {
		c.resetLocked(st, http2.ErrCodeProtocol, true)
		return nil
	}
	if st.handlerDone || st.bodyClosed {
		st.unacked += int64(len(data))
	} else if len(data) > 0 {
		if st.inOff > 0 && st.inOff == len(st.in) {
			st.in, st.inOff = st.in[:0], 0
		} else if st.inOff > cap(st.in)/2 {
			k := copy(st.in, st.in[st.inOff:])
			st.in, st.inOff = st.in[:k], 0
		}
		st.in = append(st.in, data...)
		var waited time.Duration
		if !st.inStall.IsZero() {
			waited = time.Since(st.inStall)
		}
		st.inPace.Waited(waited, len(data))
		st.inStall = time.Time{}
		st.cond.Broadcast()
	}
	if f.StreamEnded() {
		c.endBodyLocked(st)
		return nil
	}
	c.creditLocked(st)
	return nil
}

// creditLocked gives the client back the stream window it used, in
// steps of a quarter window (at once when nobody reads the body any
// more): the client always has three quarters of a window to send on.
func (c *Conn) creditLocked(st *Stream) {
	if st.unacked == 0 || st.remoteClosed || st.reset || st.unacked < c.srv.streamWindow()/4 && !st.handlerDone && !st.bodyClosed {
		return
	}
	_ = c.wfr.WriteWindowUpdate(st.id, uint32(st.unacked))
	st.recvWindow += st.unacked
	st.unacked = 0
	c.controlLocked()
}

func (c *Conn) onSettings(f *http2.SettingsFrame) error {
	if f.IsAck() {
		c.settingsT.Stop()
		return nil
	}
	err := f.ForeachSetting(func(s http2.Setting) error {
		if err := s.Valid(); err != nil {
			return err
		}
		switch s.ID {
		case http2.SettingInitialWindowSize:
			c.mu.Lock()
			delta := int64(s.Val) - c.peerWindow
			c.peerWindow = int64(s.Val)
			for _, st := range c.streams {
				st.sendWindow += delta
				if st.sendWindow > wire.MaxWindow {
					c.unlock()
					return http2.ConnectionError(http2.ErrCodeFlowControl)
				}
				if delta > 0 && st.outOff < len(st.out) {
					c.queueLocked(st)
				}
			}
			c.unlock()
		case http2.SettingMaxFrameSize:
			c.mu.Lock()
			c.peerFrame = int(min(s.Val, frameSize))
			c.unlock()
		}
		// HEADER_TABLE_SIZE: the encoder uses no dynamic table; ENABLE_PUSH:
		// ebb never pushes; the others are advisory.
		return nil
	})
	if err != nil {
		return c.connErr(wire.SettingsErrCode(err), "invalid SETTINGS")
	}
	c.mu.Lock()
	defer c.unlock()
	_ = c.wfr.WriteSettingsAck()
	c.controlLocked()
	return nil
}

func (c *Conn) onPing(f *http2.PingFrame) error {
	if f.StreamID != 0 {
		return c.connErr(http2.ErrCodeProtocol, "PING on a stream")
	}
	c.mu.Lock()
	defer c.unlock()
	if f.IsAck() {
		if c.goAwayStarted && f.Data == c.pingData {
			select {
			case <-c.pingAck:
			default:
				close(c.pingAck)
			}
		}
		return nil
	}
	_ = c.wfr.WritePing(true, f.Data)
	c.controlLocked()
	return nil
}

func (c *Conn) onWindowUpdate(f *http2.WindowUpdateFrame) error {
	inc := int64(f.Increment)
	c.mu.Lock()
	defer c.unlock()
	if f.StreamID == 0 {
		c.sendWindow += inc
		if c.sendWindow > wire.MaxWindow {
			return c.connErrLocked(http2.ErrCodeFlowControl, "connection window above 2^31-1")
		}
		for _, st := range c.blocked {
			st.blocked = false
			if st.reset {
				c.recycleLocked(st)
				continue
			}
			c.queueLocked(st)
		}
		c.blocked = c.blocked[:0]
		return nil
	}
	st := c.streams[f.StreamID]
	if st == nil {
		if f.StreamID > c.maxClientID {
			return c.connErrLocked(http2.ErrCodeProtocol, "WINDOW_UPDATE on an idle stream")
		}
		return nil // a closed stream: allowed for a while
	}
	st.sendWindow += inc
	if st.sendWindow > wire.MaxWindow {
		c.resetLocked(st, http2.ErrCodeFlowControl, true)
		return nil
	}
	if st.outOff < len(st.out) || st.outEnd && !st.localClosed {
		c.queueLocked(st)
	}
	return nil
}

// armStallLocked makes checkStalls run by at.
func (c *Conn) armStallLocked(at time.Time) {
	if !c.stallAt.IsZero() && !at.Before(c.stallAt) {
		return
	}
	c.stallAt = at
	if c.stallT == nil {
		c.stallT = time.AfterFunc(time.Until(at), c.checkStalls)
		return
	}
	c.stallT.Reset(time.Until(at))
}

// checkStalls ends what has waited on the client for too long: a
// handler's wait for request body bytes fails (the handler answers 408),
// and a stream whose response has waited for a flow-control window is
// reset (the client's memory of it, not ebb's, is what it then lacks).
func (c *Conn) checkStalls() {
	c.mu.Lock()
	defer c.unlock()
	c.stallAt = time.Time{}
	if c.closed {
		return
	}
	now := time.Now()
	var next time.Time
	for _, st := range c.streams {
		if st.finalSent && !st.inStall.IsZero() {
			// The response began while the handler waited: the rest of
			// the body is the upstream's business.
			st.inStall = time.Time{}
		}
		for _, w := range [2]struct {
			since *time.Time
			limit time.Duration
		}{{&st.inStall, st.inPace.Left()}, {&st.outStall, c.srv.WriteTimeout}} {
			if w.since.IsZero() {
				continue
			}
			if end := w.since.Add(w.limit); now.Before(end) {
				if next.IsZero() || end.Before(next) {
					next = end
				}
				continue
			}
			*w.since = time.Time{}
			if w.since == &st.inStall {
				c.debug("request body stalled or too slow", "stream", st.id)
				st.inErr, st.bodyClosed = pace.ErrTooSlow, true
				st.cond.Broadcast()
				continue
			}
			c.debug("response stalled: the client's window stayed closed", "stream", st.id)
			c.resetLocked(st, http2.ErrCodeCancel, true)
			break
		}
	}
	if !next.IsZero() {
		c.armStallLocked(next)
	}
}
