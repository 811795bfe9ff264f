package proxy

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/ebb-proxy/ebb/proxy/proxytest"
)

// The helpers below let behaviour tests written against ebb's binary run
// against a Proxy in the test's process: the same configuration file, the
// same sockets on 127.0.0.1, no build.

// inproc is ebb serving one configuration in the test's process.
type inproc struct {
	t  *testing.T
	px *Proxy
}

// startEbb starts a Proxy for the configuration yaml, closed at cleanup.
func startEbb(t *testing.T, yaml string) *inproc {
	t.Helper()
	return &inproc{t: t, px: startMatrixProxy(t, yaml)}
}

// addr returns the bound address of the named listener.
func (e *inproc) addr(listener string) string {
	e.t.Helper()
	a := e.px.Addr(listener)
	if a == nil {
		e.t.Fatalf("no listener %q", listener)
	}
	return a.String()
}

// url returns the http:// URL of path on the named listener.
func (e *inproc) url(listener, path string) string { return "http://" + e.addr(listener) + path }

// The shared helpers, under the names the behaviour tests use.
var (
	singleClusterYAML = proxytest.SingleClusterYAML
	oneClusterYAML    = proxytest.OneClusterYAML
	newClient         = proxytest.NewClient
	do                = proxytest.Do
	rawConn           = proxytest.RawConn
	rawExchange       = proxytest.RawExchange
	randReader        = proxytest.RandReader
	randBytes         = proxytest.RandBytes
	streamSHA256      = proxytest.StreamSHA256
	after             = proxytest.After
)

// recv waits for a value on ch, failing the test after
// proxytest.WaitTimeout.
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	return proxytest.Recv(t, ch, what)
}

// newOrigin starts a real net/http server on 127.0.0.1:0, closed at
// cleanup.
func newOrigin(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// hostPort returns the host:port of an httptest server.
func hostPort(srv *httptest.Server) string { return srv.Listener.Addr().String() }

// newUnstartedOrigin is newOrigin for a server the test configures before
// calling Start.
func newUnstartedOrigin(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	t.Cleanup(srv.Close)
	return srv
}
