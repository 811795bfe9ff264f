package proxytest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// The hostile HTTP/2 upstream: an h2c origin that behaves until a request
// has come, and then turns on the client (ebb) on that request's
// connection: floods of frames that ask for an answer, frames that break
// the protocol's state or flow control, header blocks that never end,
// bytes that are not HTTP/2. What the tests check is what ebb's clients
// see and what the upstream sees of ebb, so that they hold whatever
// HTTP/2 client ebb uses upstream.

// HostileOrigin is Origin whose connections are closed at the test's end,
// so that a serve blocked on one (writing to a peer that stopped reading)
// returns and Origin's wait for it ends.
func HostileOrigin(t testing.TB, serve func(c net.Conn, br *bufio.Reader)) string {
	var (
		mu    sync.Mutex
		conns []net.Conn
		ended bool
	)
	addr := Origin(t, func(c net.Conn, br *bufio.Reader) {
		mu.Lock()
		if ended {
			mu.Unlock()
			return
		}
		conns = append(conns, c)
		mu.Unlock()
		serve(c, br)
	})
	// Registered after Origin's own cleanup, so it runs first.
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		ended = true
		for _, c := range conns {
			c.Close()
		}
	})
	return addr
}

// HostileConn is one connection of a HostileH2C upstream, handed to its
// attack once a request's HEADERS frame has come (its CONTINUATION
// frames, if any, are still unread).
type HostileConn struct {
	*H2CConn
	Stream uint32 // the request's stream
}

// HostileH2C is an h2c upstream that, on each connection, reads the
// client preface, sends SETTINGS with settings, and acknowledges the
// client's SETTINGS and PINGs until a request's HEADERS frame comes; it
// then hands the connection to attack, on the connection's goroutine, and
// closes the connection when attack returns.
func HostileH2C(t testing.TB, settings []http2.Setting, attack func(c *HostileConn)) string {
	return H2CFramesWith(t, settings, false, func(c *H2CConn, f http2.Frame) bool {
		if h, ok := f.(*http2.HeadersFrame); ok {
			attack(&HostileConn{H2CConn: c, Stream: h.StreamID})
			return false
		}
		return true
	})
}

// Frames returns the frames write writes, written again and again until
// they fill at least size bytes: a chunk for Flood. write may vary what it
// writes from one call to the next.
func Frames(size int, write func(fr *http2.Framer) error) []byte {
	var b bytes.Buffer
	fr := http2.NewFramer(&b, nil)
	for b.Len() < size {
		if err := write(fr); err != nil {
			panic(fmt.Sprintf("proxytest: encoding a frame: %v", err))
		}
	}
	return b.Bytes()
}

// FloodChunk is the size of the chunks the attacks write at a time.
const FloodChunk = 64 << 10

// FloodResult is how a flood ended.
type FloodResult struct {
	Written int64 // the bytes the connection took
	// Cut: a write failed before the limit was written, other than by
	// a deadline: the peer closed or reset the connection.
	Cut bool
	// Stalled: a write made no progress for floodStall: the peer stopped
	// reading, and kept the connection open.
	Stalled bool
	Err     error // the last write's error
	Took    time.Duration
}

// floodStall is how long a write of a flood may make no progress before
// the flood takes the peer for stalled.
const floodStall = 500 * time.Millisecond

func (r FloodResult) String() string {
	took := r.Took.Round(time.Millisecond)
	switch {
	case r.Cut:
		return fmt.Sprintf("cut by the peer after %d bytes in %v (%v)", r.Written, took, r.Err)
	case r.Stalled:
		return fmt.Sprintf("%d bytes written in %v, then no more for %v: the peer stopped reading and kept the connection open", r.Written, took, floodStall)
	case r.Err != nil:
		return fmt.Sprintf("%d bytes written in %v, the connection still open when the flood gave up (the peer read on without closing it)", r.Written, took)
	}
	return fmt.Sprintf("all %d bytes written in %v: the peer read on without closing the connection", r.Written, took)
}

// Flood writes chunk to c again and again, reading nothing, until limit
// bytes have been written, a write fails, a write makes no progress for
// floodStall, or d has passed. A write cut short by its deadline is
// resumed where it stopped, so that the peer reads whole frames.
func Flood(c net.Conn, chunk []byte, limit int64, d time.Duration) FloodResult {
	start := time.Now()
	end := start.Add(d)
	defer c.SetWriteDeadline(time.Time{})
	var r FloodResult
	off := 0 // where in chunk the next write starts
	for r.Written < limit && r.Err == nil {
		deadline := time.Now().Add(floodStall)
		if deadline.After(end) {
			deadline = end
		}
		c.SetWriteDeadline(deadline)
		n, err := c.Write(chunk[off:])
		r.Written += int64(n)
		off = (off + n) % len(chunk)
		if err == nil {
			continue
		}
		var ne net.Error
		switch {
		case !errors.As(err, &ne) || !ne.Timeout():
			r.Err, r.Cut = err, true
		case !time.Now().Before(end):
			r.Err = err
		case n == 0:
			r.Err, r.Stalled = err, true
		}
	}
	r.Took = time.Since(start)
	return r
}

// Await reads frames for up to d, acknowledging SETTINGS and PINGs, until
// stop returns true for one, which it returns. It returns a nil frame
// and, ended true, when the connection ended first (EOF, or a reset), or
// ended false when d passed.
func (c *HostileConn) Await(d time.Duration, stop func(f http2.Frame) bool) (f http2.Frame, ended bool) {
	c.Conn.SetReadDeadline(time.Now().Add(d))
	defer c.Conn.SetReadDeadline(time.Time{})
	for {
		f, err := c.Fr.ReadFrame()
		if err != nil {
			var ne net.Error
			return nil, !errors.As(err, &ne) || !ne.Timeout()
		}
		if stop(f) {
			return f, false
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				c.Fr.WriteSettingsAck()
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				c.Fr.WritePing(true, f.Data)
			}
		}
	}
}

// Ended reports a frame that ends the request's stream or the connection
// from the client's side: RST_STREAM on it, or GOAWAY.
func (c *HostileConn) Ended(f http2.Frame) bool {
	switch f := f.(type) {
	case *http2.RSTStreamFrame:
		return f.StreamID == c.Stream
	case *http2.GoAwayFrame:
		return true
	}
	return false
}

// JunkFields returns an HPACK header block fragment of at least size
// bytes: literal fields never indexed, so that each one decodes to as
// much as it takes on the wire.
func JunkFields(size int) []byte {
	var b bytes.Buffer
	enc := hpack.NewEncoder(&b)
	value := string(bytes.Repeat([]byte("j"), 1000))
	for i := 0; b.Len() < size; i++ {
		_ = enc.WriteField(hpack.HeaderField{Name: fmt.Sprintf("x-junk-%d", i), Value: value, Sensitive: true})
	}
	return b.Bytes()
}
