package cluster

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"time"

	"github.com/ebb-proxy/ebb/config"
	"github.com/ebb-proxy/ebb/proxy/h2client"
	"github.com/ebb-proxy/ebb/proxy/upstream"
)

// Keep-alive pings on HTTP/2 upstream connections find a dead connection
// (a peer gone without a FIN) before a request waits on it.
const (
	upstreamPingAfter   = 15 * time.Second
	upstreamPingTimeout = 15 * time.Second
)

// h2Config is the configuration of ep's HTTP/2 pool (an h2c or h2
// cluster): its connections are dialled and counted as every upstream
// connection is, and for h2 the TLS handshake must negotiate "h2".
func (c *Cluster) h2Config(ep *Endpoint) h2client.Config {
	cfg := c.cfg
	dial := func(ctx context.Context) (net.Conn, error) { return c.dialContext(ctx, ep) }
	if cfg.Protocol == config.ProtocolH2 {
		tc := c.tls.Clone()
		tc.NextProtos = []string{"h2"}
		if tc.ServerName == "" {
			if host, _, err := net.SplitHostPort(ep.addr); err == nil {
				tc.ServerName = host
			}
		}
		dial = func(ctx context.Context) (net.Conn, error) {
			nc, err := c.dialContext(ctx, ep)
			if err != nil {
				return nil, err
			}
			tlc := tls.Client(nc, tc)
			hctx, cancel := context.WithTimeout(ctx, cfg.Timeouts.Connect)
			defer cancel()
			if err := tlc.HandshakeContext(hctx); err != nil {
				nc.Close()
				return nil, err
			}
			if p := tlc.ConnectionState().NegotiatedProtocol; p != "h2" {
				nc.Close()
				return nil, fmt.Errorf("upstream %s negotiated %q, not h2 (cluster protocol h2; auto takes either)", ep.addr, p)
			}
			return tlc, nil
		}
	}
	ep.h2dial = dial
	return h2client.Config{
		// Through ep.h2dial, which tests wrap.
		Dial:            func(ctx context.Context) (net.Conn, error) { return ep.h2dial(ctx) },
		MaxConns:        cfg.MaxConnsPerEndpoint,
		ConnectTimeout:  cfg.Timeouts.Connect,
		ResponseTimeout: cfg.Timeouts.Response,
		IdleTimeout:     cfg.Timeouts.Idle,
		PingAfter:       upstreamPingAfter,
		PingTimeout:     upstreamPingTimeout,
		// As the HTTP/1 transport's read buffer bounds a head.
		MaxHeaderBytes: upstream.ReadBufferSize,
	}
}
