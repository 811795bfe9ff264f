package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// startOrigin serves an origin on a port of its own for the test's
// duration; it returns the origin's address.
func startOrigin(t *testing.T, cfg originConfig) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- runOrigin(ctx, ln, cfg) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("runOrigin: %v", err)
		}
	})
	return ln.Addr().String()
}

func testConfig(barrier int, wait time.Duration) originConfig {
	return originConfig{barrier: barrier, wait: wait, holdPath: "/hold", body: []byte("0123456789"), log: io.Discard}
}

// stats asks the origin's /stats, on a connection of its own.
func stats(t *testing.T, addr, query string) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tr := h2cTransport()
	defer tr.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/stats"+query, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return keyValues(string(b))
}

// TestInflightThroughOrigin has the client hold 3 requests at the origin
// on 3 connections of one stream each (no proxy between them), the
// barrier let them go once all 3 were in flight, and every answer come
// whole.
func TestInflightThroughOrigin(t *testing.T) {
	addr := startOrigin(t, testConfig(3, time.Minute))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out strings.Builder
	if err := runInflight(ctx, &out, addr, addr, "/hold", 3, 1); err != nil {
		t.Fatal(err)
	}
	if want := "held 3\ndone 3 bytes=30\n"; out.String() != want {
		t.Errorf("runInflight printed %q; want %q", out.String(), want)
	}
	s := stats(t, addr, "")
	if s["last"] != "3:full" || s["held"] != "0" || s["refused"] != "0" {
		t.Errorf("stats = %v; want last=3:full held=0 refused=0", s)
	}
}

// TestOriginTimeout: a round that never fills goes when the wait is
// over.
func TestOriginTimeout(t *testing.T) {
	addr := startOrigin(t, testConfig(2, 50*time.Millisecond))
	c := dialOrigin(t, addr)
	c.get(t, 1, "/hold")
	if got := c.answer(t); got != 1 {
		t.Fatalf("answered stream %d, want 1", got)
	}
	if s := stats(t, addr, ""); s["last"] != "1:timeout" {
		t.Errorf("stats = %v; want last=1:timeout", s)
	}
}

// TestOriginOneStreamPerConn: the origin announces one stream per
// connection and refuses a second one while the first is open; /stats
// counts the open connections but its own.
func TestOriginOneStreamPerConn(t *testing.T) {
	addr := startOrigin(t, testConfig(2, time.Minute))
	c := dialOrigin(t, addr)
	if c.maxStreams != 1 {
		t.Fatalf("SETTINGS_MAX_CONCURRENT_STREAMS = %d, want 1", c.maxStreams)
	}
	c.get(t, 1, "/hold")
	c.get(t, 3, "/hold")
	f := c.frame(t)
	rst, ok := f.(*http2.RSTStreamFrame)
	if !ok || rst.StreamID != 3 || rst.ErrCode != http2.ErrCodeRefusedStream {
		t.Fatalf("got %v; want RST_STREAM REFUSED_STREAM on stream 3", f)
	}
	// A second connection's request fills the barrier: both go.
	c2 := dialOrigin(t, addr)
	s := stats(t, addr, "?held=1") // stream 1 held, once its SETTINGS ACK came
	if s["conns"] != "2" || s["held"] != "1" || s["refused"] != "1" {
		t.Errorf("stats = %v; want conns=2 held=1 refused=1", s)
	}
	c2.get(t, 1, "/hold")
	if got := c.answer(t); got != 1 {
		t.Errorf("first connection: answered stream %d, want 1", got)
	}
	if got := c2.answer(t); got != 1 {
		t.Errorf("second connection: answered stream %d, want 1", got)
	}
	// The slot is free again.
	c.get(t, 5, "/")
	if got := c.answer(t); got != 5 {
		t.Errorf("answered stream %d, want 5", got)
	}
}

// rawConn is an h2c connection to the origin, framed by hand.
type rawConn struct {
	c          net.Conn
	fr         *http2.Framer
	bw         *bufio.Writer
	maxStreams uint32
}

// dialOrigin connects, exchanges SETTINGS (acknowledging the origin's)
// and returns the connection.
func dialOrigin(t *testing.T, addr string) *rawConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if err := c.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	bw := bufio.NewWriter(c)
	rc := &rawConn{c: c, bw: bw, fr: http2.NewFramer(bw, bufio.NewReader(c))}
	_, _ = io.WriteString(bw, http2.ClientPreface)
	_ = rc.fr.WriteSettings()
	rc.flush(t)
	sf, ok := rc.frame(t).(*http2.SettingsFrame)
	if !ok || sf.IsAck() {
		t.Fatal("the origin's first frame is not its SETTINGS")
	}
	rc.maxStreams, _ = sf.Value(http2.SettingMaxConcurrentStreams)
	_ = rc.fr.WriteSettingsAck()
	rc.flush(t)
	return rc
}

func (rc *rawConn) flush(t *testing.T) {
	t.Helper()
	if err := rc.bw.Flush(); err != nil {
		t.Fatal(err)
	}
}

// frame reads the next frame but SETTINGS ACKs.
func (rc *rawConn) frame(t *testing.T) http2.Frame {
	t.Helper()
	for {
		f, err := rc.fr.ReadFrame()
		if err != nil {
			t.Fatal(err)
		}
		if sf, ok := f.(*http2.SettingsFrame); ok && sf.IsAck() {
			continue
		}
		return f
	}
}

// get sends a GET of path on stream id.
func (rc *rawConn) get(t *testing.T, id uint32, path string) {
	t.Helper()
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", "origin"}, {":path", path}} {
		_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	_ = rc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hb.Bytes(), EndStream: true, EndHeaders: true})
	rc.flush(t)
}

// answer reads an answer, HEADERS then DATA with END_STREAM, and returns
// its stream.
func (rc *rawConn) answer(t *testing.T) uint32 {
	t.Helper()
	h, ok := rc.frame(t).(*http2.HeadersFrame)
	if !ok {
		t.Fatal("the answer does not start with HEADERS")
	}
	d, ok := rc.frame(t).(*http2.DataFrame)
	if !ok || d.StreamID != h.StreamID || !d.StreamEnded() {
		t.Fatalf("the answer on stream %d has no DATA ending it", h.StreamID)
	}
	return h.StreamID
}
