package h2

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// rawClient speaks HTTP/2 frame by frame, to see exactly what the server
// sends.
type rawClient struct {
	t    *testing.T
	conn net.Conn
	fr   *http2.Framer
	enc  *hpack.Encoder
	hbuf bytes.Buffer
}

func dialRaw(t *testing.T, addr string) *rawClient {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	rc := &rawClient{t: t, conn: c, fr: http2.NewFramer(c, c)}
	rc.enc = hpack.NewEncoder(&rc.hbuf)
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	if err := rc.fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	// The server's SETTINGS, then its ACK of ours (in either order with
	// a WINDOW_UPDATE).
	for acked, got := false, false; !acked || !got; {
		f := rc.read()
		if sf, ok := f.(*http2.SettingsFrame); ok {
			if sf.IsAck() {
				acked = true
			} else {
				got = true
				if err := rc.fr.WriteSettingsAck(); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	return rc
}

func (rc *rawClient) read() http2.Frame {
	rc.t.Helper()
	if err := rc.conn.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		rc.t.Fatal(err)
	}
	f, err := rc.fr.ReadFrame()
	if err != nil {
		rc.t.Fatalf("reading a frame: %v", err)
	}
	return f
}

// get opens a stream with a GET of path.
func (rc *rawClient) get(id uint32, path string) {
	rc.t.Helper()
	rc.hbuf.Reset()
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", "example.com"}, {":path", path}} {
		_ = rc.enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	if err := rc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: rc.hbuf.Bytes(), EndStream: true, EndHeaders: true}); err != nil {
		rc.t.Fatal(err)
	}
}

// until reads frames until one satisfies ok, and returns it.
func (rc *rawClient) until(what string, ok func(http2.Frame) bool) http2.Frame {
	rc.t.Helper()
	for {
		f := rc.read()
		if ok(f) {
			return f
		}
		if ga, isGA := f.(*http2.GoAwayFrame); isGA {
			rc.t.Logf("(GOAWAY last=%d code=%v while waiting for %s)", ga.LastStreamID, ga.ErrCode, what)
		}
	}
}

func endOf(id uint32) func(http2.Frame) bool {
	return func(f http2.Frame) bool {
		switch f := f.(type) {
		case *http2.DataFrame:
			return f.StreamID == id && f.StreamEnded()
		case *http2.HeadersFrame:
			return f.StreamID == id && f.StreamEnded()
		}
		return false
	}
}

// testServer serves HTTP/2 on a loopback port and hands each served
// connection to the test.
func testServer(t *testing.T, h Handler) (addr string, conns chan *Conn, accepted *atomic.Int32) {
	t.Helper()
	return testServerWith(t, &Server{Handler: h, IdleTimeout: time.Minute})
}

// testServerWith is testServer with a server configured by the test.
func testServerWith(t *testing.T, s *Server) (addr string, conns chan *Conn, accepted *atomic.Int32) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	conns = make(chan *Conn, 16)
	accepted = new(atomic.Int32)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			go s.Serve(context.Background(), c, func(cn *Conn) { conns <- cn })
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
	})
	return ln.Addr().String(), conns, accepted
}

// TestGracefulShutdownOneConn shows the two-phase GOAWAY on exactly one
// connection: the first GOAWAY (2^31-1) and a PING, a stream opened after
// it still served, the final GOAWAY with the real last stream id once the
// PING is acknowledged, the stream in flight finished, then the close.
// Another connection of the same server is untouched.
func TestGracefulShutdownOneConn(t *testing.T) {
	release := make(chan struct{})
	addr, conns, accepted := testServer(t, HandlerFunc(func(st *Stream) {
		if string(st.Path()) == "/slow" {
			<-release
		}
		reply(st, "ok")
	}))

	other := &http.Client{Transport: h2cTransport()}
	defer other.CloseIdleConnections()
	get(t, other, "http://"+addr+"/")
	<-conns // the other client's connection

	rc := dialRaw(t, addr)
	cn := <-conns
	rc.get(1, "/slow")
	// The handler runs; the stream stays open until release.
	cn.GoAway(time.Minute, 0)

	ga := rc.until("first GOAWAY", isGoAway).(*http2.GoAwayFrame)
	if ga.LastStreamID != 1<<31-1 || ga.ErrCode != http2.ErrCodeNo {
		t.Fatalf("first GOAWAY: last stream %d, code %v; want 2147483647, NO_ERROR", ga.LastStreamID, ga.ErrCode)
	}
	ping := rc.until("PING", func(f http2.Frame) bool { p, ok := f.(*http2.PingFrame); return ok && !p.IsAck() }).(*http2.PingFrame)

	// A stream opened between the two GOAWAYs is served.
	rc.get(3, "/")
	rc.until("stream 3's response", endOf(3))

	if err := rc.fr.WritePing(true, ping.Data); err != nil {
		t.Fatal(err)
	}
	final := rc.until("final GOAWAY", isGoAway).(*http2.GoAwayFrame)
	if final.LastStreamID != 3 || final.ErrCode != http2.ErrCodeNo {
		t.Fatalf("final GOAWAY: last stream %d, code %v; want 3, NO_ERROR", final.LastStreamID, final.ErrCode)
	}
	close(release)
	rc.until("stream 1's response", endOf(1))
	// Then the server closes the connection.
	for {
		if err := rc.conn.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
			t.Fatal(err)
		}
		if _, err := rc.fr.ReadFrame(); err != nil {
			if err != io.EOF {
				t.Fatalf("connection ended with %v, want EOF", err)
			}
			break
		}
	}
	select {
	case <-cn.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after the connection closed")
	}

	// The other connection still serves, without a new one.
	get(t, other, "http://"+addr+"/")
	if n := accepted.Load(); n != 2 {
		t.Fatalf("%d connections accepted, want 2: the other client had to reconnect", n)
	}
}

// TestGoAwayGraceWithoutPingAck shows that a client that never answers the
// PING still gets the final GOAWAY once the grace has passed.
func TestGoAwayGraceWithoutPingAck(t *testing.T) {
	addr, conns, _ := testServer(t, okHandler())
	rc := dialRaw(t, addr)
	cn := <-conns
	rc.get(1, "/")
	rc.until("stream 1's response", endOf(1))
	cn.GoAway(50*time.Millisecond, 0)
	first := rc.until("first GOAWAY", isGoAway).(*http2.GoAwayFrame)
	final := rc.until("final GOAWAY", isGoAway).(*http2.GoAwayFrame)
	if first.LastStreamID != 1<<31-1 || final.LastStreamID != 1 {
		t.Fatalf("GOAWAYs with last stream %d then %d; want 2147483647 then 1", first.LastStreamID, final.LastStreamID)
	}
}

// TestGoAwayWaitsForFirstStream: a connection told to go away before the
// client opened a stream gets its first GOAWAY with the first stream,
// which is served (its client may have dialled it for that request); or,
// when none comes, once idle has passed.
func TestGoAwayWaitsForFirstStream(t *testing.T) {
	t.Run("first stream", func(t *testing.T) {
		addr, conns, _ := testServer(t, okHandler())
		rc := dialRaw(t, addr)
		cn := <-conns
		cn.GoAway(time.Minute, 0)
		// Nothing yet: the answer to a PING comes before any GOAWAY.
		if err := rc.fr.WritePing(false, [8]byte{1}); err != nil {
			t.Fatal(err)
		}
		rc.until("the PING's ACK", func(f http2.Frame) bool {
			if isGoAway(f) {
				t.Fatal("a GOAWAY before the client's first stream")
			}
			p, ok := f.(*http2.PingFrame)
			return ok && p.IsAck()
		})
		rc.get(1, "/")
		if ga := rc.until("first GOAWAY", isGoAway).(*http2.GoAwayFrame); ga.LastStreamID != 1<<31-1 {
			t.Fatalf("first GOAWAY with last stream %d, want 2147483647", ga.LastStreamID)
		}
		rc.until("stream 1's response", endOf(1))
	})
	t.Run("idle", func(t *testing.T) {
		addr, conns, _ := testServer(t, okHandler())
		rc := dialRaw(t, addr)
		cn := <-conns
		cn.GoAway(50*time.Millisecond, 50*time.Millisecond)
		first := rc.until("first GOAWAY", isGoAway).(*http2.GoAwayFrame)
		final := rc.until("final GOAWAY", isGoAway).(*http2.GoAwayFrame)
		if first.LastStreamID != 1<<31-1 || final.LastStreamID != 0 {
			t.Fatalf("GOAWAYs with last stream %d then %d; want 2147483647 then 0", first.LastStreamID, final.LastStreamID)
		}
		select {
		case <-cn.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("the connection did not close after its final GOAWAY")
		}
	})
}

// reply answers st with 200 and body.
func reply(st *Stream, body string) {
	if err := st.WriteHeader(http.StatusOK, false); err != nil {
		return
	}
	if _, err := io.WriteString(st, body); err == nil {
		_ = st.End()
	}
}

func okHandler() Handler { return HandlerFunc(func(st *Stream) { reply(st, "ok") }) }

func isGoAway(f http2.Frame) bool { _, ok := f.(*http2.GoAwayFrame); return ok }

func h2cTransport() *http.Transport {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	return &http.Transport{Protocols: &p}
}

func get(t *testing.T, c *http.Client, url string) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if b, _ := io.ReadAll(resp.Body); resp.StatusCode != 200 || string(b) != "ok" || resp.ProtoMajor != 2 {
		t.Fatalf("GET %s: %s %d %q", url, resp.Proto, resp.StatusCode, b)
	}
}

// TestRepeatedSettingAccepted sends a SETTINGS frame that repeats
// INITIAL_WINDOW_SIZE, which RFC 9113 allows (the last value wins) and
// x/net alone would hang up on: the server acknowledges it, and the last
// value is the one in force.
func TestRepeatedSettingAccepted(t *testing.T) {
	addr, _, _ := testServer(t, HandlerFunc(func(st *Stream) { reply(st, strings.Repeat("x", 100)) }))
	rc := dialRaw(t, addr)
	if err := rc.fr.WriteSettings(
		http2.Setting{ID: http2.SettingInitialWindowSize, Val: 100},
		http2.Setting{ID: http2.SettingMaxFrameSize, Val: 1 << 14},
		http2.Setting{ID: http2.SettingInitialWindowSize, Val: 10},
	); err != nil {
		t.Fatal(err)
	}
	rc.until("SETTINGS ACK", func(f http2.Frame) bool { s, ok := f.(*http2.SettingsFrame); return ok && s.IsAck() })
	rc.get(1, "/")
	// With a stream window of 10 (not 100), the first DATA frame carries
	// exactly 10 bytes.
	d := rc.until("DATA", func(f http2.Frame) bool { _, ok := f.(*http2.DataFrame); return ok }).(*http2.DataFrame)
	if len(d.Data()) != 10 {
		t.Fatalf("first DATA frame of %d bytes, want 10 (the last INITIAL_WINDOW_SIZE)", len(d.Data()))
	}
}

// TestTerminate shows the end at the drain's deadline: the final GOAWAY,
// a RST_STREAM(CANCEL) for the stream still open, then the close; the
// handler's context ends.
func TestTerminate(t *testing.T) {
	cancelled := make(chan struct{})
	addr, conns, _ := testServer(t, HandlerFunc(func(st *Stream) {
		<-st.Context().Done()
		close(cancelled)
	}))
	rc := dialRaw(t, addr)
	cn := <-conns
	rc.get(1, "/slow")
	rc.get(3, "/slow")
	// Both streams are open once the server has seen them: a PING's ACK
	// comes after them.
	if err := rc.fr.WritePing(false, [8]byte{7}); err != nil {
		t.Fatal(err)
	}
	rc.until("PING ACK", func(f http2.Frame) bool { p, ok := f.(*http2.PingFrame); return ok && p.IsAck() })
	cn.Terminate()
	ga := rc.until("GOAWAY", isGoAway).(*http2.GoAwayFrame)
	if ga.LastStreamID != 3 || ga.ErrCode != http2.ErrCodeNo {
		t.Fatalf("GOAWAY last stream %d, code %v; want 3, NO_ERROR", ga.LastStreamID, ga.ErrCode)
	}
	resets := map[uint32]http2.ErrCode{}
	for len(resets) < 2 {
		f := rc.read()
		if r, ok := f.(*http2.RSTStreamFrame); ok {
			resets[r.StreamID] = r.ErrCode
		}
	}
	if resets[1] != http2.ErrCodeCancel || resets[3] != http2.ErrCodeCancel {
		t.Fatalf("RST_STREAM codes %v, want CANCEL for streams 1 and 3", resets)
	}
	if _, err := rc.fr.ReadFrame(); err != io.EOF {
		t.Fatalf("after the resets: %v, want EOF", err)
	}
	<-cancelled
	<-cn.Done()
}

// headers opens stream id with the given fields (in order).
func (rc *rawClient) headers(id uint32, end bool, fields ...[2]string) {
	rc.t.Helper()
	rc.hbuf.Reset()
	for _, f := range fields {
		_ = rc.enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	if err := rc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: rc.hbuf.Bytes(), EndStream: end, EndHeaders: true}); err != nil {
		rc.t.Fatal(err)
	}
}

func rstOf(id uint32) func(http2.Frame) bool {
	return func(f http2.Frame) bool { r, ok := f.(*http2.RSTStreamFrame); return ok && r.StreamID == id }
}

// TestMalformedRequests sends requests RFC 9113 §8.1.1 calls malformed:
// each stream is reset with PROTOCOL_ERROR, never served, and the
// connection goes on.
func TestMalformedRequests(t *testing.T) {
	served := make(chan string, 16)
	addr, _, _ := testServer(t, HandlerFunc(func(st *Stream) {
		served <- string(st.Path())
		// The body is read, as an upstream would: the answer cannot come
		// before the body's end (or its reset).
		_, _ = io.Copy(io.Discard, st.Body())
		reply(st, "ok")
	}))
	rc := dialRaw(t, addr)
	base := [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", "example.com"}}
	cases := []struct {
		name   string
		fields [][2]string
	}{
		{"upper-case name", append(base[:3:3], [2]string{":path", "/"}, [2]string{"X-Up", "1"})},
		{"connection-specific field", append(base[:3:3], [2]string{":path", "/"}, [2]string{"connection", "keep-alive"})},
		{"te other than trailers", append(base[:3:3], [2]string{":path", "/"}, [2]string{"te", "gzip"})},
		{"space in :path", append(base[:3:3], [2]string{":path", "/a b"})},
		{"space in :method", [][2]string{{":method", "GET /admin"}, {":scheme", "http"}, {":authority", "example.com"}, {":path", "/public"}}},
		{"control in :path", append(base[:3:3], [2]string{":path", "/a\x7f"})},
		{"userinfo in :authority", [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", "user:pw@example.com"}, {":path", "/"}}},
		{"path in :authority", [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", "example.com/admin"}, {":path", "/"}}},
		{"no :path", base},
		{"pseudo after regular", [][2]string{{":method", "GET"}, {"x", "1"}, {":scheme", "http"}, {":path", "/"}}},
		{"unknown pseudo", append(base[:3:3], [2]string{":path", "/"}, [2]string{":protocol", "websocket"})},
		{"repeated :path", append(base[:3:3], [2]string{":path", "/"}, [2]string{":path", "/"})},
	}
	id := uint32(1)
	for _, tc := range cases {
		rc.headers(id, true, tc.fields...)
		r := rc.until(tc.name, rstOf(id)).(*http2.RSTStreamFrame)
		if r.ErrCode != http2.ErrCodeProtocol {
			t.Errorf("%s: RST_STREAM %v, want PROTOCOL_ERROR", tc.name, r.ErrCode)
		}
		id += 2
	}
	// A content-length the body does not match.
	rc.headers(id, false, append(base[:3:3], [2]string{":path", "/cl"}, [2]string{"content-length", "5"})...)
	if err := rc.fr.WriteData(id, true, []byte("abc")); err != nil {
		t.Fatal(err)
	}
	if r := rc.until("content-length mismatch", rstOf(id)).(*http2.RSTStreamFrame); r.ErrCode != http2.ErrCodeProtocol {
		t.Errorf("content-length mismatch: RST_STREAM %v, want PROTOCOL_ERROR", r.ErrCode)
	}
	<-served // /cl was served before its body ended short
	id += 2
	rc.get(id, "/fine")
	rc.until("a good request's response", endOf(id))
	if p := <-served; p != "/fine" {
		t.Fatalf("served %q; a malformed request reached the handler", p)
	}
}

// TestDataBeyondWindow sends more body than the stream's window while
// the handler reads nothing: the stream is reset with FLOW_CONTROL_ERROR,
// and ebb held no more than the window.
func TestDataBeyondWindow(t *testing.T) {
	addr, _, _ := testServer(t, HandlerFunc(func(st *Stream) { <-st.Context().Done() }))
	rc := dialRaw(t, addr)
	rc.headers(1, false, [2]string{":method", "POST"}, [2]string{":scheme", "http"}, [2]string{":authority", "x"}, [2]string{":path", "/"})
	chunk := make([]byte, 16<<10)
	for sent := 0; sent <= DefaultStreamWindow; sent += len(chunk) {
		if err := rc.fr.WriteData(1, false, chunk); err != nil {
			t.Fatal(err)
		}
	}
	if r := rc.until("RST_STREAM", rstOf(1)).(*http2.RSTStreamFrame); r.ErrCode != http2.ErrCodeFlowControl {
		t.Fatalf("RST_STREAM %v, want FLOW_CONTROL_ERROR", r.ErrCode)
	}
}

// TestContinuationFlood sends a header block that never ends, in empty
// CONTINUATION frames (CVE-2024-27316): the connection ends with
// ENHANCE_YOUR_CALM instead of reading them forever.
func TestContinuationFlood(t *testing.T) {
	addr, _, _ := testServer(t, okHandler())
	rc := dialRaw(t, addr)
	rc.hbuf.Reset()
	_ = rc.enc.WriteField(hpack.HeaderField{Name: ":method", Value: "GET"})
	if err := rc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: rc.hbuf.Bytes()}); err != nil {
		t.Fatal(err)
	}
	var ga *http2.GoAwayFrame
	go func() {
		for range 100000 {
			if rc.fr.WriteContinuation(1, false, nil) != nil {
				return
			}
		}
	}()
	ga = rc.until("GOAWAY", isGoAway).(*http2.GoAwayFrame)
	if ga.ErrCode != http2.ErrCodeEnhanceYourCalm {
		t.Fatalf("GOAWAY %v, want ENHANCE_YOUR_CALM", ga.ErrCode)
	}
}

// TestMaxConcurrentStreams shows the limit enforced: a stream beyond it
// is refused with REFUSED_STREAM (which clients retry), and served once
// a slot is free.
func TestMaxConcurrentStreams(t *testing.T) {
	release := make(chan struct{})
	addr, _, _ := testServerWith(t, &Server{MaxConcurrentStreams: 1, Handler: HandlerFunc(func(st *Stream) {
		if string(st.Path()) == "/slow" {
			<-release
		}
		reply(st, "ok")
	})})
	rc := dialRaw(t, addr)
	rc.get(1, "/slow")
	rc.get(3, "/")
	if r := rc.until("RST_STREAM", rstOf(3)).(*http2.RSTStreamFrame); r.ErrCode != http2.ErrCodeRefusedStream {
		t.Fatalf("RST_STREAM %v, want REFUSED_STREAM", r.ErrCode)
	}
	close(release)
	rc.until("stream 1's response", endOf(1))
	rc.get(5, "/")
	rc.until("stream 5's response", endOf(5))
}

// TestResetCounts: the server counts the RST_STREAM frames it sends and
// receives by error code, a code RFC 9113 does not define as "unknown".
func TestResetCounts(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	srv := &Server{MaxConcurrentStreams: 1, Handler: HandlerFunc(func(st *Stream) {
		select {
		case <-release:
		case <-st.Context().Done():
		}
	})}
	addr, _, _ := testServerWith(t, srv)
	rc := dialRaw(t, addr)
	rc.get(1, "/")
	rc.get(3, "/") // refused: one stream at a time
	rc.until("RST_STREAM", rstOf(3))
	// A reset of the stream already refused: harmless, and counted.
	if err := rc.fr.WriteRSTStream(3, http2.ErrCode(0xff)); err != nil {
		t.Fatal(err)
	}
	// Frames are handled in order: once the PING is answered, the reset
	// has been counted.
	if err := rc.fr.WritePing(false, [8]byte{7}); err != nil {
		t.Fatal(err)
	}
	rc.until("PING ack", func(f http2.Frame) bool {
		p, ok := f.(*http2.PingFrame)
		return ok && p.IsAck() && p.Data == [8]byte{7}
	})
	got := map[string]int64{}
	srv.Resets.Each(func(direction, code string, n int64) {
		if n != 0 {
			got[direction+" "+code] = n
		}
	})
	if len(got) != 2 || got["sent REFUSED_STREAM"] != 1 || got["received unknown"] != 1 {
		t.Errorf("reset counts %v, want one REFUSED_STREAM sent and one unknown received", got)
	}
}

// TestRapidReset opens streams and resets each at once, before its
// answer (CVE-2023-44487): the handlers wait on their stream's context, so
// they return only because the resets cancel it. Streams opened while
// those handlers unwind are refused (they count as open), and once the
// client has reset or had refused more than max_concurrent_streams
// streams beyond those it let finish, the connection ends with
// ENHANCE_YOUR_CALM.
func TestRapidReset(t *testing.T) {
	const limit = 10
	addr, _, _ := testServerWith(t, &Server{MaxConcurrentStreams: limit, Handler: HandlerFunc(func(st *Stream) {
		<-st.Context().Done()
	})})
	rc := dialRaw(t, addr)
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", "x"}, {":path", "/"}} {
		_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	sent := make(chan struct{})
	go func() {
		// Not rc's helpers: they may not fail the test from here.
		defer close(sent)
		for id := uint32(1); id < 2*(limit+5); id += 2 {
			if rc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block.Bytes(), EndStream: true, EndHeaders: true}) != nil ||
				rc.fr.WriteRSTStream(id, http2.ErrCodeCancel) != nil {
				return
			}
		}
	}()
	defer func() { <-sent }()
	ga := rc.until("GOAWAY", isGoAway).(*http2.GoAwayFrame)
	if ga.ErrCode != http2.ErrCodeEnhanceYourCalm {
		t.Fatalf("GOAWAY %v, want ENHANCE_YOUR_CALM", ga.ErrCode)
	}
	if _, err := rc.fr.ReadFrame(); err == nil {
		t.Fatal("the connection stayed open after the GOAWAY")
	}
}
