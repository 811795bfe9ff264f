package upstream

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"

	"github.com/ebb-proxy/ebb/config"
)

// Requests in net/http's form go to HTTP/2 upstreams through package
// h2client, and to an auto cluster's endpoint that speaks HTTP/1.1
// through the HTTP/1 transport (RoundTripHTTP). What both share is here:
// the scheme, the TLS configuration, the check of a response and the
// classification of a failure.

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

// CheckHTTPResponse returns why a response in net/http's form breaks
// HTTP's rules where its client let it through, or nil: a 1xx as
// the final answer (ebb never asks for an upgrade here), or a status
// over 599 (RFC 9110 §15; net/http takes any
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

// ClassifyRoundTrip turns the error of an HTTP/2 exchange into what the
// retry policy needs: ErrResend when the upstream did not process the
// request, an unanswered Error when the connection or stream failed
// before a response header, and err itself otherwise. The HTTP/1
// transport's errors are classified already.
func ClassifyRoundTrip(err error) error {
	if _, ok := err.(*Error); ok {
		return err
	}
	if errors.Is(err, ErrResend) {
		return ErrResend
	}
	if kind, client := ClassifyHTTP(err); kind == KindBroken && !client {
		return &Error{Kind: KindBroken, Unanswered: true, Err: err}
	}
	return err
}
