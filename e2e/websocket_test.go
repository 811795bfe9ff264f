package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// TestWebSocket upgrades through ebb to a gorilla/websocket echo server:
// the handshake reaches the origin with Upgrade and Connection intact and
// X-Forwarded-For set, text and binary messages go both ways (including
// messages the server sends unprompted), and a close handshake ends it.
func TestWebSocket(t *testing.T) {
	t.Parallel()
	type handshake struct {
		upgrade, connection, xff, protocol string
	}
	handshakes := make(chan handshake, 1)
	serverDone := make(chan error, 1)
	upgrader := websocket.Upgrader{Subprotocols: []string{"echo.v1"}}
	origin := newOrigin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		handshakes <- handshake{r.Header.Get("Upgrade"), r.Header.Get("Connection"), r.Header.Get("X-Forwarded-For"), r.Header.Get("Sec-WebSocket-Protocol")}
		c, err := upgrader.Upgrade(w, r, nil)
		if err != nil {
			serverDone <- err
			return
		}
		defer c.Close()
		// Unprompted greeting, then echo until the client closes.
		if err := c.WriteMessage(websocket.TextMessage, []byte("welcome")); err != nil {
			serverDone <- err
			return
		}
		for {
			typ, msg, err := c.ReadMessage()
			if err != nil {
				if websocket.IsCloseError(err, websocket.CloseNormalClosure) {
					err = nil
				}
				serverDone <- err
				return
			}
			if err := c.WriteMessage(typ, append([]byte("echo: "), msg...)); err != nil {
				serverDone <- err
				return
			}
		}
	}))
	e := startEbb(t, singleClusterYAML(hostPort(origin)))

	dialer := websocket.Dialer{HandshakeTimeout: waitTimeout, Subprotocols: []string{"echo.v1"}}
	c, resp, err := dialer.Dial("ws://"+e.addr("public")+"/ws", nil)
	if err != nil {
		t.Fatalf("dial through ebb: %v (response %v)", err, resp)
	}
	defer c.Close()
	if resp.StatusCode != http.StatusSwitchingProtocols || c.Subprotocol() != "echo.v1" {
		t.Fatalf("handshake: status %d, subprotocol %q", resp.StatusCode, c.Subprotocol())
	}
	h := recv(t, handshakes, "the handshake at the origin")
	if !strings.EqualFold(h.upgrade, "websocket") || !strings.Contains(strings.ToLower(h.connection), "upgrade") {
		t.Errorf("origin saw Upgrade %q, Connection %q; want websocket, upgrade", h.upgrade, h.connection)
	}
	if h.xff != "127.0.0.1" || h.protocol != "echo.v1" {
		t.Errorf("origin saw X-Forwarded-For %q, Sec-WebSocket-Protocol %q", h.xff, h.protocol)
	}
	c.SetReadDeadline(time.Now().Add(waitTimeout))

	read := func(wantType int, want []byte) {
		t.Helper()
		typ, msg, err := c.ReadMessage()
		if err != nil {
			t.Fatalf("reading: %v", err)
		}
		if typ != wantType || !bytes.Equal(msg, want) {
			t.Fatalf("got message type %d %q, want type %d %q", typ, trunc(msg), wantType, trunc(want))
		}
	}
	read(websocket.TextMessage, []byte("welcome"))
	big := randBytes(5, 256<<10)
	msgs := []struct {
		typ  int
		data []byte
	}{
		{websocket.TextMessage, []byte("hello")},
		{websocket.BinaryMessage, []byte{0, 1, 2, 255}},
		{websocket.BinaryMessage, big},
		{websocket.TextMessage, []byte(strings.Repeat("ü", 1000))},
	}
	for i := range 5 {
		msgs = append(msgs, struct {
			typ  int
			data []byte
		}{websocket.TextMessage, []byte(fmt.Sprintf("message %d", i))})
	}
	for _, m := range msgs {
		if err := c.WriteMessage(m.typ, m.data); err != nil {
			t.Fatalf("writing: %v", err)
		}
		read(m.typ, append([]byte("echo: "), m.data...))
	}

	// Close handshake: the server answers the close frame and ends.
	if err := c.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, "bye")); err != nil {
		t.Fatal(err)
	}
	_, _, err = c.ReadMessage()
	var ce *websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != websocket.CloseNormalClosure {
		t.Fatalf("after sending close: %v, want the server's close frame (1000)", err)
	}
	if err := recv(t, serverDone, "the origin's WebSocket handler to end"); err != nil {
		t.Fatalf("origin: %v", err)
	}
	c.Close()

	// The upgrade is counted as a 1xx exchange on the cluster.
	if v, ok := metricValue(scrape(t, e), "ebb_requests_total", map[string]string{"cluster": "app", "listener": "public", "protocol": "http1", "status_class": "1xx"}); !ok || v != 1 {
		t.Errorf("ebb_requests_total 1xx = %v (present %v), want 1", v, ok)
	}
}

// TestWebSocketRefused checks that an upstream refusing an upgrade (plain
// HTTP answer instead of 101) is relayed as an ordinary response.
func TestWebSocketRefused(t *testing.T) {
	t.Parallel()
	origin := newOrigin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Reason", "no sockets here")
		w.WriteHeader(http.StatusForbidden)
		w.Write([]byte("forbidden\n"))
	}))
	e := startEbb(t, singleClusterYAML(hostPort(origin)))
	dialer := websocket.Dialer{HandshakeTimeout: waitTimeout}
	c, resp, err := dialer.Dial("ws://"+e.addr("public")+"/ws", nil)
	if err == nil {
		c.Close()
		t.Fatal("the upgrade succeeded; the origin refused it")
	}
	if resp == nil {
		t.Fatalf("no response: %v", err)
	}
	if resp.StatusCode != http.StatusForbidden || resp.Header.Get("X-Reason") != "no sockets here" {
		t.Fatalf("status %d, X-Reason %q; want 403 relayed", resp.StatusCode, resp.Header.Get("X-Reason"))
	}
}

// TestH2CUpgradeOfferDeclined has curl offer an h2c upgrade (curl --http2
// on an http:// URL sends Connection: Upgrade, HTTP2-Settings and Upgrade:
// h2c) to an HTTP/1.1-only origin, which declines by answering normally.
// The answer must reach the client whole, whatever its size.
func TestH2CUpgradeOfferDeclined(t *testing.T) {
	t.Parallel()
	origin := newOrigin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, err := strconv.Atoi(r.URL.Query().Get("n"))
		if err != nil {
			http.Error(w, "n?", http.StatusBadRequest)
			return
		}
		io.CopyN(w, randReader(7), int64(n))
	}))
	e := startEbb(t, singleClusterYAML(hostPort(origin)))
	for _, n := range []int{10, 100 << 10, 2 << 20} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			r := runCurl(t, "--http2", e.url("public", "/file?n="+strconv.Itoa(n)))
			if r.status != 200 || !bytes.Equal(r.body, randBytes(7, n)) {
				t.Fatalf("status %d, %d bytes (%q...); want 200 and the origin's %d bytes", r.status, len(r.body), trunc(r.body), n)
			}
		})
	}
}

// TestWebSocketDuringDrain keeps a WebSocket open across SIGTERM: it keeps
// working while ebb drains, and once the client closes it ebb exits 0
// (drained, nothing closed by force).
func TestWebSocketDuringDrain(t *testing.T) {
	t.Parallel()
	origin := newOrigin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { echoWebSocket(w, r, nil) }))
	e := startEbb(t, singleClusterYAML(hostPort(origin)))
	dialer := websocket.Dialer{HandshakeTimeout: waitTimeout}
	c, _, err := dialer.Dial("ws://"+e.addr("public")+"/ws", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(waitTimeout))
	echo := func(msg string) {
		t.Helper()
		if err := c.WriteMessage(websocket.TextMessage, []byte(msg)); err != nil {
			t.Fatalf("writing %q: %v", msg, err)
		}
		if _, got, err := c.ReadMessage(); err != nil || string(got) != msg {
			t.Fatalf("echo of %q: %q, %v", msg, got, err)
		}
	}
	echo("before")
	e.signal(syscall.SIGTERM)
	if status, _ := pollReady(t, e); status != 503 {
		t.Fatalf("/ready: %d during the drain, want 503", status)
	}
	echo("during the drain")
	c.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""))
	if _, _, err := c.ReadMessage(); !websocket.IsCloseError(err, websocket.CloseNormalClosure) {
		t.Fatalf("after close: %v", err)
	}
	c.Close()
	if code := e.exit(); code != 0 {
		t.Fatalf("exit status %d, want 0 once the WebSocket closed; log:\n%s", code, e.logs())
	}
}

// echoWebSocket upgrades r to a WebSocket, runs opened (if not nil), and
// sends back each message until the client closes or leaves.
func echoWebSocket(w http.ResponseWriter, r *http.Request, opened func()) {
	var upgrader websocket.Upgrader
	c, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	defer c.Close()
	if opened != nil {
		opened()
	}
	for {
		typ, msg, err := c.ReadMessage()
		if err != nil {
			return // the client's close frame (answered by gorilla), or its end
		}
		if err := c.WriteMessage(typ, msg); err != nil {
			return
		}
	}
}
