package upstream

import (
	"net"

	"golang.org/x/sys/unix"
)

// ackedBytes returns how many bytes the peer has acknowledged on c
// (TCP_INFO's bytes_acked), or -1 when that cannot be known. Read after the
// connect and when a connection ends without an answer, and compared with
// the bytes written, it tells whether the upstream's TCP stack received
// any byte of the last request; see attempt.unanswered.
//
// The count includes the SYN, so it is at least 1 on any connected socket
// of a kernel that keeps it (Linux 4.1 and later); 0 is what an older one
// leaves in the field, and means unknown.
func ackedBytes(c net.Conn) int64 {
	n := int64(-1)
	control(c, func(fd uintptr) {
		if info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO); err == nil && info.Bytes_acked > 0 {
			n = int64(info.Bytes_acked)
		}
	})
	return n
}
