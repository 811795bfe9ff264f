package proxy

import (
	"net"

	"golang.org/x/sys/unix"
)

// ackedBytes returns how many bytes of data the peer has acknowledged on
// c (TCP_INFO's bytes_acked), or -1 when that cannot be known. Compared
// before a request is written and when its connection ends without an
// answer, it tells whether the upstream's TCP stack received any byte of
// the request; see transport.exchange.
func ackedBytes(c net.Conn) int64 {
	n := int64(-1)
	control(c, func(fd uintptr) {
		if info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO); err == nil {
			n = int64(info.Bytes_acked)
		}
	})
	return n
}
