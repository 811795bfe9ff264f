package downstream

import (
	"context"
	"net"
)

// OwnListener is a TCP listening socket this process opened (Listen). No
// other process holds it, unlike one inherited from systemd or from the
// ebb this one took over from, which may still hold theirs: only on its
// own socket may a process change what the kernel accepts (see
// proxy's acceptLoop.stop).
type OwnListener struct{ *net.TCPListener }

// Listen opens a TCP listening socket on address for connections ebb
// serves and drains. It is plain TCP, not Multipath TCP (which Go uses by
// default for listeners where the kernel has it): the socket options that
// let a listener stop without resetting the connections in its accept
// queue apply to TCP sockets only.
func Listen(address string) (net.Listener, error) {
	var lc net.ListenConfig
	lc.SetMultipathTCP(false)
	ln, err := lc.Listen(context.Background(), "tcp", address)
	if err != nil {
		return nil, err
	}
	return OwnListener{ln.(*net.TCPListener)}, nil
}
