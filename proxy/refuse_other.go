//go:build !linux

package proxy

import (
	"errors"
	"net"
)

// refuseNew is Linux only: elsewhere a stopping listener is closed at once.
func refuseNew(net.Listener) error { return errors.New("proxy: refusing new connections needs Linux") }
