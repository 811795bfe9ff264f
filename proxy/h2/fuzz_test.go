package h2

import (
	"bytes"
	"context"
	"io"
	"net"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// FuzzConn feeds a connection the client preface and then arbitrary
// bytes, as frames or not: the engine must not panic, must end the
// connection once the client has gone, and must leave no goroutine
// behind (the package's TestMain checks). fuzzSeeds makes the seeds,
// conversations of every frame type, well formed and not; the corpus in
// testdata/fuzz/FuzzConn holds what fuzzing from them found that reaches
// further.
func FuzzConn(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) > 256<<10 {
			return
		}
		srv := &Server{MaxHeaderBytes: 16 << 10, MaxConcurrentStreams: 16, Handler: HandlerFunc(func(st *Stream) {
			_, err := io.Copy(io.Discard, st.Body())
			if err != nil {
				st.Reset(http2.ErrCodeCancel)
				return
			}
			st.AddHeaderString("x-path", string(st.Path()))
			if st.WriteHeader(200, false) == nil {
				_, _ = st.Write(bytes.Repeat([]byte("ok"), 1<<10))
				st.AddHeaderString("x-trailer", "1")
				_ = st.End()
			}
		})}
		cl, sv := net.Pipe()
		served := make(chan struct{})
		go func() {
			defer close(served)
			srv.Serve(context.Background(), sv, nil)
		}()
		drained := make(chan struct{})
		go func() {
			defer close(drained)
			_, _ = io.Copy(io.Discard, cl)
		}()
		_, _ = io.WriteString(cl, http2.ClientPreface)
		_, _ = cl.Write(in)
		cl.Close()
		<-served
		<-drained
	})
}

// fuzzSeeds returns client conversations (after the preface) that reach
// every part of the engine.
func fuzzSeeds() [][]byte {
	var out [][]byte
	var buf, hb bytes.Buffer
	fr := http2.NewFramer(&buf, nil)
	fr.AllowIllegalWrites = true
	enc := hpack.NewEncoder(&hb)
	block := func(fields ...string) []byte {
		hb.Reset()
		for i := 0; i+1 < len(fields); i += 2 {
			_ = enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
		}
		return bytes.Clone(hb.Bytes())
	}
	get := []string{":method", "GET", ":scheme", "http", ":authority", "example.com", ":path", "/"}
	postFields := []string{":method", "POST", ":scheme", "https", ":authority", "example.com", ":path", "/up?q=1", "content-length", "5", "trailer", "x-t"}
	seed := func(write func()) {
		buf.Reset()
		enc = hpack.NewEncoder(&hb)
		_ = fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 20})
		write()
		out = append(out, bytes.Clone(buf.Bytes()))
	}
	seed(func() {
		_ = fr.WriteSettingsAck()
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block(get...), EndStream: true, EndHeaders: true})
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: block(get...), EndStream: true, EndHeaders: true})
		_ = fr.WriteWindowUpdate(0, 1<<20)
		_ = fr.WritePing(false, [8]byte{1, 2, 3})
		_ = fr.WriteGoAway(3, http2.ErrCodeNo, nil)
	})
	seed(func() {
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block(postFields...), EndHeaders: true, PadLength: 3,
			Priority: http2.PriorityParam{StreamDep: 0, Weight: 10}})
		_ = fr.WriteDataPadded(1, false, []byte("hel"), []byte{0, 0})
		_ = fr.WriteData(1, false, []byte("lo"))
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block("x-t", "v"), EndStream: true, EndHeaders: true})
	})
	seed(func() {
		blk := block(append(get, "cookie", "a=1", "cookie", "b=2", "x-long", string(bytes.Repeat([]byte("v"), 3000)))...)
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: blk[:10]})
		_ = fr.WriteContinuation(1, false, blk[10:100])
		_ = fr.WriteContinuation(1, true, blk[100:])
		_ = fr.WriteRSTStream(1, http2.ErrCodeCancel)
		_ = fr.WritePriority(5, http2.PriorityParam{StreamDep: 1, Weight: 1})
		_ = fr.WriteRawFrame(0xfa, 0, 0, []byte("unknown"))
	})
	seed(func() {
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block(":method", "POST", ":scheme", "http", ":path", "/", "expect", "100-continue"), EndHeaders: true})
		_ = fr.WriteData(1, false, nil)
		_ = fr.WriteData(1, true, []byte("body"))
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 2, BlockFragment: block(get...), EndStream: true, EndHeaders: true})
	})
	seed(func() {
		_ = fr.WriteSettings(http2.Setting{ID: http2.SettingMaxFrameSize, Val: 1 << 14}, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block(get...), EndStream: true, EndHeaders: true})
		_ = fr.WriteWindowUpdate(1, 10)
		_ = fr.WriteWindowUpdate(1, 1<<31-1)
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: []byte{0xff, 0xff, 0xff}, EndStream: true, EndHeaders: true})
	})
	return out
}
