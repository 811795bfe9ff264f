//go:build !linux

package upstream

import "net"

// ackedBytes cannot read TCP_INFO here: a request is then never known to
// have been left unreceived, and only idempotent ones are sent again after
// a reused connection died.
func ackedBytes(net.Conn) int64 { return -1 }
