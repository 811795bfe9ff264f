package drain

import (
	"context"
	"net"
)

// Listen opens a TCP listening socket on address for connections ebb
// serves and drains. It is plain TCP, not Multipath TCP (which Go uses by
// default for listeners where the kernel has it): the socket options that
// let a listener stop without resetting the connections in its accept
// queue apply to TCP sockets only.
func Listen(address string) (net.Listener, error) {
	var lc net.ListenConfig
	lc.SetMultipathTCP(false)
	return lc.Listen(context.Background(), "tcp", address)
}
