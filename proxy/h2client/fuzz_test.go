package h2client_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/ebb-proxy/ebb/proxy/h2client"
)

// frames returns what write writes with a framer, for seeds.
func frames(write func(fr *http2.Framer, blk func(...string) []byte)) []byte {
	var out, hb bytes.Buffer
	fr := http2.NewFramer(&out, nil)
	enc := hpack.NewEncoder(&hb)
	write(fr, func(kv ...string) []byte {
		hb.Reset()
		for i := 0; i+1 < len(kv); i += 2 {
			_ = enc.WriteField(hpack.HeaderField{Name: kv[i], Value: kv[i+1]})
		}
		return bytes.Clone(hb.Bytes())
	})
	return out.Bytes()
}

// FuzzResponseFrames feeds the client side whatever an upstream may send
// after its SETTINGS: every input ends with the exchange answered or
// failed, never a panic or a hang, and the body read to an end.
func FuzzResponseFrames(f *testing.F) {
	f.Add(frames(func(fr *http2.Framer, blk func(...string) []byte) {
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: blk(":status", "200", "content-length", "2"), EndHeaders: true})
		fr.WriteData(1, true, []byte("ok"))
	}))
	f.Add(frames(func(fr *http2.Framer, blk func(...string) []byte) {
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: blk(":status", "103", "link", "</a>"), EndHeaders: true})
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: blk(":status", "200"), EndHeaders: true})
		fr.WriteData(1, false, []byte("x"))
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: blk("grpc-status", "0"), EndHeaders: true, EndStream: true})
	}))
	f.Add(frames(func(fr *http2.Framer, blk func(...string) []byte) {
		fr.WriteGoAway(0, http2.ErrCodeNo, nil)
	}))
	f.Add(frames(func(fr *http2.Framer, blk func(...string) []byte) {
		fr.WriteRSTStream(1, http2.ErrCodeRefusedStream)
	}))
	f.Add(frames(func(fr *http2.Framer, blk func(...string) []byte) {
		fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
		fr.WritePing(false, [8]byte{1})
		fr.WriteWindowUpdate(0, 1<<31-1)
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: blk(":status", "200")[:1]})
		fr.WriteContinuation(1, false, []byte{0x88})
		fr.WriteContinuation(1, false, nil)
	}))
	f.Add(frames(func(fr *http2.Framer, blk func(...string) []byte) {
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: blk(":status", "200"), EndHeaders: true})
		fr.WriteData(1, false, make([]byte, 16384))
		fr.WriteData(3, false, []byte("x"))
	}))
	f.Add([]byte("HTTP/1.1 200 OK\r\n\r\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		p := h2client.NewPool(h2client.Config{
			Dial: func(context.Context) (net.Conn, error) {
				c, s := net.Pipe()
				go serveBytes(s, in)
				return c, nil
			},
			ConnectTimeout:  time.Second,
			ResponseTimeout: time.Second,
			MaxHeaderBytes:  4096,
		})
		defer p.Close()
		req, _ := http.NewRequest("GET", "http://upstream/", nil)
		resp, err := p.RoundTrip(req)
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	})
}

// serveBytes plays an upstream on a pipe: it reads what the client sends
// (which a pipe needs, to let the client's writes through), sends its
// SETTINGS, then in, then closes.
func serveBytes(s net.Conn, in []byte) {
	go func() { _, _ = io.Copy(io.Discard, s) }()
	fr := http2.NewFramer(s, nil)
	_ = fr.WriteSettings()
	_, _ = s.Write(in)
	s.Close()
}
