package upstream

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"sync/atomic"

	"github.com/ebb-proxy/ebb/config"
)

// The endpoints of auto clusters whose TLS handshake negotiated HTTP/1.1
// are served by net/http's Transport, one per endpoint, so that an
// endpoint's connections can be let go of on their own when it leaves the
// cluster (HTTP/2 upstreams are package h2client's; ebb's own HTTP/1.1
// transport speaks cleartext only).

// Scheme is the URL scheme requests to the cluster's endpoints use.
func Scheme(protocol string) string {
	if protocol == config.ProtocolH2 || protocol == config.ProtocolAuto {
		return "https"
	}
	return "http"
}

// ClientTLSConfig builds the TLS configuration for a cluster's endpoints.
func ClientTLSConfig(cfg config.Cluster) (*tls.Config, error) {
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

// NewHTTPTransport returns the HTTP/1.1 transport, over TLS, for one
// endpoint of an auto cluster that negotiated HTTP/1.1. dial opens (and
// counts) TCP connections.
func NewHTTPTransport(cfg config.Cluster, tc *tls.Config, dial func(ctx context.Context) (net.Conn, error)) *http.Transport {
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	return &http.Transport{
		// Every request of this transport goes to the one endpoint.
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			c, err := dial(ctx)
			if err != nil {
				return nil, err
			}
			return &h1Conn{Conn: c}, nil
		},
		TLSClientConfig:       tc,
		TLSHandshakeTimeout:   cfg.Timeouts.Connect,
		Protocols:             &protocols,
		MaxConnsPerHost:       cfg.MaxConnsPerEndpoint,
		MaxIdleConnsPerHost:   cfg.MaxConnsPerEndpoint,
		IdleConnTimeout:       cfg.Timeouts.Idle,
		ResponseHeaderTimeout: cfg.Timeouts.Response,
		// As the HTTP/1 transport's read buffer bounds a head: net/http's
		// default lets a header block reach 10 MB.
		MaxResponseHeaderBytes: ReadBufferSize,
		// Bodies pass through as they are: no Accept-Encoding of ebb's own.
		DisableCompression: true,
	}
}

// h1Conn is a connection of net/http's Transport to an auto cluster's
// endpoint, which speaks HTTP/1.1. When such a connection fails, net/http
// waits for its writer to be done with the request body before it
// reports the failure, and closes the body only after that: a writer
// waiting for more of a client's body would wait until the client sent
// it. So the connection knows the attempt whose body it carries (see
// carryAttempt), and its Close ends that attempt, which ends the read.
type h1Conn struct {
	net.Conn
	attempt atomic.Pointer[Attempt]
}

func (c *h1Conn) Close() error {
	err := c.Conn.Close()
	if a := c.attempt.Swap(nil); a != nil {
		a.End(false)
	}
	return err
}

// carryAttempt returns a trace that ties a to the HTTP/1.1 connection
// net/http sends it on.
func carryAttempt(a *Attempt) *httptrace.ClientTrace {
	return &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) {
		nc := info.Conn
		if tc, ok := nc.(*tls.Conn); ok {
			nc = tc.NetConn()
		}
		if c, ok := nc.(*h1Conn); ok {
			c.attempt.Store(a)
		}
	}}
}

// CheckHTTPResponse returns why a response net/http's Transport returned
// breaks HTTP's rules where net/http lets it through, or nil: a 1xx as
// the final answer (net/http returns a 101 so: ebb never asks for an
// upgrade here), or a status over 599 (RFC 9110 §15; net/http takes any
// number for an HTTP/2 :status). net/http checks field names and values
// and pseudo-header fields itself. Connection-specific fields in an
// HTTP/2 response (RFC 9113 §8.2.2 makes it malformed) are let through
// and dropped by the header rules: servers in use send them (Go's sends
// Keep-Alive when its handler sets it), and HTTP/2's framing does not
// rest on them.
func CheckHTTPResponse(resp *http.Response) error {
	switch {
	case resp.StatusCode < 200:
		return errUnasked101
	case resp.StatusCode > 599:
		// net/http takes any number for an HTTP/2 :status ("2000").
		return errStatusLine
	}
	return nil
}

// resendGetBody is the GetBody of requests to net/http upstreams.
func resendGetBody() (io.ReadCloser, error) { return nil, ErrResend }

// ClassifyRoundTrip turns a net/http RoundTrip error into what the retry
// policy needs: ErrResend when net/http wanted to send the request again
// (cause is ResendOnce's), an unanswered Error when the
// connection or stream failed before a response header (RoundTrip
// returns no error once one has arrived), and err itself otherwise.
func ClassifyRoundTrip(err error, cause context.Context) error {
	if _, ok := err.(*Error); ok {
		return err // classified already (a 1xx answer)
	}
	if errors.Is(err, ErrResend) || cause != nil && errors.Is(context.Cause(cause), ErrResend) {
		return ErrResend
	}
	if kind, client := ClassifyHTTP(err); kind == KindBroken && !client {
		return &Error{Kind: KindBroken, Unanswered: true, Err: err}
	}
	return err
}

// ResendOnce prepares one attempt of out so that, when net/http's
// Transport would send it again, it fails with ErrResend instead:
//
//   - with a body (a, its attempt), GetBody returns ErrResend, and the
//     attempt goes with its connection (carryAttempt);
//   - without one, a non-idempotent request goes as it is
//     (Content-Length: 0): net/http sends it again by itself only when the
//     upstream did not process it (a connection that failed before it was
//     written), on the same endpoint;
//   - an idempotent one without a body, for which net/http asks no
//     GetBody, is tracked: when net/http takes a connection for it a
//     second time, its context is cancelled with ErrResend as the cause,
//     returned as cause. That second send may have started; for an
//     idempotent request, no harm. Its cancel is not called otherwise:
//     the response body is read under that context, which ends with its
//     parent.
func ResendOnce(out *http.Request, a *Attempt, idempotent bool) (*http.Request, context.Context) {
	switch {
	case a != nil:
		out.Body, out.GetBody = a, resendGetBody
		out = out.WithContext(httptrace.WithClientTrace(out.Context(), carryAttempt(a)))
	case !idempotent:
		// As it is: no body, Content-Length: 0.
	default:
		ctx, cancel := context.WithCancelCause(out.Context())
		var conns atomic.Int32
		ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(httptrace.GotConnInfo) {
			if conns.Add(1) == 2 {
				cancel(ErrResend)
			}
		}})
		return out.WithContext(ctx), ctx
	}
	return out, nil
}
