//go:build unix

package sock

import (
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"unsafe"
)

// rawConn is the socket's raw connection (rc nil: c is no socket), and
// the state of the read and of the write in progress, which the
// functions handed to RawConn (made once, by init) work on.
type rawConn struct {
	rc              syscall.RawConn
	readFn, writeFn func(fd uintptr) bool
	rp, wp          []byte
	rn, wn          int
	rerr, werr      error
}

func (r *rawConn) init(c net.Conn) {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return
	}
	r.rc, r.readFn, r.writeFn = rc, r.readFD, r.writeFD
}

func (r *rawConn) ok() bool { return r.rc != nil }

func (r *rawConn) read(c net.Conn, p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	r.rp, r.rn, r.rerr = p, 0, nil
	err := r.rc.Read(r.readFn)
	n, rerr := r.rn, r.rerr
	r.rp, r.rerr = nil, nil
	if rerr == io.EOF {
		return 0, io.EOF
	}
	return n, opError("read", c, rerr, err)
}

// readFD reads once into rp; false: nothing to read yet, and RawConn
// waits for the socket through the netpoller, within the deadline.
func (r *rawConn) readFD(fd uintptr) bool {
	for {
		m, _, errno := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&r.rp[0])), uintptr(len(r.rp)))
		switch errno {
		case 0:
			if m == 0 {
				r.rerr = io.EOF // the peer closed its side, as net.Conn says it
			}
			r.rn = int(m)
			return true
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		}
		r.rerr = os.NewSyscallError("read", errno)
		return true
	}
}

func (r *rawConn) write(c net.Conn, p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	r.wp, r.wn, r.werr = p, 0, nil
	err := r.rc.Write(r.writeFn)
	n, werr := r.wn, r.werr
	r.wp, r.werr = nil, nil
	return n, opError("write", c, werr, err)
}

// writeFD writes what is left of wp; false: not all of it went (the
// socket's buffer is full), and RawConn waits for room through the
// netpoller, within the deadline.
func (r *rawConn) writeFD(fd uintptr) bool {
	for {
		m, _, errno := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&r.wp[r.wn])), uintptr(len(r.wp)-r.wn))
		switch errno {
		case 0:
			r.wn += int(m)
			return r.wn == len(r.wp)
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		}
		r.werr = os.NewSyscallError("write", errno)
		return true
	}
}

// opError returns the error of an op on c as net.Conn's methods report
// it: the system call's error, or RawConn's own (a deadline, a closed
// connection, which it reports as a "raw-read" or "raw-write"), in a
// *net.OpError; nil if neither.
func opError(op string, c net.Conn, callErr, rawErr error) error {
	err := callErr
	if rawErr != nil {
		var oe *net.OpError
		if errors.As(rawErr, &oe) {
			rawErr = oe.Err
		}
		err = rawErr
	}
	if err == nil {
		return nil
	}
	return &net.OpError{Op: op, Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
}
