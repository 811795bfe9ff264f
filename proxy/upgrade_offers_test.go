package proxy

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/ebb-proxy/ebb/proxy/forward"
	"github.com/ebb-proxy/ebb/proxy/proxytest"
)

// switchingOrigin records the raw head of each request it receives and
// answers every one with answer (a 101 switches nothing: it reads the
// next request as if it had not been sent).
func switchingOrigin(t *testing.T, answer string) (addr string, heads <-chan string) {
	got := make(chan string, 16)
	addr = proxytest.Origin(t, func(c net.Conn, br *bufio.Reader) {
		for {
			var raw bytes.Buffer
			req, err := http.ReadRequest(bufio.NewReader(io.TeeReader(br, &raw)))
			if err != nil {
				return
			}
			head, _, _ := strings.Cut(raw.String(), "\r\n\r\n")
			got <- head + "\r\n\r\n"
			io.Copy(io.Discard, req.Body)
			if _, err := io.WriteString(c, answer); err != nil {
				return
			}
		}
	})
	return addr, got
}

// TestUpgradeOffers: ebb relays only a WebSocket upgrade asked for
// alone. h2c is never offered to an origin, alone or in a list (HTTP2-
// Settings goes with it), and such a request is served as plain HTTP/1.1;
// a 101 the client did not ask for, or one that does not switch to
// WebSocket, is a 502, and no tunnel opens: the client's next request on
// the same connection is routed as any other.
func TestUpgradeOffers(t *testing.T) {
	const switchH2C = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\n"
	const ok = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
	const wsKey = "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
	const fwd = "X-Forwarded-For: 127.0.0.1\r\nX-Forwarded-Proto: http\r\nX-Forwarded-Host: a\r\n"
	for _, tc := range []struct {
		name, request, answer string
		status                int
		origin                string // the head the origin must receive, X-Request-Id left out
	}{
		{"h2c and websocket", "GET /a HTTP/1.1\r\nHost: a\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c, websocket\r\nHTTP2-Settings: AAMAAABkAAQAoAAAAAIAAAAA\r\n" + wsKey + "\r\n",
			switchH2C, 502, "GET /a HTTP/1.1\r\nHost: a\r\n" + wsKey + fwd + "\r\n"},
		{"h2c alone", "GET /a HTTP/1.1\r\nHost: a\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAoAAAAAIAAAAA\r\n\r\n",
			ok, 200, "GET /a HTTP/1.1\r\nHost: a\r\n" + fwd + "\r\n"},
		{"HTTP2-Settings not named by Connection", "GET /a HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAoAAAAAIAAAAA\r\n\r\n",
			ok, 200, "GET /a HTTP/1.1\r\nHost: a\r\n" + fwd + "\r\n"},
		{"websocket twice", "GET /a HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nUpgrade: websocket\r\n" + wsKey + "\r\n",
			ok, 200, "GET /a HTTP/1.1\r\nHost: a\r\n" + wsKey + fwd + "\r\n"},
		{"websocket with a version", "GET /a HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket/13\r\n" + wsKey + "\r\n",
			ok, 200, "GET /a HTTP/1.1\r\nHost: a\r\n" + wsKey + fwd + "\r\n"},
		{"a 101 to a plain GET", "GET /a HTTP/1.1\r\nHost: a\r\n\r\n",
			switchH2C, 502, "GET /a HTTP/1.1\r\nHost: a\r\n" + fwd + "\r\n"},
		// A WebSocket upgrade goes as "Connection: Upgrade" and "Upgrade:
		// websocket", whatever else Connection named; a 101 that does not
		// switch to WebSocket opens no tunnel.
		{"websocket answered h2c", "GET /a HTTP/1.1\r\nHost: a\r\nConnection: keep-alive, Upgrade, X-Secret\r\nX-Secret: 1\r\nUpgrade: WebSocket\r\n" + wsKey + "\r\n",
			switchH2C, 502, "GET /a HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n" + wsKey + fwd + "\r\n"},
		{"websocket answered without Connection", "GET /a HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n" + wsKey + "\r\n",
			"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n", 502, "GET /a HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n" + wsKey + fwd + "\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a, heads := switchingOrigin(t, tc.answer)
			b, _ := switchingOrigin(t, "HTTP/1.1 200 OK\r\nContent-Length: 7\r\n\r\nfrom-b\n")
			e := startEbb(t, fmt.Sprintf(`
listeners:
  - name: public
    address: 127.0.0.1:0
    routes:
      - { match: { path_prefix: /other }, cluster: b }
      - { match: { path_prefix: / }, cluster: a }
clusters:
  - { name: a, discovery: { static: [%q] } }
  - { name: b, discovery: { static: [%q] } }
`, a, b))
			c := rawConn(t, e.addr("public"))
			br := bufio.NewReader(c)
			io.WriteString(c, tc.request)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("reading the answer: %v", err)
			}
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.status {
				t.Errorf("the client got %d %q, want %d", resp.StatusCode, body, tc.status)
			}
			if tc.status == 502 && string(body) != forward.MsgUpstreamInvalid {
				t.Errorf("the client got %q, want %q", body, forward.MsgUpstreamInvalid)
			}
			if got := generatedID.ReplaceAllString(recv(t, heads, "the request at the origin"), ""); headLines(got) != headLines(tc.origin) {
				t.Errorf("the origin received\n%q\nwant (in any order and case)\n%q", got, tc.origin)
			}
			if resp.Close {
				return // nothing follows on this connection
			}
			// No tunnel: the next request is ebb's to route.
			io.WriteString(c, "GET /other HTTP/1.1\r\nHost: a\r\n\r\n")
			resp, err = http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("reading the answer to the next request: %v", err)
			}
			body, _ = io.ReadAll(resp.Body)
			if resp.StatusCode != 200 || string(body) != "from-b\n" {
				t.Fatalf("the next request got %d %q, want cluster b's 200", resp.StatusCode, body)
			}
		})
	}
}

// headLines returns a request head's lines in lower case, its field
// lines sorted: what ebb sends, whatever the order and case of the names
// fasthttp writes.
func headLines(head string) string {
	lines := strings.Split(strings.ToLower(strings.TrimSuffix(head, "\r\n\r\n")), "\r\n")
	slices.Sort(lines[1:])
	return strings.Join(lines, "\n")
}
