// Package sock reads and writes TCP sockets with raw read(2) and
// write(2), out of the Go scheduler's sight.
//
// A write to a loopback or same-host socket does the receiving side's
// work too (the kernel delivers the segment and wakes the reader before
// write returns): measured at around 30 µs a write on the benchmark
// machine. The runtime takes a goroutine in a system call for longer
// than one tick of its monitor thread (20 µs) to be blocked there, and
// hands its P to another thread; with GOMAXPROCS=1, the usual setting of
// a sidecar given one CPU, it does so even when nothing else is waiting
// to run, since no P is idle to look for work. Each such write then costs
// a thread woken, which finds nothing to do and sleeps again, and the
// writer's own wait for the P when write returns: context switches and
// futex calls that a proxy's single-threaded peers do not make.
//
// Every system call made the ordinary way also wakes that monitor thread
// when it sleeps (the runtime's entersyscall does, so that it can take
// the P of a call that blocks), and the monitor then polls every 20 µs
// for a millisecond before it backs off: a proxy that goes idle between
// requests, as one below saturation does, pays that on every request,
// the read of the request first. At 2,000 requests a second through
// ebb, the monitor thread was half of ebb's context switches.
//
// A read or write of a socket in non-blocking mode never blocks: it
// copies what there is, or what fits, and returns (EAGAIN when there is
// nothing, or no room, and the caller then waits for the socket through
// the netpoller as net.Conn's methods would). Made with
// syscall.RawSyscall inside syscall.RawConn's Read and Write, it keeps
// the P for its few microseconds, tells the monitor nothing, and keeps
// the connection's deadlines, its locks against concurrent readers and
// writers, and net.Conn's errors.
package sock

import "net"

// IO reads and writes a connection, through raw system calls when the
// connection is a TCP socket of this platform (see the package comment),
// else through its own Read and Write. It is set up in place by Init and
// must not be copied after: it keeps the functions it hands RawConn,
// made once, so that a read or write allocates nothing.
type IO struct {
	c   net.Conn
	raw rawConn
}

// Init sets s up for c.
func (s *IO) Init(c net.Conn) {
	s.c = c
	s.raw.init(c)
}

// Read reads into p as net.Conn.Read does, with the same results: what
// arrived, io.EOF once the peer has closed its side, a *net.OpError of
// Op "read" otherwise. One goroutine reads at a time.
func (s *IO) Read(p []byte) (int, error) {
	if !s.raw.ok() {
		return s.c.Read(p)
	}
	return s.raw.read(s.c, p)
}

// Write writes all of p, as net.Conn.Write does, with the same errors
// (a *net.OpError of Op "write"). One goroutine writes at a time.
func (s *IO) Write(p []byte) (int, error) {
	if !s.raw.ok() {
		return s.c.Write(p)
	}
	return s.raw.write(s.c, p)
}
