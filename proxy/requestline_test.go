package proxy

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
)

// TestRequestLineVersions sends first lines that are HTTP/1 with another
// version, and lines that are not HTTP/1 at all. The first get 505 (never
// served as HTTP/1.1); the others are closed on without an answer, which
// would be HTTP/1.1 garbage to a client speaking something else (h2spec
// 3.5/2's broken HTTP/2 preface among them).
func TestRequestLineVersions(t *testing.T) {
	origin := newOrigin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/ok" {
			t.Errorf("the origin got %s %s %s", r.Method, r.URL, r.Proto)
		}
	}))
	e := startEbb(t, singleClusterYAML(hostPort(origin)))
	for _, line := range []string{"GET / HTTP/1.2", "GET / HTTP/2.0", "GET / HTTP/0.9", "GET / HTTP/3.0"} {
		resp, _ := rawExchange(t, e.addr("public"), line+"\r\nHost: app\r\n\r\n")
		if resp.StatusCode != http.StatusHTTPVersionNotSupported || !resp.Close {
			t.Errorf("%q: %d (close %v), want 505 and the connection closed", line, resp.StatusCode, resp.Close)
		}
	}
	// After a request on the connection, the same bytes get a 400: the
	// client spoke HTTP/1.1 there.
	c := rawConn(t, e.addr("public"))
	if _, err := io.WriteString(c, "GET /ok HTTP/1.0\r\nHost: app\r\nConnection: keep-alive\r\n\r\nGARBAGE\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(c); !strings.Contains(string(b), "HTTP/1.1 400 ") {
		t.Errorf("garbage after a request: got %q, want a 400 after the first answer", b)
	}
	for _, raw := range []string{
		"INVALID CONNECTION PREFACE\r\n\r\n",
		"GET /\r\n\r\n",
		"GARBAGE\r\n\r\n",
		"GET / FTP/1.0\r\nHost: app\r\n\r\n",
	} {
		c := rawConn(t, e.addr("public"))
		if _, err := io.WriteString(c, raw); err != nil {
			t.Fatal(err)
		}
		// Closed, or reset when the close left bytes unread.
		if b, err := io.ReadAll(c); len(b) > 0 || err != nil && !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("%q: got %q (%v), want the connection closed without an answer", raw, b, err)
		}
	}
}
