package h1

import (
	"bytes"
	"crypto/tls"
	"errors"
	"net"

	"github.com/ebb-proxy/ebb/proxy/downstream"
)

// head watches the bytes of a request head as the engine reads them, on
// the plaintext (under TLS, the decrypted stream): whether a line has
// ended (a head too large for the buffer with no line ended is a request
// line too long: 414, not 431), and whether a line ended with a bare LF.
//
// fasthttp accepts a bare LF as a line's end inside a head but waits for
// CR LF CR LF to end it, so a head ending in bare LFs waited for
// timeouts.header and got 408, and one with a bare LF inside was served
// or not depending on how its bytes were split in reads. A bare LF is
// refused (400) instead, always (RFC 9112 §2.2 lets a recipient choose):
// once one has been read, the engine's next read fails (errBareLF), so a
// head fasthttp still waits for is answered at once, and a head complete
// already is refused by Handle (call.Refuse).
//
// It scans from the connection's start, and from expect when the bytes
// read so far are exactly the previous request (its head and a body of
// known length): then nothing of the next head is in the engine's buffer
// unseen. Otherwise (a chunked body, pipelined bytes read with the
// previous request) the next head is not watched, rather than watched
// from the middle, where bytes of a body could pass for a head's. It
// stops at the head's empty line, or at Handle's start. Owned by the
// connection's reader.
type head struct {
	watched   bool  // this head is watched (from its first byte)
	active    bool  // scanning: the bytes read are the head's
	lineEnded bool  // a line has ended since the head began
	line      int   // bytes of the current line seen so far
	cr        bool  // the last byte seen was CR
	started   bool  // a line with something on it has ended
	read      int64 // bytes read on the connection
	end       int64 // where the head ended in them; -1: not seen
	err       error
}

// errBareLF: a line of the request head ended with LF alone.
var errBareLF = errors.New("h1: a bare LF in the request head")

func newHead() head { return head{watched: true, active: true, end: -1} }

// expect marks the end of a request whose body was body bytes long (-1:
// not known): the next bytes read begin the next head, watched if the
// bytes read so far were exactly this request's.
func (h *head) expect(body int64) {
	known := h.end >= 0 && body >= 0 && h.read == h.end+body
	*h = head{watched: known, active: known, end: -1, read: h.read}
}

// done marks the head read: what follows is its body.
func (h *head) done() { h.active = false }

// scan looks through b, read while the head is being read, at offset
// h.read of the connection's bytes.
func (h *head) scan(b []byte) {
	for off := 0; h.active && off < len(b); {
		i := bytes.IndexByte(b[off:], '\n')
		if i < 0 {
			h.line += len(b) - off
			h.cr = b[len(b)-1] == '\r'
			return
		}
		cr := h.cr
		if i > 0 {
			cr = b[off+i-1] == '\r'
		}
		h.lineEnded = true
		if !cr {
			h.err, h.active = errBareLF, false
			return
		}
		if h.line+i == 1 && h.started {
			// CR LF alone: the head's end; its body follows. (Before the
			// request line, an empty line is skipped, RFC 9112 §2.2.)
			h.active, h.end = false, h.read+int64(off+i+1)
			return
		}
		h.started = h.started || h.line+i > 1
		h.line, h.cr = 0, false
		off += i + 1
	}
}

// pass passes a read of n bytes of p through h, and returns what the
// engine gets.
func (h *head) pass(p []byte, n int, err error) (int, error) {
	if h.active && n > 0 {
		h.scan(p[:n])
	}
	h.read += int64(n)
	return n, err
}

// headConn is a cleartext HTTP/1 connection with its head watched.
type headConn struct {
	*downstream.Conn
	h head
}

func (c *headConn) Read(p []byte) (int, error) {
	if c.h.err != nil {
		return 0, c.h.err
	}
	n, err := c.Conn.Read(p)
	return c.h.pass(p, n, err)
}

// NetConn returns the registry's connection (downstream.ConnOf finds it).
func (c *headConn) NetConn() net.Conn { return c.Conn }

// tlsHeadConn is an HTTP/1 connection over TLS with its head watched.
// The embedded *tls.Conn keeps what fasthttp and downstream.ConnOf look for
// (ConnectionState, NetConn).
type tlsHeadConn struct {
	*tls.Conn
	h head
}

func (c *tlsHeadConn) Read(p []byte) (int, error) {
	if c.h.err != nil {
		return 0, c.h.err
	}
	n, err := c.Conn.Read(p)
	return c.h.pass(p, n, err)
}

// headOf returns the head watcher of the engine's connection c, or nil.
func headOf(c net.Conn) *head {
	switch v := c.(type) {
	case *headConn:
		return &v.h
	case *tlsHeadConn:
		return &v.h
	}
	return nil
}

// watchHeads wraps the connections a listener hands the engine.
type watchHeads struct{ net.Listener }

func (l watchHeads) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	switch v := c.(type) {
	case *downstream.Conn:
		return &headConn{Conn: v, h: newHead()}, err
	case *tls.Conn:
		return &tlsHeadConn{Conn: v, h: newHead()}, err
	}
	return c, err
}
