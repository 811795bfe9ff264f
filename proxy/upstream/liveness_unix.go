//go:build unix

package upstream

import (
	"net"
	"syscall"
)

// idleCheck looks at a pooled connection's socket, without blocking and
// without consuming anything, before the connection carries another
// request: anything there (the upstream's FIN or RST, or bytes nobody
// asked for) makes it unusable. Bytes an origin sent after a response
// ended (a body after a 204 or a HEAD answer, a second response) would
// otherwise be read as the answer to the next request, another client's.
// It costs one system call per reuse; the socket and the function it runs
// are looked up once per connection, so that it allocates nothing.
type idleCheck struct {
	rc    syscall.RawConn // nil: the connection has no socket (a test's pipe)
	peek  func(fd uintptr)
	dirty bool // the last peek found something, or could not look
}

// init readies the check for the socket of c.
func (k *idleCheck) init(c net.Conn) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return
	}
	k.rc, k.peek = rc, k.peekFD
}

func (k *idleCheck) peekFD(fd uintptr) {
	// Nothing to read: clean. Otherwise a reset, EOF, or bytes.
	err := peekSocket(fd)
	k.dirty = err != syscall.EAGAIN && err != syscall.EINTR
}

// unusable reports whether the connection has been closed by its peer or
// has bytes waiting that no request asked for.
func (k *idleCheck) unusable() bool {
	if k.rc == nil {
		return false
	}
	k.dirty = true
	if k.rc.Control(k.peek) != nil {
		return true // closed under us
	}
	return k.dirty
}

// control runs f on c's socket, and reports whether it could: c may have
// none (a test's pipe), or be closed.
func control(c net.Conn, f func(fd uintptr)) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	return err == nil && rc.Control(f) == nil
}
