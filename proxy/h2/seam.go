package h2

import (
	"bytes"
	"crypto/tls"
	"net"
	"sync"

	"golang.org/x/net/http2"
)

// frameHeaderLen is the size of an HTTP/2 frame header (RFC 9113 §4.1).
const frameHeaderLen = 9

// Frame types and flags the seam looks at.
const (
	framePing = 0x6
	flagAck   = 0x1
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
type seam struct {
	net.Conn

	wmu     sync.Mutex // serializes writes, ours and the engine's
	out     frameTracker
	pending []byte // frames to write at the next boundary; guarded by wmu
	werr    error  // a failed injected write; guarded by wmu

	in       frameTracker // owned by the reading goroutine
	preface  int          // bytes of the client preface still to pass on the way in
	pingData [8]byte      // opaque data of our PING; set before it is sent
	pingAck  chan struct{}
	ackOnce  sync.Once
}

func newSeam(c net.Conn) *seam {
	s := &seam{Conn: c, preface: len(http2.ClientPreface), pingAck: make(chan struct{})}
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

// Read passes the client's bytes to the engine, following the frames.
func (s *seam) Read(p []byte) (int, error) {
	n, err := s.Conn.Read(p)
	b := p[:n]
	if s.preface > 0 {
		k := min(s.preface, len(b))
		s.preface -= k
		b = b[k:]
	}
	s.in.advance(b)
	return n, err
}

// Write passes the engine's bytes to the client, writing pending frames of
// our own before them or after them, whichever is a frame boundary first.
// Nothing is injected before the engine's first frame (its SETTINGS, which
// must open the connection).
func (s *seam) Write(p []byte) (int, error) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.flushPendingLocked()
	n, err := s.Conn.Write(p)
	s.out.advance(p[:n])
	if err == nil {
		s.flushPendingLocked()
	}
	return n, err
}

// inject writes frames at the next frame boundary: now if the connection
// is between two frames, else right after the engine's current frame.
func (s *seam) inject(frames []byte) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.pending = append(s.pending, frames...)
	s.flushPendingLocked()
	return s.werr
}

func (s *seam) flushPendingLocked() {
	if len(s.pending) == 0 || s.out.frames == 0 || !s.out.atBoundary() || s.werr != nil {
		return
	}
	p := s.pending
	s.pending = nil
	n, err := s.Conn.Write(p)
	s.out.advance(p[:n])
	if err != nil {
		s.werr = err
	}
}

// tlsSeam is a seam over a TLS connection: x/net reads the negotiated
// state from the connection it is given.
type tlsSeam struct {
	*seam
	tc *tls.Conn
}

func (s tlsSeam) ConnectionState() tls.ConnectionState { return s.tc.ConnectionState() }
