package proxy

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"syscall"
	"time"

	"github.com/ebb-proxy/ebb/proxy/downstream"
	"github.com/ebb-proxy/ebb/proxy/h2"
)

// serveConn finds out what a new connection speaks and hands it to that
// engine: the TLS handshake's ALPN decides on a TLS listener; on a
// cleartext one, the HTTP/2 client preface (h2c with prior knowledge) does.
// Either must come within the listener's header timeout.
func (l *listener) serveConn(c *downstream.Conn) {
	var nc net.Conn = c
	isH2 := false
	if err := c.SetReadDeadline(time.Now().Add(l.cfg.Timeouts.Header)); err != nil {
		c.Close()
		return
	}
	if l.tls != nil {
		tc := tls.Server(c, l.tls)
		if err := tc.Handshake(); err != nil {
			l.tlsFailures[handshakeFailure(err)].Add(1)
			l.p.log.Debug("TLS handshake failed", "listener", l.cfg.Name, "client", string(c.ClientIP), "err", err)
			c.Close()
			return
		}
		nc, isH2 = tc, tc.ConnectionState().NegotiatedProtocol == h2.NextProtoTLS
	} else {
		match, err := c.Peek([]byte(h2.ClientPreface))
		if err != nil && !match && len(c.Peeked()) == 0 {
			// Closed, or silent until the header timeout, before a byte.
			c.Close()
			return
		}
		// A preface whose first line is HTTP/2's and the rest is not is
		// a broken HTTP/2 preface (the engine answers GOAWAY), not an
		// HTTP/1.1 request.
		isH2 = match || bytes.HasPrefix(c.Peeked(), []byte(h2.PrefacePrefix))
	}
	if err := c.SetReadDeadline(time.Time{}); err != nil {
		c.Close()
		return
	}
	if !isH2 {
		c.SetProtocol(downstream.ProtoHTTP1)
		l.chl.deliver(nc)
		return
	}
	c.SetProtocol(downstream.ProtoHTTP2)
	var served *h2.Conn
	defer func() {
		if served != nil {
			l.trackH2(served, false)
		}
	}()
	l.h2.Serve(h2.WithConn(context.Background(), c), nc, func(hc *h2.Conn) {
		served = hc
		l.trackH2(hc, true)
		c.CountStreams(hc.Streams)
		// The drain's close signal, at this connection's moment (at once
		// for a connection accepted during the drain): the two-phase
		// GOAWAY, with the client's first stream if it has opened none
		// yet, or once it has been idle for drain.http1.idle_close.
		c.OnSignal(func() {
			l.p.reg.Stats.CloseSignals[downstream.ProtoHTTP2].Add(1)
			hc.GoAway(l.p.goAwayGrace, l.p.idleClose)
		})
	})
	nc.Close()
}

// Why TLS handshakes failed, for ebb.tls.handshake_failures: the client
// was silent until the header timeout, went away (closed or reset the
// connection), or spoke something a handshake cannot go on with (not
// TLS, a version, cipher or ALPN protocol in common with none of ebb's,
// an alert of its own: a certificate it does not trust, say).
const (
	failTimeout = iota
	failEOF
	failProtocol
	numFailures
)

var failureReasons = [numFailures]string{"timeout", "eof", "protocol"}

func handshakeFailure(err error) int {
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		return failTimeout
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNRESET), errors.Is(err, net.ErrClosed):
		return failEOF
	}
	return failProtocol
}
