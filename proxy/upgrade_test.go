package proxy

import (
	"bufio"
	"crypto/tls"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ebb-proxy/ebb/config"
	"github.com/ebb-proxy/ebb/proxy/proxytest"
)

// TestWebSocketForwardedOverTLS: a WebSocket upgrade that reached ebb
// over TLS goes upstream with the same header rules as any request:
// X-Forwarded-Proto https (the client's own "http" replaced), the client
// in X-Forwarded-For, and an untrusted client's Forwarded dropped, while
// Connection and Upgrade stay for the upgrade itself.
func TestWebSocketForwardedOverTLS(t *testing.T) {
	heads := make(chan http.Header, 1)
	origin := proxytest.Origin(t, func(c net.Conn, br *bufio.Reader) {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		heads <- req.Header
		// Refuse the upgrade: the test is about what reached the origin.
		c.Write([]byte("HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n"))
	})
	certFile, keyFile := writePair(t, t.TempDir(), newTestPair(t, "localhost"))
	cfg := config.Default()
	l := proxytest.Listener()
	l.TLS = &config.TLS{Cert: certFile, Key: keyFile}
	cfg.Listeners = []config.Listener{l}
	cfg.Clusters = []config.Cluster{proxytest.Cluster(origin)}
	p := newTestProxy(t, cfg)
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })

	c, err := tls.Dial("tcp", p.Addr(l.Name).String(), &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	_, err = c.Write([]byte("GET /chat HTTP/1.1\r\nHost: example.com\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n" +
		"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n" +
		"X-Forwarded-Proto: http\r\nForwarded: for=198.51.100.1;proto=http\r\n\r\n"))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("status %d, want the origin's 403", resp.StatusCode)
	}
	h := <-heads
	for name, want := range map[string]string{"X-Forwarded-Proto": "https", "X-Forwarded-For": "127.0.0.1",
		"X-Forwarded-Host": "example.com", "Upgrade": "websocket"} {
		if got := strings.Join(h.Values(name), "|"); got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
	if got := h.Values("Forwarded"); len(got) != 0 {
		t.Errorf("an untrusted client's Forwarded reached the origin: %q", got)
	}
	if got := h.Get("Connection"); !strings.EqualFold(got, "upgrade") {
		t.Errorf("Connection = %q, want Upgrade", got)
	}
}
