package e2e

import (
	"bytes"
	"crypto/tls"
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

// TestWebSocketDrain: WebSockets held through ebb when it is told to stop,
// in cleartext and over TLS, as a chat's clients hold them: each client
// gets a close frame with status 1001 (going away) and ebb's reason, at
// its own moment of the spread, and reconnects to a second ebb, where its
// WebSocket works; the origin gets a close frame with 1001 for each one;
// the draining ebb exits 0 (drained, nothing closed by force) once they
// are gone, and its metrics and summary count them as WebSockets.
func TestWebSocketDrain(t *testing.T) {
	t.Parallel()
	const perListener = 4
	closes := make(chan string, 4*perListener)
	origin := newOrigin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var up websocket.Upgrader
		c, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer c.Close()
		for {
			typ, msg, err := c.ReadMessage()
			if err != nil {
				if r.URL.Path != "/chat" {
					return // a reconnected client, closed with the test
				}
				if ce, ok := err.(*websocket.CloseError); ok {
					closes <- fmt.Sprintf("%d %s", ce.Code, ce.Text)
				} else {
					closes <- err.Error()
				}
				return
			}
			c.WriteMessage(typ, msg)
		}
	}))
	cert, key, pool := writeTestCert(t, t.TempDir())
	yaml := fmt.Sprintf(`admin: { address: 127.0.0.1:0 }
listeners:
  - { name: public, address: 127.0.0.1:0, routes: [{ cluster: app }] }
  - name: secure
    address: 127.0.0.1:0
    tls: { cert: %q, key: %q }
    routes: [{ cluster: app }]
clusters:
  - { name: app, discovery: { static: [%q] } }
drain:
  spread: 1s
  quiet: 200ms
  timeout: 20s
  websocket: { close: at_signal, grace: 1s }
`, cert, key, hostPort(origin))
	a, b := startEbb(t, yaml), startEbb(t, yaml)
	dialer := websocket.Dialer{HandshakeTimeout: waitTimeout, TLSClientConfig: &tls.Config{RootCAs: pool}}
	url := func(e *ebbProc, listener, path string) string {
		if listener == "secure" {
			return "wss://" + e.addr(listener) + path
		}
		return "ws://" + e.addr(listener) + path
	}
	echo := func(c *websocket.Conn, msg string) error {
		if err := c.WriteMessage(websocket.TextMessage, []byte(msg)); err != nil {
			return err
		}
		if _, got, err := c.ReadMessage(); err != nil || string(got) != msg {
			return fmt.Errorf("echo of %q: %q, %v", msg, got, err)
		}
		return nil
	}
	type client struct {
		listener string
		c        *websocket.Conn
	}
	var clients []client
	for _, l := range []string{"public", "secure"} {
		for i := range perListener {
			c, _, err := dialer.Dial(url(a, l, "/chat"), nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			c.SetReadDeadline(time.Now().Add(waitTimeout))
			if err := echo(c, fmt.Sprintf("%s %d", l, i)); err != nil {
				t.Fatal(err)
			}
			clients = append(clients, client{l, c})
		}
	}
	// Counted as WebSockets, not as HTTP/1 connections.
	byProto := map[string]float64{}
	for _, s := range scrape(t, a) {
		if s.name == "ebb_downstream_connections" {
			byProto[s.labels["protocol"]+"/"+s.labels["state"]] += s.value
		}
	}
	if byProto["websocket/upgraded"] != float64(len(clients)) || byProto["http1/upgraded"] != 0 {
		t.Errorf("ebb_downstream_connections by protocol/state %v, want %d websocket/upgraded", byProto, len(clients))
	}
	trigger := time.Now()
	a.signal(syscall.SIGTERM)
	// Each client reads until its close frame, then reconnects to b, as a
	// chat client reconnects (through a Service, to another replica).
	errs := make(chan error, len(clients))
	for _, cl := range clients {
		go func() {
			_, _, err := cl.c.ReadMessage()
			ce, ok := err.(*websocket.CloseError)
			if !ok || ce.Code != websocket.CloseGoingAway || ce.Text != "ebb: draining" {
				errs <- fmt.Errorf("%s: %v, want a close frame with 1001 and ebb's reason", cl.listener, err)
				return
			}
			again, _, err := dialer.Dial(url(b, cl.listener, "/again"), nil)
			if err != nil {
				errs <- fmt.Errorf("%s: reconnecting to the second ebb: %w", cl.listener, err)
				return
			}
			defer again.Close()
			again.SetReadDeadline(time.Now().Add(waitTimeout))
			errs <- echo(again, "after the reconnect")
		}()
	}
	for range clients {
		if err := recv(t, errs, "a client's close and reconnect"); err != nil {
			t.Error(err)
		}
	}
	for range clients {
		if got := recv(t, closes, "the origin's close"); got != "1001 ebb: draining" {
			t.Errorf("origin: %s, want a close frame with 1001 and ebb's reason", got)
		}
	}
	exitAt := awaitExit(t, a, "the draining ebb to exit")
	t.Logf("ebb exited %v after the trigger", exitAt.Sub(trigger).Round(time.Millisecond))
	if code := a.exit(); code != 0 {
		t.Fatalf("exit status %d, want 0 (drained); log:\n%s", code, a.logs())
	}
	checkDrainEnd(t, a, "drained")
	recs := a.logRecords("drain summary")
	want := fmt.Sprintf("%d connections (0 HTTP/1, 0 HTTP/2, %d WebSocket, 0 silent)", len(clients), len(clients))
	if len(recs) != 1 || !strings.Contains(fmt.Sprint(recs[0]["summary"]), want) ||
		!strings.Contains(fmt.Sprint(recs[0]["summary"]), fmt.Sprintf("%d WebSocket close (1001)", len(clients))) {
		t.Errorf("drain summary %v, want %q and %d WebSocket close (1001)", recs, want, len(clients))
	}
}
