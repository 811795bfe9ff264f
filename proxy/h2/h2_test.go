package h2

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
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
func testServer(t *testing.T, h http.Handler) (addr string, conns chan *Conn, accepted *atomic.Int32) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{Handler: h, IdleTimeout: time.Minute}
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
// Another connection of the same server is untouched. It would catch an
// upgrade of Go or x/net breaking per-connection graceful shutdown.
func TestGracefulShutdownOneConn(t *testing.T) {
	release := make(chan struct{})
	addr, conns, accepted := testServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			<-release
		}
		io.WriteString(w, "ok")
	}))

	other := &http.Client{Transport: h2cTransport()}
	defer other.CloseIdleConnections()
	get(t, other, "http://"+addr+"/")
	<-conns // the other client's connection

	rc := dialRaw(t, addr)
	cn := <-conns
	rc.get(1, "/slow")
	// The handler runs; the stream stays open until release.
	cn.GoAway(time.Minute)

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
	addr, conns, _ := testServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	rc := dialRaw(t, addr)
	cn := <-conns
	rc.get(1, "/")
	rc.until("stream 1's response", endOf(1))
	cn.GoAway(50 * time.Millisecond)
	first := rc.until("first GOAWAY", isGoAway).(*http2.GoAwayFrame)
	final := rc.until("final GOAWAY", isGoAway).(*http2.GoAwayFrame)
	if first.LastStreamID != 1<<31-1 || final.LastStreamID != 1 {
		t.Fatalf("GOAWAYs with last stream %d then %d; want 2147483647 then 1", first.LastStreamID, final.LastStreamID)
	}
}

// TestGoAwayBeforeSettings shows that a GoAway asked for before the engine
// wrote anything comes right after the server's SETTINGS, never before.
func TestGoAwayBeforeSettings(t *testing.T) {
	var out bytes.Buffer
	s := newSeam(&recordConn{w: &out})
	if err := s.inject(goAwayFrames([8]byte{1})); err != nil {
		t.Fatal(err)
	}
	var settings bytes.Buffer
	_ = http2.NewFramer(&settings, nil).WriteSettings(http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: 100})
	if _, err := s.Write(settings.Bytes()); err != nil {
		t.Fatal(err)
	}
	s.Close() // writes everything gathered
	fr := http2.NewFramer(nil, &out)
	for i, want := range []http2.FrameType{http2.FrameSettings, http2.FrameGoAway, http2.FramePing} {
		f, err := fr.ReadFrame()
		if err != nil || f.Header().Type != want {
			t.Fatalf("frame %d: %v, %v; want %v", i, f, err, want)
		}
	}
}

// TestSeamInjectsAtFrameBoundaries writes frames to the seam in pieces cut
// at every offset, injecting frames at each point, and checks that what
// reaches the connection is a clean sequence of whole frames.
func TestSeamInjectsAtFrameBoundaries(t *testing.T) {
	var stream bytes.Buffer
	fr := http2.NewFramer(&stream, nil)
	_ = fr.WriteSettings()
	_ = fr.WriteData(1, false, bytes.Repeat([]byte("a"), 100))
	_ = fr.WriteWindowUpdate(0, 1000)
	_ = fr.WriteData(1, true, nil)
	_ = fr.WriteData(3, true, bytes.Repeat([]byte("b"), 40))
	engine := stream.Bytes()
	const engineFrames = 5

	for cut := 1; cut < len(engine); cut++ {
		var out bytes.Buffer
		s := newSeam(&recordConn{w: &out})
		// Write the engine's bytes in two pieces with an injection
		// asked for between them.
		if _, err := s.Write(engine[:cut]); err != nil {
			t.Fatal(err)
		}
		if err := s.inject(goAwayFrames([8]byte{byte(cut)})); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Write(engine[cut:]); err != nil {
			t.Fatal(err)
		}
		s.Close()
		r := http2.NewFramer(nil, &out)
		var n, goaways, pings int
		for {
			f, err := r.ReadFrame()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("cut %d: frame %d: %v", cut, n, err)
			}
			n++
			switch f.(type) {
			case *http2.GoAwayFrame:
				goaways++
			case *http2.PingFrame:
				pings++
			}
		}
		if n != engineFrames+2 || goaways != 1 || pings != 1 {
			t.Fatalf("cut %d: %d frames (%d GOAWAY, %d PING), want %d with one of each", cut, n, goaways, pings, engineFrames+2)
		}
	}
}

// TestSeamSeesPingAck feeds the seam's read side a PING ACK split across
// reads, after the client preface and other frames.
func TestSeamSeesPingAck(t *testing.T) {
	var in bytes.Buffer
	in.WriteString(http2.ClientPreface)
	fr := http2.NewFramer(&in, nil)
	_ = fr.WriteSettings()
	_ = fr.WritePing(true, [8]byte{9, 9, 9, 9, 9, 9, 9, 9}) // someone else's
	_ = fr.WriteData(1, false, []byte("hello"))
	_ = fr.WritePing(true, [8]byte{1, 2, 3, 4, 5, 6, 7, 8})
	s := newSeam(&recordConn{r: &in})
	defer s.Close()
	s.pingData = [8]byte{1, 2, 3, 4, 5, 6, 7, 8}
	buf := make([]byte, 3)
	for {
		if _, err := s.Read(buf); err != nil {
			break
		}
	}
	select {
	case <-s.pingAck:
	default:
		t.Fatal("the PING ACK was not noticed")
	}
}

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

// recordConn is a net.Conn over buffers, for the seam's byte accounting.
type recordConn struct {
	net.Conn
	r io.Reader
	w io.Writer
}

func (c *recordConn) Read(p []byte) (int, error)  { return c.r.Read(p) }
func (c *recordConn) Write(p []byte) (int, error) { return c.w.Write(p) }
func (c *recordConn) Close() error                { return nil }

// TestRepeatedSettingAccepted sends a SETTINGS frame that repeats
// INITIAL_WINDOW_SIZE, which RFC 9113 allows (the last value wins) and
// x/net alone would hang up on: the server acknowledges it, and the last
// value is the one in force.
func TestRepeatedSettingAccepted(t *testing.T) {
	addr, _, _ := testServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write(bytes.Repeat([]byte("x"), 100))
	}))
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
