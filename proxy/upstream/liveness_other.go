//go:build !unix

package upstream

import "net"

// idleCheck cannot peek at sockets here: a pooled connection is taken as
// usable, and a stale one is caught by the resend of idempotent requests
// only.
type idleCheck struct{}

func (*idleCheck) init(net.Conn)  {}
func (*idleCheck) unusable() bool { return false }
