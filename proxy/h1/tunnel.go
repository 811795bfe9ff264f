package h1

import (
	"bufio"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ebb-proxy/ebb/proxy/downstream"
	"github.com/ebb-proxy/ebb/proxy/upstream"
)

// A WebSocket tunnel relays frames, not bytes: it follows each frame's
// header both ways (RFC 6455 §5.2), so that the drain can put a close
// frame between two frames, never into one. Payloads are copied as they
// are (masked or not, compressed or not): ebb reads only what it must to
// find where a frame ends, and whether it is a close frame.

// WebSocket opcodes ebb looks at.
const (
	opClose = 0x8
)

// goingAway is the close frame's payload ebb sends in a drain: status
// 1001 (going away, RFC 6455 §7.4.1) and a reason.
var goingAway = append(binary.BigEndian.AppendUint16(nil, 1001), "ebb: draining"...)

// errFrameLength: a frame's 64-bit length has its top bit set (RFC 6455
// §5.2 says it must be 0).
var errFrameLength = errors.New("websocket: frame length out of range")

// frameHeader is what ebb reads of a frame's header.
type frameHeader struct {
	opcode byte
	length int64 // of the payload
}

// maxFrameHeader is the longest frame header: 2 bytes, an 8-byte length
// and a 4-byte masking key.
const maxFrameHeader = 14

// readFrameHeader reads a frame header from r into buf (maxFrameHeader
// long) and returns it and its length in buf. io.EOF means
// r ended cleanly between two frames.
func readFrameHeader(r *bufio.Reader, buf []byte) (h frameHeader, n int, err error) {
	if _, err := io.ReadFull(r, buf[:2]); err != nil {
		return h, 0, err
	}
	n = 2
	h.opcode = buf[0] & 0x0f
	ext := 0
	switch l := buf[1] & 0x7f; l {
	case 126:
		ext = 2
	case 127:
		ext = 8
	default:
		h.length = int64(l)
	}
	if buf[1]&0x80 != 0 {
		ext += 4 // the masking key
	}
	if ext > 0 {
		if _, err := io.ReadFull(r, buf[2:2+ext]); err != nil {
			return h, 0, unexpected(err)
		}
		n += ext
	}
	switch buf[1] & 0x7f {
	case 126:
		h.length = int64(binary.BigEndian.Uint16(buf[2:]))
	case 127:
		l := binary.BigEndian.Uint64(buf[2:])
		if l>>63 != 0 {
			return h, 0, errFrameLength
		}
		h.length = int64(l)
	}
	return h, n, nil
}

// unexpected turns an EOF inside a frame into io.ErrUnexpectedEOF.
func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// closeFrame returns a close frame carrying payload, masked when mask (a
// client's frames must be: ebb sends the upstream a client's).
func closeFrame(payload []byte, mask bool) []byte {
	f := []byte{0x80 | opClose, byte(len(payload))}
	if !mask {
		return append(f, payload...)
	}
	f[1] |= 0x80
	var key [4]byte
	rand.Read(key[:])
	f = append(f, key[:]...)
	for i, b := range payload {
		f = append(f, b^key[i%4])
	}
	return f
}

// wsWriter is one direction's destination. A frame is written whole
// under lock, so a frame ebb writes itself goes between two relayed ones.
type wsWriter struct {
	w    net.Conn
	lock chan struct{} // capacity 1: held while a frame is written
	// closed: a close frame has gone out, after which no frame may
	// (RFC 6455 §5.5.1), or a write failed; frames still arriving for it
	// are dropped. Guarded by lock.
	closed bool
	// intercept: a close frame arriving for this side is ebb's to
	// answer, not relayed (ebb sent the other side its own).
	intercept atomic.Bool
	mask      bool  // frames ebb writes here are masked (the upstream)
	sent      int64 // bytes written; read once the relay has ended
}

func (w *wsWriter) unlock() { <-w.lock }

// sendClose writes ebb's close frame to w once the frame being written
// (if any) has ended, within grace; before, it runs onSend (if not nil).
// It reports whether the frame went out, and already when a close frame
// had gone out before (then nothing is written). It is the last write to
// w, bounded by grace.
func (w *wsWriter) sendClose(grace time.Duration, onSend func()) (sent, already bool) {
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case w.lock <- struct{}{}:
	case <-t.C:
		return false, false
	}
	defer w.unlock()
	if w.closed {
		return false, true
	}
	w.closed = true
	if onSend != nil {
		onSend()
	}
	w.w.SetWriteDeadline(time.Now().Add(grace))
	n, err := w.w.Write(closeFrame(goingAway, w.mask))
	w.sent += int64(n)
	return err == nil, false
}

// The sides of a tunnel.
type side int

const (
	client side = iota
	origin
)

// wsEvent is what a direction of the relay tells the tunnel: a close
// frame read from a side (relayed or not), or the end of a side's
// connection (a read from it or a write to it failed).
type wsEvent struct {
	side    side
	close   bool
	relayed bool
}

// wsTunnel is an upgraded connection's relay: the client's connection
// (read through the engine's buffer, which may hold bytes the client sent
// right after its request), its registry entry, and the upstream's.
//
// Until the drain asks, frames go both ways as they come, close frames
// included, and the first side to end ends both (as net/http/httputil's
// relay does). When the drain asks (downstream.Conn.Tunnel), ebb sends the
// client a close frame with status 1001 between two frames, and from
// then on is the client's peer: the upstream's frames are dropped (the
// client may get none after a close frame), the client's are relayed
// until its own close frame, which ebb answers by closing the client's
// connection (a server closes first, RFC 6455 §7.1.1) and sending the
// upstream a close frame of its own, masked as a client's; the
// upstream's close frame ends its side. Each side has the drain's grace
// to answer before its connection is closed regardless. A close
// handshake already relayed when the drain asks goes on as it is.
type wsTunnel struct {
	down    net.Conn
	dc      *downstream.Conn // nil: a connection ebb did not accept (tests)
	up      *upstream.Conn
	upR     *bufio.Reader
	stats   *downstream.Stats
	toDown  wsWriter
	toUp    wsWriter
	ev      chan wsEvent
	done    chan struct{}      // closed when the relay has ended
	drainCh chan time.Duration // the drain's ask, with its grace
}

func newTunnel(down net.Conn, dc *downstream.Conn, up *upstream.Conn, upR *bufio.Reader, stats *downstream.Stats) *wsTunnel {
	return &wsTunnel{
		down: down, dc: dc, up: up, upR: upR, stats: stats,
		toDown:  wsWriter{w: down, lock: make(chan struct{}, 1)},
		toUp:    wsWriter{w: up, lock: make(chan struct{}, 1), mask: true},
		ev:      make(chan wsEvent),
		done:    make(chan struct{}),
		drainCh: make(chan time.Duration, 1),
	}
}

// ask is the drain's call (downstream.Conn.Tunnel): it never blocks.
func (t *wsTunnel) ask(grace time.Duration) {
	select {
	case t.drainCh <- grace:
	default:
	}
}

// report tells the tunnel e, unless the relay has ended.
func (t *wsTunnel) report(e wsEvent) bool {
	select {
	case t.ev <- e:
		return true
	case <-t.done:
		return false
	}
}

// frameBufs hold frames on their way through a tunnel: taken for one
// frame, so that an idle WebSocket holds none.
var frameBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// pipe relays frames read from src (side from) to dst (side to) until
// src ends. Once a write to dst has failed, the frames are dropped.
func (t *wsTunnel) pipe(from, to side, src *bufio.Reader, dst *wsWriter) {
	var hdr [maxFrameHeader]byte
	for {
		h, n, err := readFrameHeader(src, hdr[:])
		if err != nil {
			t.report(wsEvent{side: from})
			return
		}
		dst.lock <- struct{}{}
		relay := !dst.closed && !(h.opcode == opClose && dst.intercept.Load())
		bp := frameBufs.Get().(*[]byte)
		copy(*bp, hdr[:n])
		werr, rerr := copyFrame(dst, relay, *bp, n, src, h.length)
		frameBufs.Put(bp)
		if relay && (h.opcode == opClose || werr != nil) {
			dst.closed = true
		}
		dst.unlock()
		if werr != nil && !t.report(wsEvent{side: to}) {
			return
		}
		if rerr != nil {
			t.report(wsEvent{side: from})
			return
		}
		if h.opcode == opClose && !t.report(wsEvent{side: from, close: true, relayed: relay && werr == nil}) {
			return
		}
	}
}

// copyFrame copies a frame whose header is buf[:n] and whose payload,
// length bytes, is read from src: to dst if relay, else nowhere. A small
// frame is written in one piece. After a write error, the rest of the
// frame is read and dropped.
func copyFrame(dst *wsWriter, relay bool, buf []byte, n int, src *bufio.Reader, length int64) (werr, rerr error) {
	for {
		k := int(min(length, int64(len(buf)-n)))
		if _, err := io.ReadFull(src, buf[n:n+k]); err != nil {
			return werr, unexpected(err)
		}
		length -= int64(k)
		if relay && werr == nil {
			w, err := dst.w.Write(buf[:n+k])
			dst.sent += int64(w)
			werr = err
		}
		if length == 0 {
			return werr, nil
		}
		n = 0
	}
}

// run relays until the tunnel is done, and returns the bytes relayed up
// and down.
func (t *wsTunnel) run() (sentUp, sentDown int64) {
	// Small: frame headers are read through it, payloads mostly past it.
	downR := bufio.NewReaderSize(t.down, 4<<10)
	var wg sync.WaitGroup
	wg.Go(func() { t.pipe(client, origin, downR, &t.toUp) })
	wg.Go(func() { t.pipe(origin, client, t.upR, &t.toDown) })
	t.relay()
	close(t.done)
	t.closeDown()
	t.up.Close()
	wg.Wait()
	return t.toUp.sent, t.toDown.sent
}

func (t *wsTunnel) closeDown() {
	t.down.Close()
	if t.dc != nil {
		t.dc.Close()
	}
}

// relay is the tunnel's life: it returns when the tunnel is done.
func (t *wsTunnel) relay() {
	var (
		closing    bool // ebb has sent the client its close frame
		grace      time.Duration
		clientDone bool
		upDone     bool
		upAsked    bool // ebb has sent (or tried to send) the upstream its close frame
		clientWait <-chan time.Time
		upWait     <-chan time.Time
	)
	stop := func(tm *time.Timer) {
		if tm != nil {
			tm.Stop()
		}
	}
	var clientTimer, upTimer *time.Timer
	defer func() { stop(clientTimer); stop(upTimer) }()
	endUp := func() {
		upDone, upWait = true, nil
		t.up.Close()
	}
	// closeUp sends the upstream ebb's close frame (once) and gives it
	// grace to answer.
	closeUp := func() {
		if upAsked || upDone {
			return
		}
		upAsked = true
		if sent, already := t.toUp.sendClose(grace, nil); !sent && !already {
			endUp()
			return
		}
		upTimer = time.NewTimer(grace)
		upWait = upTimer.C
	}
	// endClient ends the client's side: its connection is closed, and
	// the upstream told.
	endClient := func() {
		clientDone, clientWait = true, nil
		t.closeDown()
		closeUp()
	}
	for !closing || !clientDone || !upDone {
		select {
		case g := <-t.drainCh:
			if closing {
				continue
			}
			grace = g
			// A close frame the client sends from now on is the answer to
			// ebb's: the upstream gets ebb's own.
			sent, already := t.toDown.sendClose(grace, func() { t.toUp.intercept.Store(true) })
			if already {
				continue // a close handshake relayed: it goes on as it is
			}
			if !sent {
				return // no frame boundary within grace, or the client is gone
			}
			t.stats.CloseSignals[downstream.ProtoWebSocket].Add(1)
			closing = true
			clientTimer = time.NewTimer(grace)
			clientWait = clientTimer.C
		case e := <-t.ev:
			switch {
			case !closing:
				if !e.close {
					return // as before the drain: the first end ends both
				}
			case e.side == client:
				if !clientDone {
					endClient()
				}
			case e.close && !upAsked:
				// The upstream closed first: answer it; its side is done.
				closeUp()
				endUp()
			default:
				endUp()
			}
		case <-clientWait:
			endClient()
		case <-upWait:
			endUp()
		}
	}
}
