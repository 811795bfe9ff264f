package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
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

// singleClusterYAML is a configuration with one listener ("public") that
// sends everything to one cluster ("app") at origin.
func singleClusterYAML(origin string) string { return oneClusterYAML(origin, nil, nil) }

// oneClusterYAML is singleClusterYAML with more keys: listener lines go in
// the listener's block, cluster lines in the cluster's (each one YAML line,
// such as "limits: { max_body_bytes: 1KiB }").
func oneClusterYAML(origin string, listener, cluster []string) string {
	indent := func(lines []string) string {
		var b strings.Builder
		for _, l := range lines {
			b.WriteString("    " + l + "\n")
		}
		return b.String()
	}
	return fmt.Sprintf(`
admin: { address: 127.0.0.1:0 }
listeners:
  - name: public
    address: 127.0.0.1:0
%s    routes:
      - match: { path_prefix: "/" }
        cluster: app
clusters:
  - name: app
    discovery: { static: [%q] }
%s`, indent(listener), origin, indent(cluster))
}

// newOrigin starts a real net/http server on 127.0.0.1:0, closed at
// cleanup.
func newOrigin(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// newClient returns a Go HTTP client with its own transport (so that
// connection reuse is under the test's control), closed at cleanup.
func newClient(t *testing.T) *http.Client {
	t.Helper()
	tr := &http.Transport{
		DisableCompression:    true,
		MaxIdleConnsPerHost:   4,
		ResponseHeaderTimeout: waitTimeout,
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{
		Transport: tr,
		Timeout:   2 * time.Minute,
		// A redirect is an answer to check, not to follow.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// do sends req and returns the status, body and response.
func do(t *testing.T, c *http.Client, req *http.Request) (int, []byte, *http.Response) {
	t.Helper()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the body: %v", req.Method, req.URL, err)
	}
	return resp.StatusCode, body, resp
}

// rawConn dials addr with a deadline for the whole exchange; closed at
// cleanup.
func rawConn(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, waitTimeout)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(waitTimeout))
	t.Cleanup(func() { c.Close() })
	return c
}

// rawExchange writes a raw request on a new connection to addr and reads
// one response.
func rawExchange(t *testing.T, addr, request string) (*http.Response, []byte) {
	t.Helper()
	c := rawConn(t, addr)
	if _, err := io.WriteString(c, request); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("reading the response: %v", err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the response body: %v", err)
	}
	resp.Body.Close()
	return resp, body
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
