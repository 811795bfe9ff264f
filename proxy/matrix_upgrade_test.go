package proxy

import (
	"bytes"
	"crypto/tls"
	"net/http"
	"strings"
	"testing"

	"github.com/gorilla/websocket"

	echoorigin "github.com/ebb-proxy/ebb/examples/echo"
)

// TestMatrixWebSocket opens a WebSocket through ebb from an HTTP/1.1
// client, in cleartext and over TLS, to each kind of upstream. To an
// http1 cluster the upgrade is relayed and a message echoed, and the
// origin sees the same forwarding headers as any request's: in
// particular X-Forwarded-Proto https when the client came over TLS (its
// own "http" replaced), and no Forwarded from an untrusted client. An
// upgrade to any other cluster is refused with 501: an upgrade is an
// HTTP/1.1 exchange, which such endpoints may not speak. (HTTP/2 clients
// have no Upgrade: RFC 9113 §8.6.)
func TestMatrixWebSocket(t *testing.T) {
	for _, m := range allModes {
		if m.DownH2() {
			continue // no Upgrade in HTTP/2 (see above)
		}
		t.Run(m.String(), func(t *testing.T) {
			t.Parallel()
			type seen struct{ proto, forwarded, xff string }
			got := make(chan seen, 1)
			origin := &echoorigin.WebSockets{}
			t.Cleanup(origin.Close)
			e := newEnv(t, m, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				got <- seen{r.Header.Get("X-Forwarded-Proto"), strings.Join(r.Header.Values("Forwarded"), ","), r.Header.Get("X-Forwarded-For")}
				origin.ServeHTTP(w, r)
			}))
			dialer := websocket.Dialer{HandshakeTimeout: waitTimeout}
			if m.TLS() {
				dialer.TLSClientConfig = &tls.Config{RootCAs: e.Pool}
			}
			url := "ws://" + e.Host + "/chat"
			if m.TLS() {
				url = "wss://" + e.Host + "/chat"
			}
			hdr := http.Header{"X-Forwarded-Proto": {"http"}, "Forwarded": {"for=198.51.100.1;proto=http"}}
			c, resp, err := dialer.DialContext(t.Context(), url, hdr)
			if !m.UpHTTP1Cluster() {
				if err == nil {
					c.Close()
					t.Fatal("the upgrade to a non-http1 cluster was relayed")
				}
				if resp == nil || resp.StatusCode != http.StatusNotImplemented {
					t.Fatalf("dial: %v (response %v), want 501", err, resp)
				}
				return
			}
			if err != nil {
				t.Fatalf("dial: %v", err)
			}
			defer c.Close()
			s := recv(t, got, "the upgrade request at the origin")
			wantProto := "http"
			if m.TLS() {
				wantProto = "https"
			}
			if s.proto != wantProto || s.forwarded != "" || s.xff != "127.0.0.1" {
				t.Errorf("origin saw X-Forwarded-Proto %q, Forwarded %q, X-Forwarded-For %q; want %q, none, 127.0.0.1", s.proto, s.forwarded, s.xff, wantProto)
			}
			if err := c.WriteMessage(websocket.TextMessage, []byte("hello")); err != nil {
				t.Fatal(err)
			}
			if _, msg, err := c.ReadMessage(); err != nil || string(msg) != "hello" {
				t.Fatalf("echo: %q, %v", msg, err)
			}
			// Every byte value, LFs without CRs among them: the relayed
			// bytes are not taken for a request head.
			all := make([]byte, 4096)
			for i := range all {
				all[i] = byte(i)
			}
			for range 4 {
				if err := c.WriteMessage(websocket.BinaryMessage, all); err != nil {
					t.Fatal(err)
				}
				if _, msg, err := c.ReadMessage(); err != nil || !bytes.Equal(msg, all) {
					t.Fatalf("echo of every byte value: %d bytes, %v", len(msg), err)
				}
			}
		})
	}
}
