package proxy

import (
	"errors"
	"net"
	"syscall"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// refuseSYN is a socket filter that drops TCP segments with SYN set and
// ACK clear (connection requests) and lets every other one through. On a
// TCP socket the filter sees the segment from its TCP header on; the
// flags are byte 13.
var refuseSYN = func() []unix.SockFilter {
	prog, err := bpf.Assemble([]bpf.Instruction{
		bpf.LoadAbsolute{Off: 13, Size: 1},
		bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: 0x12}, // SYN|ACK
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: 0x02, SkipFalse: 1},
		bpf.RetConstant{Val: 0},          // SYN alone: drop
		bpf.RetConstant{Val: 0xffffffff}, // anything else: keep
	})
	if err != nil {
		panic("proxy: assembling the SYN filter: " + err.Error())
	}
	out := make([]unix.SockFilter, len(prog))
	for i, in := range prog {
		out[i] = unix.SockFilter{Code: in.Op, Jt: in.Jt, Jf: in.Jf, K: in.K}
	}
	return out
}()

// refuseNew has the kernel drop new connection requests to the listening
// socket ln. Handshakes under way complete (their ACK passes), and
// connections already queued stay there to be accepted.
func refuseNew(ln net.Listener) error {
	sc, ok := ln.(syscall.Conn)
	if !ok {
		return errors.New("proxy: not a socket")
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return err
	}
	prog := unix.SockFprog{Len: uint16(len(refuseSYN)), Filter: &refuseSYN[0]}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptSockFprog(int(fd), unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &prog)
	}); err != nil {
		return err
	}
	return serr
}
