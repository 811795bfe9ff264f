//go:build unix && !linux

package upstream

import "syscall"

// peekSocket peeks at one byte of the socket fd without blocking, and
// returns the error of the recvfrom (0: a byte, or the end of the
// stream, is there).
func peekSocket(fd uintptr) syscall.Errno {
	var b [1]byte
	_, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	if errno, ok := err.(syscall.Errno); ok {
		return errno
	}
	return 0
}
