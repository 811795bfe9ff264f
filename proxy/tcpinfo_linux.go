package proxy

import (
	"net"

	"golang.org/x/sys/unix"
)

// ackedBytes returns how many bytes the peer has acknowledged on c
// (TCP_INFO's bytes_acked), or -1 when that cannot be known. Read after the
// connect and when a connection ends without an answer, and compared with
// the bytes written, it tells whether the upstream's TCP stack received
// any byte of the last request; see transport.exchange.
func ackedBytes(c net.Conn) int64 {
	n := int64(-1)
	control(c, func(fd uintptr) {
		if info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO); err == nil {
			n = int64(info.Bytes_acked)
		}
	})
	return n
}
