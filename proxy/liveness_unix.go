//go:build unix

package proxy

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
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return true
	}
	closed := false
	var buf [1]byte
	err = rc.Read(func(fd uintptr) bool {
		n, _, err := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		switch {
		case errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EINTR):
			// Nothing to read: alive.
		case err != nil || n == 0:
			closed = true // reset, or EOF
		default:
			closed = true // bytes nobody asked for: unusable
		}
		return true // never wait for readiness
	})
	return closed || err != nil
}
