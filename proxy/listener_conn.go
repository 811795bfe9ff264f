package proxy

import (
	"context"
	"crypto/tls"
	"net"
	"time"

	"golang.org/x/net/http2"

	"github.com/ebb-proxy/ebb/drain"
	"github.com/ebb-proxy/ebb/proxy/h2"
)

// connKey is the context key under which an HTTP/2 connection's requests
// find its *drain.Conn.
type connKey struct{}

// connOf returns the registry's connection under c: c itself, or the
// connection a TLS session runs on.
func connOf(c net.Conn) *drain.Conn {
	switch v := c.(type) {
	case *drain.Conn:
		return v
	case *tls.Conn:
		dc, _ := v.NetConn().(*drain.Conn)
		return dc
	}
	return nil
}

// serveConn finds out what a new connection speaks and hands it to that
// engine: the TLS handshake's ALPN decides on a TLS listener; on a
// cleartext one, the HTTP/2 client preface (h2c with prior knowledge) does.
// Either must come within the listener's header timeout.
func (l *listener) serveConn(c *drain.Conn) {
	var nc net.Conn = c
	isH2 := false
	if err := c.SetReadDeadline(time.Now().Add(l.cfg.Timeouts.Header)); err != nil {
		c.Close()
		return
	}
	if l.tls != nil {
		tc := tls.Server(c, l.tls)
		if err := tc.Handshake(); err != nil {
			l.p.log.Debug("TLS handshake failed", "listener", l.cfg.Name, "client", string(c.ClientIP), "err", err)
			c.Close()
			return
		}
		nc, isH2 = tc, tc.ConnectionState().NegotiatedProtocol == http2.NextProtoTLS
	} else {
		match, err := c.Peek([]byte(http2.ClientPreface))
		if err != nil && !match && len(c.Peeked()) == 0 {
			// Closed, or silent until the header timeout, before a byte.
			c.Close()
			return
		}
		isH2 = match
	}
	if err := c.SetReadDeadline(time.Time{}); err != nil {
		c.Close()
		return
	}
	if !isH2 {
		c.SetProtocol(drain.ProtoHTTP1)
		l.chl.deliver(nc)
		return
	}
	c.SetProtocol(drain.ProtoHTTP2)
	ctx := context.WithValue(context.Background(), connKey{}, c)
	l.h2.Serve(ctx, nc, func(hc *h2.Conn) {
		// The drain's close signal, at this connection's moment (at once
		// for a connection accepted during the drain, right after the
		// engine's SETTINGS): the two-phase GOAWAY.
		c.OnSignal(func() {
			l.p.reg.Stats.CloseSignals[drain.ProtoHTTP2].Add(1)
			hc.GoAway(l.p.goAwayGrace)
		})
	})
	nc.Close()
}
