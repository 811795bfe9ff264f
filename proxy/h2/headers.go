// Request header blocks: HEADERS and CONTINUATION frames, HPACK
// decoding into the stream's fields, and what completes a block: a
// new stream served by its handler, or a request's trailers.

package h2

import (
	"encoding/binary"
	"io"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/ebb-proxy/ebb/proxy/h2/wire"
	"github.com/ebb-proxy/ebb/proxy/pace"
)

// onHeaders handles a HEADERS frame: a new request, or a request's
// trailers.
func (c *Conn) onHeaders(fh http2.FrameHeader, p []byte) error {
	id := fh.StreamID
	if id == 0 {
		return c.connErr(http2.ErrCodeProtocol, "HEADERS on stream 0")
	}
	pad := 0
	if fh.Flags.Has(http2.FlagHeadersPadded) {
		if len(p) < 1 {
			return c.connErr(http2.ErrCodeFrameSize, "HEADERS too short")
		}
		pad, p = int(p[0]), p[1:]
	}
	selfDep := false
	if fh.Flags.Has(http2.FlagHeadersPriority) {
		if len(p) < 5 {
			return c.connErr(http2.ErrCodeFrameSize, "HEADERS too short")
		}
		selfDep = binary.BigEndian.Uint32(p)&0x7fffffff == id
		p = p[5:]
	}
	if pad > len(p) {
		return c.connErr(http2.ErrCodeProtocol, "HEADERS padding longer than the frame")
	}
	frag := p[:len(p)-pad]
	if !fh.Flags.Has(http2.FlagHeadersEndHeaders) && c.srv.HeaderTimeout > 0 {
		// The rest of the block must come in time: nothing else may
		// come on the connection until it has (RFC 9113 §6.10).
		_ = c.nc.SetReadDeadline(time.Now().Add(c.srv.HeaderTimeout))
		c.blockTimed = true
	}
	c.cur, c.curEnd, c.curRefuse = nil, fh.Flags.Has(http2.FlagHeadersEndStream), false
	c.curFrames, c.curSize, c.sawRegular = 0, 0, false
	c.mu.Lock()
	st := c.streams[id]
	switch {
	case st != nil:
		if st.remoteClosed || st.inTrailers {
			c.unlock()
			return c.skipBlock(fh, frag, func() error { return c.streamError(id, http2.ErrCodeStreamClosed) })
		}
		st.decoding = true // until endTrailers
		c.unlock()
		st.inTrailers = true
		c.cur = st
	case id%2 == 0:
		c.unlock()
		return c.connErr(http2.ErrCodeProtocol, "stream id from a client must be odd")
	case id <= c.maxClientID:
		reset := c.wasReset(id)
		c.unlock()
		if reset {
			return c.skipBlock(fh, frag, nil)
		}
		return c.connErr(http2.ErrCodeProtocol, "HEADERS on a closed stream")
	default:
		c.maxClientID = id
		if c.goAwayPending && !c.finalGoAway && !c.closed {
			// The first stream of a connection told to go away before
			// it had one: it is served, and the GOAWAY goes now.
			c.beginGoAwayLocked()
		}
		ignore := c.finalGoAway || c.peerGoAway || c.closed
		// Handlers of reset streams still unwinding count as streams:
		// resets never let more handlers run than the limit.
		refuse := uint32(len(c.streams)+c.unwinding) >= c.srv.maxStreams()
		c.unlock()
		if ignore {
			// Streams after the final GOAWAY are ignored (RFC 9113
			// §6.8); their header block must still be decoded.
			return c.skipBlock(fh, frag, nil)
		}
		if selfDep {
			return c.skipBlock(fh, frag, func() error { return c.streamError(id, http2.ErrCodeProtocol) })
		}
		c.curRefuse = refuse
		c.cur = c.newStream(id)
		c.ignoredBudget = min(c.ignoredBudget+ignoredPerStream, 100*ignoredPerStream)
	}
	return c.block(fh.Flags.Has(http2.FlagHeadersEndHeaders), frag)
}

// skipBlock decodes a header block whose fields are not wanted (HPACK's
// table must stay in step), then runs then if not nil.
func (c *Conn) skipBlock(fh http2.FrameHeader, frag []byte, then func() error) error {
	c.cur = nil
	if err := c.block(fh.Flags.Has(http2.FlagHeadersEndHeaders), frag); err != nil {
		return err
	}
	if then != nil && fh.Flags.Has(http2.FlagHeadersEndHeaders) {
		return then()
	}
	return nil
}

// onContinuation handles a CONTINUATION frame; the framer has checked
// that it follows a HEADERS or CONTINUATION frame of its stream without
// END_HEADERS.
func (c *Conn) onContinuation(fh http2.FrameHeader, p []byte) error {
	c.curFrames++
	// CONTINUATION floods (CVE-2024-27316): a block's frames are bounded
	// by what limits.max_header_bytes needs, empty ones included.
	if c.curFrames > 4+c.srv.maxHeaderBytes()/1024 {
		return c.connErr(http2.ErrCodeEnhanceYourCalm, "too many CONTINUATION frames")
	}
	return c.block(fh.Flags.Has(http2.FlagContinuationEndHeaders), p)
}

// block decodes a header block fragment; at the block's end it completes
// the request or its trailers.
func (c *Conn) block(end bool, frag []byte) error {
	if _, err := c.dec.Write(frag); err != nil {
		return c.connErr(http2.ErrCodeCompression, "HPACK: "+err.Error())
	}
	if !end {
		return nil
	}
	if c.blockTimed {
		c.blockTimed = false
		_ = c.nc.SetReadDeadline(time.Time{})
	}
	if err := c.dec.Close(); err != nil {
		return c.connErr(http2.ErrCodeCompression, "HPACK: "+err.Error())
	}
	st := c.cur
	c.cur = nil
	if st == nil {
		return nil
	}
	if st.inTrailers {
		return c.endTrailers(st)
	}
	return c.endRequest(st)
}

// emit receives each decoded field of the block being decoded.
func (c *Conn) emit(f hpack.HeaderField) {
	st := c.cur
	if st == nil {
		return
	}
	c.curSize += int(f.Size())
	if c.curSize > c.srv.maxHeaderBytes() {
		st.tooLarge = true
	}
	if st.tooLarge || st.malformed != "" {
		return
	}
	if f.IsPseudo() {
		if st.inTrailers {
			st.malformed = "pseudo-header field in trailers"
			return
		}
		if c.sawRegular {
			st.malformed = "pseudo-header field after a regular one"
			return
		}
		var bit uint8
		switch f.Name {
		case ":method":
			bit = 1
		case ":scheme":
			bit = 2
		case ":authority":
			bit = 4
		case ":path":
			bit = 8
		default:
			st.malformed = "unknown pseudo-header field " + f.Name
			return
		}
		if st.pseudoSeen&bit != 0 {
			st.malformed = "repeated " + f.Name
			return
		}
		st.pseudoSeen |= bit
		st.pseudo.Add(f.Name, f.Value)
		return
	}
	c.sawRegular = true
	if why := wire.CheckField(f.Name, f.Value); why != "" {
		st.malformed = why
		return
	}
	if st.inTrailers {
		st.trailers.Add(f.Name, f.Value)
		return
	}
	switch f.Name {
	case "content-length":
		n, ok := wire.ParseLength(f.Value)
		if !ok || st.contentLength >= 0 && st.contentLength != n {
			st.malformed = "invalid content-length"
			return
		}
		st.contentLength = n
	case "expect":
		if wire.EqualFoldLower(f.Value, "100-continue") {
			st.expectContinue = true
		}
	}
	st.fields.Add(f.Name, f.Value)
}

// newStream makes the stream a HEADERS frame opens.
func (c *Conn) newStream(id uint32) *Stream {
	st, _ := streamPool.Get().(*Stream)
	if st == nil {
		st = new(Stream)
		st.stopWatch = st.unwatch
	}
	st.c, st.id, st.contentLength, st.recvWindow = c, id, -1, c.srv.streamWindow()
	st.inPace = pace.New(c.srv.MinBodyRate, c.srv.HeaderTimeout)
	st.cond.L = &c.mu
	return st
}

// endRequest completes a request's header block: it is validated, then
// served by the handler, answered by the engine (431), or refused.
func (c *Conn) endRequest(st *Stream) error {
	if st.malformed == "" && !st.tooLarge {
		st.malformed = st.setPseudo()
	}
	if st.malformed == "" && !st.tooLarge && c.curEnd && st.contentLength > 0 {
		// RFC 9113 §8.1.1: the content (none: the HEADERS frame ended
		// the stream) must be as long as the content-length says.
		st.malformed = "content-length with no content"
	}
	c.mu.Lock()
	defer c.unlock()
	if c.closed {
		return nil
	}
	if st.malformed != "" {
		c.debug("malformed request", "stream", st.id, "reason", st.malformed)
		c.queueRSTLocked(st.id, http2.ErrCodeProtocol)
		st.clear()
		streamPool.Put(st)
		return nil
	}
	if c.curRefuse {
		c.queueRSTLocked(st.id, http2.ErrCodeRefusedStream)
		st.clear()
		streamPool.Put(st)
		// A client that opens more streams than allowed spends the
		// budget rapid resets spend: refusing costs little, but not
		// nothing.
		if c.resetBudget--; c.resetBudget < 0 {
			return c.connErrLocked(http2.ErrCodeEnhanceYourCalm, "too many streams refused")
		}
		return nil
	}
	st.sendWindow = c.peerWindow
	c.streams[st.id] = st
	if len(c.streams) == 1 {
		if c.idle != nil {
			c.idle.Stop()
		}
		c.stateDirty = true
	}
	st.hasBody = !c.curEnd
	if c.curEnd {
		st.remoteClosed, st.inErr = true, io.EOF
	}
	if st.tooLarge {
		// Answered here: the handler would see a truncated request.
		st.hq = wire.AppendStatus(st.hq, 431)
		st.hq = wire.AppendField(st.hq, []byte("content-length"), "0")
		st.hqItems = append(st.hqItems, headerItem{n: len(st.hq), end: true})
		st.finalSent, st.outEnd, st.handlerDone = true, true, true
		st.rstWanted = !st.remoteClosed
		st.cancelLocked()
		c.queueLocked(st)
		return nil
	}
	c.handlers.Add(1)
	c.running++
	c.srv.workers.serve(st)
	return nil
}

// endTrailers completes a request's trailers: the body has ended.
func (c *Conn) endTrailers(st *Stream) error {
	c.mu.Lock()
	defer c.unlock()
	st.decoding = false
	if !c.curEnd || st.malformed != "" || st.tooLarge {
		c.resetLocked(st, http2.ErrCodeProtocol, true)
	} else {
		c.endBodyLocked(st)
	}
	c.recycleLocked(st)
	return nil
}
