package proxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"

	"github.com/ebb-proxy/ebb/config"
)

// HTTP/2 upstreams (protocols h2c, h2 and auto) are served by net/http's
// Transport, one per endpoint, so that an endpoint's connections can be
// let go of on their own when it leaves the cluster. fasthttp has no
// HTTP/2 client, and net/http's is the maintained successor of x/net's.

// Keep-alive pings on HTTP/2 upstream connections find a dead connection
// (a peer gone without a FIN) before a request waits on it.
const (
	upstreamPingAfter   = 15 * time.Second
	upstreamPingTimeout = 15 * time.Second
)

// upstreamScheme is the URL scheme requests to the cluster's endpoints use.
func upstreamScheme(protocol string) string {
	if protocol == config.ProtocolH2 || protocol == config.ProtocolAuto {
		return "https"
	}
	return "http"
}

// clientTLSConfig builds the TLS configuration for a cluster's endpoints.
func clientTLSConfig(cfg config.Cluster) (*tls.Config, error) {
	tc := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		ServerName:         cfg.TLS.ServerName,
		InsecureSkipVerify: cfg.TLS.InsecureSkipVerify,
	}
	if cfg.TLS.CAFile != "" {
		pem, err := os.ReadFile(cfg.TLS.CAFile)
		if err != nil {
			return nil, fmt.Errorf("reading tls.ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls.ca_file %s: no PEM certificate found", cfg.TLS.CAFile)
		}
		tc.RootCAs = pool
	}
	return tc, nil
}

// newHTTPTransport returns the transport for one endpoint of a cluster
// whose protocol is not http1. dial opens (and counts) TCP connections.
func newHTTPTransport(cfg config.Cluster, tc *tls.Config, dial func(ctx context.Context) (net.Conn, error)) *http.Transport {
	var protocols http.Protocols
	switch cfg.Protocol {
	case config.ProtocolH2C:
		protocols.SetUnencryptedHTTP2(true)
	case config.ProtocolH2:
		protocols.SetHTTP2(true)
	case config.ProtocolAuto:
		protocols.SetHTTP1(true)
		protocols.SetHTTP2(true)
	}
	if cfg.Protocol == config.ProtocolAuto {
		plain := dial
		dial = func(ctx context.Context) (net.Conn, error) {
			c, err := plain(ctx)
			if err != nil {
				return nil, err
			}
			return &h1Conn{Conn: c}, nil
		}
	}
	return &http.Transport{
		// Every request of this transport goes to the one endpoint.
		DialContext:           func(ctx context.Context, _, _ string) (net.Conn, error) { return dial(ctx) },
		TLSClientConfig:       tc,
		TLSHandshakeTimeout:   cfg.Timeouts.Connect,
		Protocols:             &protocols,
		MaxConnsPerHost:       cfg.MaxConnsPerEndpoint,
		MaxIdleConnsPerHost:   cfg.MaxConnsPerEndpoint,
		IdleConnTimeout:       cfg.Timeouts.Idle,
		ResponseHeaderTimeout: cfg.Timeouts.Response,
		// Bodies pass through as they are: no Accept-Encoding of ebb's own.
		DisableCompression: true,
		HTTP2: &http.HTTP2Config{
			SendPingTimeout: upstreamPingAfter,
			PingTimeout:     upstreamPingTimeout,
		},
	}
}

// h1Conn is a connection of an auto cluster, on which net/http's
// Transport may speak HTTP/1.1. When such a connection fails, net/http
// waits for its writer to be done with the request body before it
// reports the failure, and closes the body only after that: a writer
// waiting for more of a client's body would wait until the client sent
// it. So the connection knows the attempt whose body it carries (see
// carryAttempt), and its Close ends that attempt, which ends the read.
type h1Conn struct {
	net.Conn
	attempt atomic.Pointer[bodyAttempt]
}

func (c *h1Conn) Close() error {
	err := c.Conn.Close()
	if a := c.attempt.Swap(nil); a != nil {
		a.end(false)
	}
	return err
}

// carryAttempt returns a trace that ties a to the HTTP/1.1 connection
// net/http sends it on. An HTTP/2 connection carries many streams, and
// its failure closes their bodies itself: it is left alone.
func carryAttempt(a *bodyAttempt) *httptrace.ClientTrace {
	return &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) {
		nc := info.Conn
		if tc, ok := nc.(*tls.Conn); ok {
			if tc.ConnectionState().NegotiatedProtocol == http2.NextProtoTLS {
				return
			}
			nc = tc.NetConn()
		}
		if c, ok := nc.(*h1Conn); ok {
			c.attempt.Store(a)
		}
	}}
}

// classifyHTTPError maps a net/http Transport error to an errKind.
// client reports that the request was ended by the client (its context
// was cancelled), which is no upstream failure.
func classifyHTTPError(err error) (kind errKind, client bool) {
	var oe *net.OpError
	switch {
	case errors.Is(err, context.Canceled):
		return errBroken, true
	case errors.Is(err, errResend):
		return errRefused, false
	case errors.As(err, &oe) && oe.Op == "dial":
		return errConnect, false
	case isTimeout(err):
		return errTimeout, false
	}
	return errBroken, false
}
