//go:build unix

package upstream

import (
	"errors"
	"net"
	"syscall"
)

// peerClosed reports whether a pooled connection has already been closed
// by the upstream (it has sent FIN or RST, or unsolicited bytes, while the
// connection sat idle), by peeking at the socket without blocking. It costs
// one system call, so it is only used before a request that could not be
// sent again if the connection turned out dead.
func peerClosed(c net.Conn) bool {
	if _, ok := c.(syscall.Conn); !ok {
		return false
	}
	closed := true // unless the peek says otherwise
	var buf [1]byte
	control(c, func(fd uintptr) {
		_, _, err := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		// Nothing to read: alive. Otherwise a reset, EOF, or bytes nobody
		// asked for: unusable.
		closed = !(errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EINTR))
	})
	return closed
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
