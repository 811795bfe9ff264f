package proxytest

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// NewClient returns a Go HTTP client with its own transport (so that
// connection reuse is under the test's control), closed at cleanup.
func NewClient(t testing.TB) *http.Client {
	t.Helper()
	tr := &http.Transport{
		DisableCompression:    true,
		MaxIdleConnsPerHost:   4,
		ResponseHeaderTimeout: WaitTimeout,
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{
		Transport: tr,
		Timeout:   2 * time.Minute,
		// A redirect is an answer to check, not to follow.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// Do sends req and returns the status, body and response.
func Do(t testing.TB, c *http.Client, req *http.Request) (int, []byte, *http.Response) {
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

// RawConn dials addr with a deadline for the whole exchange; closed at
// cleanup.
func RawConn(t testing.TB, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, WaitTimeout)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(WaitTimeout))
	t.Cleanup(func() { c.Close() })
	return c
}

// RawExchange writes a raw request on a new connection to addr and reads
// one response.
func RawExchange(t testing.TB, addr, request string) (*http.Response, []byte) {
	t.Helper()
	c := RawConn(t, addr)
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

// SingleClusterYAML is a configuration with one listener ("public") that
// sends everything to one cluster ("app") at origin.
func SingleClusterYAML(origin string) string { return OneClusterYAML(origin, nil, nil) }

// OneClusterYAML is SingleClusterYAML with more keys: listener lines go in
// the listener's block, cluster lines in the cluster's (each one YAML line,
// such as "limits: { max_body_bytes: 1KiB }").
func OneClusterYAML(origin string, listener, cluster []string) string {
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

// RandReader returns a deterministic stream of pseudo-random bytes.
func RandReader(seed byte) io.Reader {
	var s [32]byte
	for i := range s {
		s[i] = seed + byte(i)
	}
	return rand.NewChaCha8(s)
}

// RandBytes returns n deterministic pseudo-random bytes.
func RandBytes(seed byte, n int) []byte {
	b := make([]byte, n)
	if _, err := io.ReadFull(RandReader(seed), b); err != nil {
		panic(err)
	}
	return b
}

// StreamSHA256 returns the hex SHA-256 of the first n bytes of
// RandReader(seed).
func StreamSHA256(seed byte, n int64) string {
	h := sha256.New()
	if _, err := io.CopyN(h, RandReader(seed), n); err != nil {
		panic(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// After returns a timer channel and a function that stops the timer.
func After(d time.Duration) (<-chan time.Time, func() bool) {
	tm := time.NewTimer(d)
	return tm.C, tm.Stop
}

// Recv waits for a value on ch, failing the test after WaitTimeout.
func Recv[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	timeout, stop := After(WaitTimeout)
	defer stop()
	select {
	case v := <-ch:
		return v
	case <-timeout:
		t.Fatalf("timed out after %s waiting for %s", WaitTimeout, what)
	}
	var zero T
	return zero
}
