package e2e

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// TestDrainHTTP2TwoPhaseGoAway stops ebb (SIGTERM) with an HTTP/2 stream
// in flight and watches the connection frame by frame: the first GOAWAY
// (last stream 2^31-1) and a PING; a stream opened before the client
// acknowledges the PING is still served; after the ACK, the final GOAWAY
// names that stream as the last; the stream in flight finishes; ebb exits 0.
func TestDrainHTTP2TwoPhaseGoAway(t *testing.T) {
	t.Parallel()
	origin, slow := gatedOrigin(t, "/slow", func(w http.ResponseWriter, _ *http.Request, opened bool) {
		if opened {
			io.WriteString(w, "finished\n")
		}
	})
	e := startEbb(t, singleClusterYAML(hostPort(origin)))

	c, err := net.Dial("tcp", e.addr("public"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fr := http2.NewFramer(c, c)
	var hbuf bytes.Buffer
	enc := hpack.NewEncoder(&hbuf)
	open := func(id uint32, path string) {
		hbuf.Reset()
		for _, f := range [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", "example.com"}, {":path", path}} {
			enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hbuf.Bytes(), EndStream: true, EndHeaders: true}); err != nil {
			t.Fatal(err)
		}
	}
	// next returns the next frame of interest: GOAWAY, PING, or the end of
	// a stream (a DATA or HEADERS frame with END_STREAM).
	next := func(what string) http2.Frame {
		t.Helper()
		for {
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			f, err := fr.ReadFrame()
			if err != nil {
				t.Fatalf("waiting for %s: %v", what, err)
			}
			switch f := f.(type) {
			case *http2.GoAwayFrame, *http2.PingFrame:
				return f
			case *http2.DataFrame:
				if f.StreamEnded() {
					return f
				}
			case *http2.HeadersFrame:
				if f.StreamEnded() {
					return f
				}
			case *http2.SettingsFrame:
				if !f.IsAck() {
					fr.WriteSettingsAck()
				}
			}
		}
	}

	io.WriteString(c, http2.ClientPreface)
	fr.WriteSettings()
	open(1, "/slow")
	recv(t, slow.arrived, "the request to reach the origin")

	e.signal(syscall.SIGTERM)
	ga, ok := next("the first GOAWAY").(*http2.GoAwayFrame)
	if !ok || ga.LastStreamID != 1<<31-1 || ga.ErrCode != http2.ErrCodeNo {
		t.Fatalf("first frame after SIGTERM: %v; want GOAWAY last=2147483647 NO_ERROR", ga)
	}
	ping, ok := next("the PING").(*http2.PingFrame)
	if !ok || ping.IsAck() {
		t.Fatalf("after the first GOAWAY: %v; want a PING", ping)
	}
	open(3, "/fast")
	if f := next("stream 3's end"); f.Header().StreamID != 3 {
		t.Fatalf("got %v; want stream 3 served", f)
	}
	fr.WritePing(true, ping.Data)
	final, ok := next("the final GOAWAY").(*http2.GoAwayFrame)
	if !ok || final.LastStreamID != 3 || final.ErrCode != http2.ErrCodeNo {
		t.Fatalf("after the PING ACK: %v; want GOAWAY last=3 NO_ERROR", final)
	}
	slow.open()
	if f := next("stream 1's end"); f.Header().StreamID != 1 {
		t.Fatalf("got %v; want stream 1 finished", f)
	}
	if code := e.exit(); code != 0 {
		t.Fatalf("exit status %d, want 0", code)
	}
}
