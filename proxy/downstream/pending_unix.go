//go:build unix

package downstream

import (
	"errors"
	"syscall"
)

// pending reports whether the client has sent something the engine has
// not read yet (bytes, or its own FIN or a reset): a request may be
// waiting in the socket while the engine's goroutine is still to be
// scheduled. An idle close then would cross that request, which the
// client could see as an error; the controller looks again later instead.
// It peeks at the socket without blocking and without the read lock, so
// it never waits for the engine's blocked read.
func (c *Conn) pending() bool {
	sc, ok := c.Conn.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	waiting := false
	var buf [1]byte
	rc.Control(func(fd uintptr) {
		_, _, err := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		waiting = !errors.Is(err, syscall.EAGAIN) && !errors.Is(err, syscall.EINTR)
	})
	return waiting
}
