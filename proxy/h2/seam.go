package h2

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"net"
	"runtime"
	"sync"

	"golang.org/x/net/http2"
)

// frameHeaderLen is the size of an HTTP/2 frame header (RFC 9113 §4.1).
const frameHeaderLen = 9

// Frame types and flags the seam looks at.
const (
	frameSettings = 0x4
	framePing     = 0x6
	flagAck       = 0x1
)

// frameTracker follows frame boundaries in one direction of a connection
// from the bytes alone: a frame is a 9-byte header, whose first three bytes
// give the payload length, then the payload.
type frameTracker struct {
	hdr    [frameHeaderLen]byte
	hn     int // header bytes seen of the current frame
	remain int // payload bytes still to come
	frames int // complete frames seen
	// onHeader, if set, sees each complete frame header; it returns how
	// many of the payload's first bytes it wants to see (at most 8).
	onHeader  func(hdr *[frameHeaderLen]byte) int
	want      int
	payload   [8]byte
	pn        int
	onPayload func(p []byte)
}

// atBoundary reports whether the bytes seen so far end with a whole frame.
func (t *frameTracker) atBoundary() bool { return t.hn == 0 && t.remain == 0 }

// advance accounts for p, the next bytes in this direction.
func (t *frameTracker) advance(p []byte) {
	for len(p) > 0 {
		if t.remain > 0 {
			n := min(t.remain, len(p))
			if t.want > 0 {
				k := copy(t.payload[t.pn:t.want], p[:n])
				t.pn += k
				if t.pn == t.want {
					t.onPayload(t.payload[:t.want])
					t.want = 0
				}
			}
			t.remain -= n
			p = p[n:]
			if t.remain == 0 {
				t.frames++
			}
			continue
		}
		n := copy(t.hdr[t.hn:], p)
		t.hn += n
		p = p[n:]
		if t.hn < frameHeaderLen {
			return
		}
		t.hn = 0
		t.remain = int(t.hdr[0])<<16 | int(t.hdr[1])<<8 | int(t.hdr[2])
		t.want, t.pn = 0, 0
		if t.onHeader != nil {
			t.want = min(t.onHeader(&t.hdr), t.remain)
		}
		if t.remain == 0 {
			t.frames++
		}
	}
}

// seam is the net.Conn the x/net server is given. It passes every byte
// through and follows the frame boundaries both ways, so that frames the
// engine has no API for (the first GOAWAY and PING of a two-phase shutdown)
// can be written between two of the engine's frames, and the PING's
// acknowledgement noticed on the way in (x/net ignores an ACK of a PING it
// did not send).
//
// It also gathers the engine's writes: x/net flushes after each frame it
// writes when nothing else is queued at that moment, which makes a response
// two system calls (HEADERS, then DATA) and a busy connection one per
// frame. The engine's writes go to a buffer, and the seam's writer
// goroutine writes what has gathered once the goroutines about to add to
// it have run. A full buffer makes the engine wait, as a full socket
// would; a failed write fails the engine's next one.
type seam struct {
	net.Conn
	br *bufio.Reader // x/net reads each frame header and payload apart

	wmu     sync.Mutex
	wcond   sync.Cond    // on wmu: the buffer drained, data arrived, an error, the close
	wbuf    []byte       // gathered, not yet written; guarded by wmu
	spare   []byte       // the writer's last buffer, for reuse; guarded by wmu
	out     frameTracker // over the bytes entering wbuf; guarded by wmu
	pending []byte       // frames to add at the next boundary; guarded by wmu
	werr    error        // the writer's failure; guarded by wmu
	closing bool         // guarded by wmu
	wdone   chan struct{}
	close1  sync.Once

	in       frameTracker // owned by the reading goroutine
	preface  int          // bytes of the client preface still to pass on the way in
	pingData [8]byte      // opaque data of our PING; set before it is sent
	pingAck  chan struct{}
	ackOnce  sync.Once
}

// Write gathering bounds: the engine waits while maxGathered bytes wait
// to be written; a buffer larger than keptBuffer is not kept for reuse.
const (
	maxGathered = 64 << 10
	keptBuffer  = 16 << 10
)

func newSeam(c net.Conn) *seam {
	s := &seam{Conn: c, br: bufio.NewReaderSize(c, readBufferSize), preface: len(http2.ClientPreface),
		pingAck: make(chan struct{}), wdone: make(chan struct{})}
	s.wcond.L = &s.wmu
	go s.writeLoop()
	s.in.onHeader = func(h *[frameHeaderLen]byte) int {
		if h[3] == framePing && h[4]&flagAck != 0 {
			return 8
		}
		return 0
	}
	s.in.onPayload = func(p []byte) {
		if bytes.Equal(p, s.pingData[:]) {
			s.ackOnce.Do(func() { close(s.pingAck) })
		}
	}
	return s
}

// readBufferSize is the seam's read buffer: x/net reads a frame's header
// and then its payload, two system calls per frame without a buffer. Reads
// of this size or more (large DATA payloads) bypass it.
const readBufferSize = 4 << 10

// Read passes the client's bytes to the engine, following the frames.
func (s *seam) Read(p []byte) (int, error) {
	n, err := s.br.Read(p)
	b := p[:n]
	if s.preface > 0 {
		k := min(s.preface, len(b))
		s.preface -= k
		b = b[k:]
	}
	s.in.advance(b)
	s.settingsAhead()
	return n, err
}

// maxSettingsPayload bounds the SETTINGS frames the seam rewrites; x/net
// refuses more than 100 settings in one frame anyway.
const maxSettingsPayload = 100 * 6

// settingsAhead rewrites a SETTINGS frame whose header the engine has just
// read and whose payload it is about to: RFC 9113 §6.5 lets a frame repeat
// a setting (processed in order, so the last value wins), but x/net hangs
// up on any repetition. Every occurrence but the last gets the id of an
// unknown setting, which receivers ignore (§6.5.2). x/net reads a frame's
// header and its payload apart, so the payload is still in the buffer.
func (s *seam) settingsAhead() {
	t := &s.in
	n := int(t.hdr[0])<<16 | int(t.hdr[1])<<8 | int(t.hdr[2])
	if t.hn != 0 || t.remain == 0 || t.remain != n || t.hdr[3] != frameSettings || t.hdr[4]&flagAck != 0 ||
		n > maxSettingsPayload || n%6 != 0 {
		return
	}
	p, err := s.br.Peek(n)
	if err != nil {
		return // the engine sees the error on its own read
	}
	var seen [16]uint16 // the ids at or after the entry being looked at
	ns := 0
	for i := n/6 - 1; i >= 0; i-- {
		e := p[i*6 : i*6+2]
		id := uint16(e[0])<<8 | uint16(e[1])
		dup := false
		for _, v := range seen[:ns] {
			dup = dup || v == id
		}
		switch {
		case dup:
			// 0xf000 and up: unassigned, and distinct per entry.
			unknown := 0xf000 + uint16(i)
			e[0], e[1] = byte(unknown>>8), byte(unknown)
		case ns < len(seen):
			seen[ns] = id
			ns++
		}
	}
}

// Write takes the engine's bytes for the client, adding pending frames of
// our own before them or after them, whichever is a frame boundary first.
// Nothing is injected before the engine's first frame (its SETTINGS, which
// must open the connection).
func (s *seam) Write(p []byte) (int, error) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	for len(s.wbuf) >= maxGathered && s.werr == nil && !s.closing {
		s.wcond.Wait()
	}
	switch {
	case s.werr != nil:
		return 0, s.werr
	case s.closing:
		return 0, net.ErrClosed
	}
	s.addPendingLocked()
	s.wbuf = append(s.wbuf, p...)
	s.out.advance(p)
	s.addPendingLocked()
	s.wcond.Broadcast()
	return len(p), nil
}

// inject adds frames at the next frame boundary: now if the connection is
// between two frames, else right after the engine's current frame.
func (s *seam) inject(frames []byte) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.pending = append(s.pending, frames...)
	s.addPendingLocked()
	s.wcond.Broadcast()
	return s.werr
}

func (s *seam) addPendingLocked() {
	if len(s.pending) == 0 || s.out.frames == 0 || !s.out.atBoundary() {
		return
	}
	s.wbuf = append(s.wbuf, s.pending...)
	s.out.advance(s.pending)
	s.pending = nil
}

// writeLoop writes what the engine gathers, until the seam is closed and
// everything gathered is written, or a write fails.
func (s *seam) writeLoop() {
	defer close(s.wdone)
	s.wmu.Lock()
	defer s.wmu.Unlock()
	for {
		for len(s.wbuf) == 0 && !s.closing {
			s.wcond.Wait()
		}
		if len(s.wbuf) == 0 {
			return // closing, with nothing left
		}
		// Let the goroutines that are about to write (the engine's loop, a
		// handler finishing its response) add to the buffer first.
		s.wmu.Unlock()
		runtime.Gosched()
		s.wmu.Lock()
		buf := s.wbuf
		s.wbuf, s.spare = s.spare[:0], nil
		s.wcond.Broadcast() // room for the engine again
		s.wmu.Unlock()
		_, err := s.Conn.Write(buf)
		s.wmu.Lock()
		if cap(buf) <= keptBuffer {
			s.spare = buf[:0]
		}
		if err != nil {
			s.werr = err
			s.wbuf = nil
			s.wcond.Broadcast()
			return
		}
	}
}

// Close writes what is gathered, then closes the connection. The write is
// bounded by the connection's write deadline; closing the connection
// underneath (a forced close) ends it at once.
func (s *seam) Close() error {
	var err error
	s.close1.Do(func() {
		s.wmu.Lock()
		s.closing = true
		s.wcond.Broadcast()
		s.wmu.Unlock()
		<-s.wdone
		err = s.Conn.Close()
	})
	return err
}

// tlsSeam is a seam over a TLS connection: x/net reads the negotiated
// state from the connection it is given.
type tlsSeam struct {
	*seam
	tc *tls.Conn
}

func (s tlsSeam) ConnectionState() tls.ConnectionState { return s.tc.ConnectionState() }
