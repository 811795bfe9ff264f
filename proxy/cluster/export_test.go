package cluster

import (
	"context"
	"net"
)

// SetRoundRobin makes the round-robin balancer's next pick the n-th
// endpoint, so that a test chooses which endpoint a request meets first.
func SetRoundRobin(c *Cluster, n uint64) { c.rr.Store(n) }

// DialFunc is net/http's Transport.DialContext.
type DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error)

// WrapDials wraps the dials of every endpoint of an h2c, h2 or auto
// cluster; wrap is given each endpoint's address and its dial.
func WrapDials(c *Cluster, wrap func(ep string, next DialFunc) DialFunc) {
	for _, ep := range *c.endpoints.Load() {
		ep.ht.DialContext = wrap(ep.addr, ep.ht.DialContext)
	}
}
