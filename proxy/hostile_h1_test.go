package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/ebb-proxy/ebb/proxy/proxytest"
)

// rawOrigin is an origin that records the raw bytes of every request
// header it receives and answers each with 200 "ok".
type rawOrigin struct {
	addr string
	mu   sync.Mutex
	got  []string
}

func newRawOrigin(t *testing.T) *rawOrigin {
	o := &rawOrigin{}
	o.addr = proxytest.Origin(t, func(c net.Conn, br *bufio.Reader) {
		for {
			var head strings.Builder
			for {
				line, err := br.ReadString('\n')
				head.WriteString(line)
				if err != nil {
					return
				}
				if line == "\r\n" || line == "\n" {
					break
				}
			}
			o.mu.Lock()
			o.got = append(o.got, head.String())
			o.mu.Unlock()
			if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"); err != nil {
				return
			}
		}
	})
	return o
}

// received returns the request headers received so far.
func (o *rawOrigin) received() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.got...)
}

// TestHostileHTTP1 sends requests an edge proxy must not pass on as they
// are: each gets a 400 from ebb and the origin receives nothing, while a
// well-formed request after them goes through (the listener is unharmed).
func TestHostileHTTP1(t *testing.T) {
	origin := newRawOrigin(t)
	e := startEbb(t, singleClusterYAML(origin.addr))
	for _, tc := range []struct {
		name, request, want string
	}{
		{"userinfo", "GET http://user:pw@evil.test/ HTTP/1.1\r\nHost: good.test\r\n\r\n", "userinfo"},
		{"userinfo without password", "GET http://user@good.test/x HTTP/1.1\r\nHost: good.test\r\n\r\n", "userinfo"},
		{"empty userinfo", "GET http://@good.test/ HTTP/1.1\r\nHost: good.test\r\n\r\n", "userinfo"},
		{"space in a header name", "POST / HTTP/1.1\r\nHost: app\r\nTransfer Encoding: chunked\r\nContent-Length: 3\r\n\r\nabc", "invalid header field name"},
		// fasthttp's parser turns these away itself.
		{"separator in a header name", "GET / HTTP/1.1\r\nHost: app\r\nX(Y): 1\r\n\r\n", "malformed request"},
		{"control in a header name", "GET / HTTP/1.1\r\nHost: app\r\nX\x01Y: 1\r\n\r\n", "malformed request"},
		{"non-ASCII header name", "GET / HTTP/1.1\r\nHost: app\r\nX\xc3\xa9: 1\r\n\r\n", "malformed request"},
		{"tab in a header name", "GET / HTTP/1.1\r\nHost: app\r\nX\tY: 1\r\n\r\n", "malformed request"},
		{"space before the colon", "POST / HTTP/1.1\r\nHost: app\r\nContent-Length : 3\r\n\r\nabc", "malformed request"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := rawExchange(t, e.addr("public"), tc.request)
			if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), tc.want) {
				t.Errorf("got %d %q, want 400 naming %q", resp.StatusCode, body, tc.want)
			}
		})
	}
	// An '@' in the path, not the authority, is no userinfo.
	resp, body := rawExchange(t, e.addr("public"), "GET http://good.test/a@b HTTP/1.1\r\nHost: good.test\r\n\r\n")
	if resp.StatusCode != http.StatusOK || string(body) != "ok" {
		t.Fatalf("a well-formed request after the hostile ones: %d %q", resp.StatusCode, body)
	}
	got := origin.received()
	if len(got) != 1 || !strings.HasPrefix(got[0], "GET /a@b HTTP/1.1\r\n") || strings.Contains(strings.ToLower(got[0]), "authorization") {
		t.Fatalf("the origin received %q, want only the well-formed request, without Authorization", got)
	}
}
