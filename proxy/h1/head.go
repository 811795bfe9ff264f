package h1

import (
	"bytes"
	"crypto/tls"
	"errors"
	"net"

	"github.com/ebb-proxy/ebb/drain"
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
// It scans from expect (or the connection's start) until the head's
// empty line, or Handle's start; the bytes of a pipelined request read
// with the previous one are not seen, and an LF first in the first read
// after expect, whose CR may have been among them, stops the scan. Owned
// by the connection's reader.
type head struct {
	active    bool // scanning: between expect and the head's end
	lineEnded bool // a line has ended since expect
	line      int  // bytes of the current line seen so far
	cr        bool // the last byte seen was CR
	fresh     bool // nothing seen since expect
	started   bool // a line with something on it has ended
	err       error
}

// errBareLF: a line of the request head ended with LF alone.
var errBareLF = errors.New("h1: a bare LF in the request head")

func newHead() head { return head{active: true, fresh: true} }

// expect marks that the next bytes read begin a request head.
func (h *head) expect() { *h = newHead() }

// done marks the head read: what follows is its body.
func (h *head) done() { h.active = false }

// scan looks through b, read while the head is being read.
func (h *head) scan(b []byte) {
	if h.fresh && len(b) > 0 {
		h.fresh = false
		if b[0] == '\n' {
			h.active = false
			return
		}
	}
	for h.active && len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			h.line += len(b)
			h.cr = b[len(b)-1] == '\r'
			return
		}
		cr := h.cr
		if i > 0 {
			cr = b[i-1] == '\r'
		}
		h.lineEnded = true
		if !cr {
			h.err, h.active = errBareLF, false
			return
		}
		if h.line+i == 1 && h.started {
			// CR LF alone: the head's end; its body follows. (Before the
			// request line, an empty line is skipped, RFC 9112 §2.2.)
			h.active = false
			return
		}
		h.started = h.started || h.line+i > 1
		h.line, h.cr = 0, false
		b = b[i+1:]
	}
}

// read passes a read of n bytes of p through h, and returns what the
// engine gets.
func (h *head) read(p []byte, n int, err error) (int, error) {
	if h.active && n > 0 {
		h.scan(p[:n])
	}
	return n, err
}

// headConn is a cleartext HTTP/1 connection with its head watched.
type headConn struct {
	*drain.Conn
	h head
}

func (c *headConn) Read(p []byte) (int, error) {
	if c.h.err != nil {
		return 0, c.h.err
	}
	n, err := c.Conn.Read(p)
	return c.h.read(p, n, err)
}

// NetConn returns the registry's connection (drain.ConnOf finds it).
func (c *headConn) NetConn() net.Conn { return c.Conn }

// tlsHeadConn is an HTTP/1 connection over TLS with its head watched.
// The embedded *tls.Conn keeps what fasthttp and drain.ConnOf look for
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
	return c.h.read(p, n, err)
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
	case *drain.Conn:
		return &headConn{Conn: v, h: newHead()}, err
	case *tls.Conn:
		return &tlsHeadConn{Conn: v, h: newHead()}, err
	}
	return c, err
}
