package proxy

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"golang.org/x/net/http2"

	"github.com/ebb-proxy/ebb/proxy/downstream"
	"github.com/ebb-proxy/ebb/proxy/proxytest"
)

// The instruments read at each scrape count what happened: requests in
// flight on the listener and the cluster, bytes both ways, each reason a
// TLS handshake fails for, and a client's RST_STREAM.
func TestInstruments(t *testing.T) {
	arrived, left := make(chan struct{}), make(chan struct{})
	origin := newOriginServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			close(arrived)
			<-r.Context().Done() // until ebb cancels the upstream request
			close(left)
			return
		}
		io.WriteString(w, "ok")
	}))
	dir := t.TempDir()
	cert, key, _ := proxytest.WriteTestCert(t, dir)
	yaml := fmt.Sprintf(`
listeners:
  - {name: public, address: 127.0.0.1:0, routes: [{cluster: app}]}
  - name: secure
    address: 127.0.0.1:0
    tls: {cert: %q, key: %q}
    timeouts: {header: 300ms}
    routes: [{cluster: app}]
clusters:
  - {name: app, discovery: {static: [%q]}}
`, cert, key, origin[len("http://"):])
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	px, err := New(loadYAML(t, yaml), downstream.NewRegistry(), mp.Meter("t"), nil, proxytest.Discard())
	if err != nil {
		t.Fatal(err)
	}
	if err := px.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.Close() })
	public, secure := px.Addr("public").String(), px.Addr("secure").String()

	resp, err := proxytest.NewClient(t).Get("http://" + public + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "ok" {
		t.Fatalf("GET / = %d %q", resp.StatusCode, body)
	}

	// Three failed handshakes, one of each reason; each connection is
	// closed by ebb after it counted.
	closed := func(c net.Conn) {
		t.Helper()
		c.SetReadDeadline(time.Now().Add(waitTimeout))
		if _, err := io.Copy(io.Discard, c); err != nil {
			t.Fatalf("waiting for ebb to close the connection: %v", err)
		}
		c.Close()
	}
	for _, send := range []func(c net.Conn){
		func(c net.Conn) { io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n") }, // protocol: not TLS
		func(c net.Conn) { c.(*net.TCPConn).CloseWrite() },                          // eof
		func(net.Conn) {}, // timeout: silent past timeouts.header
	} {
		c, err := net.Dial("tcp", secure)
		if err != nil {
			t.Fatal(err)
		}
		send(c)
		closed(c)
	}

	// An h2c request held at the origin, then cancelled by the client.
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	h2c := &http.Transport{Protocols: &protos}
	t.Cleanup(h2c.CloseIdleConnections)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+public+"/hold", nil)
	failed := make(chan error, 1)
	go func() {
		_, err := h2c.RoundTrip(req)
		failed <- err
	}()
	select {
	case <-arrived:
	case err := <-failed:
		t.Fatalf("the held request failed before the origin had it: %v", err)
	case <-time.After(waitTimeout):
		t.Fatal("the held request did not reach the origin")
	}
	held := proxytest.Collect(t, reader)
	cancel()
	select {
	case <-left:
	case <-time.After(waitTimeout):
		t.Fatal("the origin's request was not cancelled after the client reset its stream")
	}
	<-failed
	after := proxytest.Collect(t, reader)

	want := map[string]int64{
		"ebb.requests.in_flight listener=public":                     1,
		"ebb.requests.in_flight listener=secure":                     0,
		"ebb.upstream.requests.in_flight cluster=app":                1,
		"ebb.tls.handshake_failures listener=secure reason=protocol": 1,
		"ebb.tls.handshake_failures listener=secure reason=eof":      1,
		"ebb.tls.handshake_failures listener=secure reason=timeout":  1,
		"ebb.access_log.dropped_lines":                               0,
	}
	// Every reset series from the start, zeros included.
	for code := range http2.ErrCodeHTTP11Required + 2 {
		name := code.String()
		if code > http2.ErrCodeHTTP11Required {
			name = "unknown"
		}
		for _, l := range []string{"public", "secure"} {
			for _, dir := range []string{"received", "sent"} {
				want["ebb.http2.stream_resets code="+name+" direction="+dir+" listener="+l] = 0
			}
		}
	}
	for k, want := range want {
		if got, ok := held[k]; !ok || got != want {
			t.Errorf("while held: %s = %d (present %v), want %d", k, got, ok, want)
		}
	}
	if _, ok := held["ebb.tls.handshake_failures listener=public reason=eof"]; ok {
		t.Error("TLS handshake failures counted for a cleartext listener")
	}
	if got := after["ebb.http2.stream_resets code=CANCEL direction=received listener=public"]; got != 1 {
		t.Errorf("after the client's reset: CANCEL resets received = %d, want 1", got)
	}
	// The secure listener's clients sent bytes and got none: no handshake
	// went through.
	for k, positive := range map[string]bool{
		"ebb.downstream.received listener=public": true,
		"ebb.downstream.sent listener=public":     true,
		"ebb.downstream.received listener=secure": true,
		"ebb.downstream.sent listener=secure":     false,
	} {
		if v, ok := held[k]; !ok || (v > 0) != positive || after[k] < v {
			t.Errorf("%s: %d while held (present %v), %d after: want positive %v and not decreasing", k, v, ok, after[k], positive)
		}
	}
}
