package h2

import (
	"context"
	"errors"
	"io"
	"net"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// The tests here send what a hostile client sends, frame by frame, and
// check that ebb ends it, within bounds, without hurting anyone else.

var post = [][2]string{{":method", "POST"}, {":scheme", "http"}, {":authority", "x"}, {":path", "/"}}

// status decodes a response header block's :status.
func status(t *testing.T, f http2.Frame) string {
	t.Helper()
	hf, ok := f.(*http2.HeadersFrame)
	if !ok {
		t.Fatalf("got %v, want HEADERS", f)
	}
	fields, err := hpack.NewDecoder(4096, nil).DecodeFull(hf.HeaderBlockFragment())
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fields {
		if f.Name == ":status" {
			return f.Value
		}
	}
	t.Fatalf("no :status in %v", fields)
	return ""
}

func headersOf(id uint32) func(http2.Frame) bool {
	return func(f http2.Frame) bool { h, ok := f.(*http2.HeadersFrame); return ok && h.StreamID == id }
}

// heapAfterGC returns the live heap.
func heapAfterGC() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestHeaderBlockTimeout starts a header block and never ends it: the
// connection, on which nothing else may come until the block ends, is
// closed after HeaderTimeout with a GOAWAY(PROTOCOL_ERROR).
func TestHeaderBlockTimeout(t *testing.T) {
	addr, _, _ := testServerWith(t, &Server{Handler: okHandler(), HeaderTimeout: 50 * time.Millisecond})
	rc := dialRaw(t, addr)
	rc.hbuf.Reset()
	_ = rc.enc.WriteField(hpack.HeaderField{Name: ":method", Value: "GET"})
	if err := rc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: rc.hbuf.Bytes()}); err != nil {
		t.Fatal(err)
	}
	if ga := rc.until("GOAWAY", isGoAway).(*http2.GoAwayFrame); ga.ErrCode != http2.ErrCodeProtocol {
		t.Fatalf("GOAWAY %v, want PROTOCOL_ERROR", ga.ErrCode)
	}
	if _, err := rc.fr.ReadFrame(); err == nil {
		t.Fatal("the connection stayed open after the GOAWAY")
	}
}

// TestBodyStall sends part of a request body and then nothing: the
// handler's read fails with a timeout after HeaderTimeout (the
// forwarding skeleton answers 408 then), and its answer reaches the
// client; another stream of the connection is served meanwhile.
func TestBodyStall(t *testing.T) {
	readErr := make(chan error, 1)
	addr, _, _ := testServerWith(t, &Server{HeaderTimeout: 50 * time.Millisecond, Handler: HandlerFunc(func(st *Stream) {
		if string(st.Path()) != "/upload" {
			reply(st, "ok")
			return
		}
		_, err := io.Copy(io.Discard, st.Body())
		readErr <- err
		st.AddHeaderString("content-length", "0")
		_ = st.WriteHeader(408, true)
	})})
	rc := dialRaw(t, addr)
	rc.headers(1, false, append(post[:3:3], [2]string{":path", "/upload"}, [2]string{"content-length", "100000"})...)
	if err := rc.fr.WriteData(1, false, make([]byte, 9000)); err != nil {
		t.Fatal(err)
	}
	rc.get(3, "/other")
	rc.until("the other stream's answer", endOf(3))
	if s := status(t, rc.until("the upload's answer", headersOf(1))); s != "408" {
		t.Fatalf("upload answered %s, want 408", s)
	}
	var ne net.Error
	if err := <-readErr; !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("the handler's read failed with %v, want a timeout", err)
	}
	// The client is told to stop sending the rest.
	if r := rc.until("RST_STREAM", rstOf(1)).(*http2.RSTStreamFrame); r.ErrCode != http2.ErrCodeNo {
		t.Fatalf("RST_STREAM %v, want NO_ERROR", r.ErrCode)
	}
}

// TestZeroWindowStall opens a stream with a window of 0 and never opens
// it (CVE-2019-9517): after WriteTimeout the stream is reset with CANCEL
// and its handler's write fails, so that it gives up what it holds (an
// upstream connection).
func TestZeroWindowStall(t *testing.T) {
	writeErr := make(chan error, 1)
	addr, _, _ := testServerWith(t, &Server{WriteTimeout: 50 * time.Millisecond, Handler: HandlerFunc(func(st *Stream) {
		_ = st.WriteHeader(200, false)
		_, err := st.Write(make([]byte, 2*outCap))
		writeErr <- err
	})})
	rc := dialRaw(t, addr)
	if err := rc.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0}); err != nil {
		t.Fatal(err)
	}
	rc.get(1, "/")
	if r := rc.until("RST_STREAM", rstOf(1)).(*http2.RSTStreamFrame); r.ErrCode != http2.ErrCodeCancel {
		t.Fatalf("RST_STREAM %v, want CANCEL", r.ErrCode)
	}
	if err := <-writeErr; !errors.Is(err, ErrStreamReset) {
		t.Fatalf("the handler's write failed with %v, want ErrStreamReset", err)
	}
}

// TestZeroWindowMemory opens many streams with a window of 0 whose
// handlers each try to send 1 MiB: ebb holds at most outCap of each
// response, not the responses.
func TestZeroWindowMemory(t *testing.T) {
	const streams = 100
	var pieces atomic.Int64
	progress := make(chan struct{}, 1)
	addr, _, _ := testServerWith(t, &Server{MaxConcurrentStreams: streams, Handler: HandlerFunc(func(st *Stream) {
		_ = st.WriteHeader(200, false)
		piece := make([]byte, 16<<10)
		for range 64 {
			if _, err := st.Write(piece); err != nil {
				return
			}
			pieces.Add(1)
			select {
			case progress <- struct{}{}:
			default:
			}
		}
	})})
	before := heapAfterGC()
	rc := dialRaw(t, addr)
	if err := rc.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0}); err != nil {
		t.Fatal(err)
	}
	for i := range uint32(streams) {
		rc.get(2*i+1, "/")
	}
	// Each handler gets outCap (two pieces) accepted, then waits.
	for pieces.Load() < streams*outCap/(16<<10) {
		select {
		case <-progress:
		case <-time.After(10 * time.Second):
			t.Fatalf("handlers wrote %d pieces, want %d", pieces.Load(), streams*outCap/(16<<10))
		}
	}
	held := int64(heapAfterGC()) - int64(before)
	// The buffers (outCap each), plus the handlers' pieces and stacks.
	if limit := int64(streams * (outCap + 32<<10)); held > limit {
		t.Fatalf("%d streams waiting on a closed window hold %d bytes, want at most %d", streams, held, limit)
	}
	if n := pieces.Load(); n > streams*outCap/(16<<10) {
		t.Fatalf("handlers wrote %d pieces into closed windows, want %d", n, streams*outCap/(16<<10))
	}
	rc.conn.Close()
}

// pipeServer serves one connection over net.Pipe, whose writes wait for
// the reader: a client that does not read stops ebb's writer at once, as
// a full socket buffer does. It returns the client's end, after the
// server's SETTINGS has been read and acknowledged.
func pipeServer(t *testing.T, s *Server) (client net.Conn, fr *http2.Framer, served <-chan struct{}) {
	t.Helper()
	cl, sv := net.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Serve(context.Background(), sv, nil)
	}()
	t.Cleanup(func() {
		cl.Close()
		<-done
	})
	fr = http2.NewFramer(cl, cl)
	wrote := make(chan struct{})
	go func() {
		defer close(wrote)
		_, _ = io.WriteString(cl, http2.ClientPreface)
		_ = fr.WriteSettings()
	}()
	defer func() { <-wrote }()
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatal(err)
		}
		if sf, ok := f.(*http2.SettingsFrame); ok && !sf.IsAck() {
			break
		}
	}
	return cl, fr, done
}

// TestControlFlood sends PINGs and SETTINGS, each asking for an answer,
// without reading the answers (CVE-2019-9512, CVE-2019-9515): the
// answers queued are bounded, and past the bound the connection ends.
func TestControlFlood(t *testing.T) {
	for _, tc := range []struct {
		name  string
		frame func(fr *http2.Framer) error
	}{
		{"PING", func(fr *http2.Framer) error { return fr.WritePing(false, [8]byte{1}) }},
		{"SETTINGS", func(fr *http2.Framer) error { return fr.WriteSettings() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, fr, served := pipeServer(t, &Server{Handler: okHandler()})
			// Each answer is 9 to 17 bytes: the bound is reached within
			// maxControl/9 of them.
			const flood = 4 * maxControl / 9
			sent := 0
			for ; sent < flood; sent++ {
				if tc.frame(fr) != nil {
					break
				}
			}
			if sent == flood {
				t.Fatalf("%d %s frames were read without their answers being read", flood, tc.name)
			}
			<-served
		})
	}
}

// TestEmptyFrameFlood sends frames that cost work and carry nothing
// (CVE-2019-9518): empty DATA frames, PRIORITY frames, frames of unknown
// types. Each flood ends the connection with ENHANCE_YOUR_CALM, while
// the same frames in the numbers real clients send are fine.
func TestEmptyFrameFlood(t *testing.T) {
	for _, tc := range []struct {
		name  string
		n     int
		frame func(fr *http2.Framer) error
	}{
		{"empty DATA", maxEmptyRun + 1, func(fr *http2.Framer) error { return fr.WriteData(1, false, nil) }},
		{"PRIORITY", 2*ignoredPerStream + 1, func(fr *http2.Framer) error {
			return fr.WritePriority(3, http2.PriorityParam{StreamDep: 1, Weight: 15})
		}},
		{"unknown type", 2*ignoredPerStream + 1, func(fr *http2.Framer) error { return fr.WriteRawFrame(0xfa, 0, 0, nil) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr, _, _ := testServer(t, HandlerFunc(func(st *Stream) { <-st.Context().Done() }))
			rc := dialRaw(t, addr)
			rc.headers(1, false, post...) // stream 1 earns its share of ignored frames
			// What real clients send is fine: a stream's frames and a few
			// more, then a request served.
			for range tc.n / 2 {
				if err := tc.frame(rc.fr); err != nil {
					t.Fatal(err)
				}
			}
			if err := rc.fr.WriteData(1, false, []byte("x")); err != nil {
				t.Fatal(err)
			}
			rc.get(5, "/")
			go func() {
				for range tc.n {
					if tc.frame(rc.fr) != nil {
						return
					}
				}
			}()
			if ga := rc.until("GOAWAY", isGoAway).(*http2.GoAwayFrame); ga.ErrCode != http2.ErrCodeEnhanceYourCalm {
				t.Fatalf("GOAWAY %v, want ENHANCE_YOUR_CALM", ga.ErrCode)
			} else if ga.LastStreamID != 5 {
				t.Fatalf("GOAWAY last stream %d, want 5: the request before the flood was not processed", ga.LastStreamID)
			}
		})
	}
}

// TestHPACKBomb sends a request whose small header block decodes to a
// huge header list: one large field put in the dynamic table, then
// referenced thousands of times, one byte each. The request is answered
// 431 without the list being built, and the connection goes on.
func TestHPACKBomb(t *testing.T) {
	served := make(chan int, 1)
	const limit = 64 << 10
	addr, _, _ := testServerWith(t, &Server{MaxHeaderBytes: limit, Handler: HandlerFunc(func(st *Stream) {
		served <- st.Fields().Len()
		reply(st, "ok")
	})})
	before := heapAfterGC()
	rc := dialRaw(t, addr)
	rc.hbuf.Reset()
	for _, f := range post {
		_ = rc.enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	_ = rc.enc.WriteField(hpack.HeaderField{Name: "x-bomb", Value: strings.Repeat("b", 3000)})
	first := rc.hbuf.Len()
	// Each further x-bomb is one byte: the index of the table's entry.
	for rc.hbuf.Len() < first+3*(16<<10) {
		_ = rc.enc.WriteField(hpack.HeaderField{Name: "x-bomb", Value: strings.Repeat("b", 3000)})
	}
	blk := rc.hbuf.Bytes()
	if n := (len(blk) - first) * 3032; n < 1000*limit {
		t.Fatalf("the bomb decodes to %d bytes only", n)
	}
	if err := rc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: blk[:16<<10], EndStream: true}); err != nil {
		t.Fatal(err)
	}
	for blk = blk[16<<10:]; len(blk) > 0; {
		n := min(len(blk), 16<<10)
		if err := rc.fr.WriteContinuation(1, n == len(blk), blk[:n]); err != nil {
			t.Fatal(err)
		}
		blk = blk[n:]
	}
	if s := status(t, rc.until("the answer", headersOf(1))); s != "431" {
		t.Fatalf("answered %s, want 431", s)
	}
	if held := int64(heapAfterGC()) - int64(before); held > 4*limit {
		t.Fatalf("the connection holds %d bytes after the bomb, want at most %d", held, 4*limit)
	}
	rc.get(3, "/after")
	rc.until("the next request's answer", endOf(3))
	if n := <-served; n != 0 {
		t.Fatalf("the next request had %d fields, want 0", n)
	}
}
