package cluster

import (
	"context"
	"net"
)

// SetRoundRobin makes the round-robin balancer's next pick the n-th
// endpoint, so that a test chooses which endpoint a request meets first.
func SetRoundRobin(c *Cluster, n uint64) { c.rr.Store(n) }

// DialFunc dials an endpoint's connections.
type DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error)

// WrapDials wraps the HTTP/2 dials of every endpoint of an h2c, h2 or
// auto cluster; wrap is given each endpoint's address and its dial.
func WrapDials(c *Cluster, wrap func(ep string, next DialFunc) DialFunc) {
	for _, ep := range *c.endpoints.Load() {
		next := ep.h2dial
		f := wrap(ep.addr, func(ctx context.Context, _, _ string) (net.Conn, error) { return next(ctx) })
		ep.h2dial = func(ctx context.Context) (net.Conn, error) { return f(ctx, "tcp", ep.addr) }
	}
}
