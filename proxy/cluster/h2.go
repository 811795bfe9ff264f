package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/ebb-proxy/ebb/config"
	"github.com/ebb-proxy/ebb/proxy/h2/wire"
	"github.com/ebb-proxy/ebb/proxy/h2client"
	"github.com/ebb-proxy/ebb/proxy/headers"
	"github.com/ebb-proxy/ebb/proxy/upstream"
)

// Keep-alive pings on HTTP/2 upstream connections find a dead connection
// (a peer gone without a FIN) before a request waits on it.
const (
	upstreamPingAfter   = 15 * time.Second
	upstreamPingTimeout = 15 * time.Second
)

// errSpeaksHTTP1 is the failure of a dial to an endpoint of an auto
// cluster whose TLS handshake negotiated HTTP/1.1: nothing was sent.
var errSpeaksHTTP1 = errors.New("the upstream negotiated HTTP/1.1")

// h2Config is the configuration of ep's HTTP/2 pool (an h2c, h2 or auto
// cluster): its connections are dialled and counted as every upstream
// connection is, and over TLS the handshake must negotiate "h2" (for
// auto, one that negotiates HTTP/1.1 marks the endpoint as speaking it).
func (c *Cluster) h2Config(ep *Endpoint) h2client.Config {
	cfg := c.cfg
	dial := func(ctx context.Context) (net.Conn, error) { return c.dialContext(ctx, ep) }
	if cfg.Protocol == config.ProtocolH2 || cfg.Protocol == config.ProtocolAuto {
		protos := []string{"h2"}
		if cfg.Protocol == config.ProtocolAuto {
			protos = []string{"h2", "http/1.1"}
		}
		tc := c.endpointTLS(ep, protos)
		dial = func(ctx context.Context) (net.Conn, error) {
			tlc, err := c.dialTLS(ctx, ep, tc)
			if err != nil {
				return nil, err
			}
			if p := tlc.ConnectionState().NegotiatedProtocol; p != "h2" {
				if cfg.Protocol == config.ProtocolAuto {
					// From now on this endpoint goes through the transport
					// that speaks HTTP/1.1 (see ExchangeHTTP), whose first
					// connection is this one.
					ep.speaksH1.Store(true)
					if !ep.spare.CompareAndSwap(nil, tlc) {
						tlc.Close()
					}
					return nil, errSpeaksHTTP1
				}
				tlc.Close()
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

// endpointTLS returns the TLS configuration of connections to ep, which
// offer protos by ALPN.
func (c *Cluster) endpointTLS(ep *Endpoint, protos []string) *tls.Config {
	tc := c.tls.Clone()
	tc.NextProtos = protos
	if tc.ServerName == "" {
		if host, _, err := net.SplitHostPort(ep.addr); err == nil {
			tc.ServerName = host
		}
	}
	return tc
}

// dialTLS opens a connection to ep and makes its TLS handshake, within
// timeouts.connect.
func (c *Cluster) dialTLS(ctx context.Context, ep *Endpoint, tc *tls.Config) (*tls.Conn, error) {
	nc, err := c.dialContext(ctx, ep)
	if err != nil {
		return nil, err
	}
	tlc := tls.Client(nc, tc)
	hctx, cancel := context.WithTimeout(ctx, c.cfg.Timeouts.Connect)
	defer cancel()
	if err := tlc.HandshakeContext(hctx); err != nil {
		nc.Close()
		return nil, err
	}
	return tlc, nil
}

// dialHTTP1 opens a connection of the HTTP/1 transport to ep, an auto
// cluster's endpoint that speaks HTTP/1.1: over TLS, offering only it.
func (c *Cluster) dialHTTP1(ep *Endpoint) (*upstream.Conn, error) {
	if tlc := ep.spare.Swap(nil); tlc != nil {
		return upstream.NewConn(tlc, c.cfg.Timeouts.Response), nil
	}
	tlc, err := c.dialTLS(context.Background(), ep, ep.h1tls)
	if err != nil {
		return nil, err
	}
	return upstream.NewConn(tlc, c.cfg.Timeouts.Response), nil
}

// H2Request is a request to an HTTP/2 upstream (an h2c or h2 cluster)
// in HTTP/2's own form, from an HTTP/2 client: no net/http types between
// one HPACK block and the other.
type H2Request struct {
	// Method, Authority and Path are the pseudo-header fields but
	// :scheme, which is the cluster's.
	Method, Authority, Path []byte
	// Fields are the regular fields, the header rules applied; each
	// attempt's trace context is set in them.
	Fields *wire.FieldList
	// Trailers, if not nil, returns the trailer block once the body has
	// been read to its end (nil trailers: the body has none).
	Trailers func() []byte
	// Interim is given each 1xx response but a 101.
	Interim func(status int, fields *wire.FieldList)
	// Block is where each attempt's header block is encoded.
	Block []byte
	// Deadline, if not zero, is the call's (grpc-timeout): it bounds
	// each attempt's wait for the response head, and no attempt starts
	// after it.
	Deadline time.Time
}

// H2 reports whether the cluster's endpoints are reached through ebb's
// own HTTP/2 client (protocols h2c and h2), which ExchangeH2 drives.
func (c *Cluster) H2() bool {
	return c.cfg.Protocol == config.ProtocolH2C || c.cfg.Protocol == config.ProtocolH2
}

// ExchangeH2 is ExchangeHTTP for a request in HTTP/2's own form to an h2c
// or h2 cluster. On success the caller reads the response from the
// stream, closes it, and calls ep.Release.
func (c *Cluster) ExchangeH2(ctx context.Context, ep *Endpoint, r *H2Request, body *upstream.Body, trip *Trip, log *slog.Logger) (*h2client.Stream, *Endpoint, error) {
	idempotent := upstream.IsIdempotentMethod(string(r.Method))
	head := string(r.Method) == "HEAD"
	for attempt := 1; ; attempt++ {
		trip.Attempts = attempt
		var a *upstream.Attempt
		var rb io.ReadCloser
		var inline []byte
		switch {
		case body != nil && r.Trailers == nil && body.Buffered() != nil:
			// In memory, and no trailers to follow: framed with the
			// HEADERS, the last DATA frame ending the stream.
			inline = body.Buffered()
		case body != nil:
			a = body.StartAttempt()
			rb = a
		}
		ep = c.claim(ep)
		var span trace.Span
		if trip.Tracer != nil {
			span = trip.Tracer.StartAttempt(trip.Ctx, headers.WireCarrier{L: r.Fields}, string(r.Method), c.name, ep.addr, attempt)
		}
		r.Block = wire.AppendField(r.Block[:0], []byte(":method"), r.Method)
		r.Block = wire.AppendField(r.Block, []byte(":scheme"), c.scheme)
		r.Block = wire.AppendField(r.Block, []byte(":authority"), r.Authority)
		r.Block = wire.AppendField(r.Block, []byte(":path"), r.Path)
		r.Block = wire.AppendFields(r.Block, r.Fields)
		sent := time.Now()
		st, err := ep.h2.Exchange(ctx, &h2client.Request{Block: r.Block, Body: inline, Head: head, Interim: r.Interim, Deadline: r.Deadline}, rb, r.Trailers)
		took := time.Since(sent)
		c.metrics.Attempt(took)
		if err == nil {
			endAttempt(span, st.Status(), nil)
			c.outcome(ep, nil, st.Status(), took)
			return st, ep, nil
		}
		err = upstream.ClassifyRoundTrip(err)
		endAttempt(span, 0, err)
		ep.Release()
		c.outcome(ep, err, 0, took)
		replayable := a == nil || a.End(false) && body.Replayable()
		if !r.Deadline.IsZero() && !time.Now().Before(r.Deadline) {
			return nil, ep, err // the call's time is up
		}
		next := c.retry(ctx, ep, attempt, err, idempotent, replayable)
		if next == nil {
			return nil, ep, err
		}
		log.Debug("retrying on another endpoint", "cluster", c.name, "endpoint", ep.addr, "next", next.addr, "err", err)
		ep = next
	}
}
