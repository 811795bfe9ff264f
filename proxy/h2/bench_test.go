package h2_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/ebb-proxy/ebb/config"
	"github.com/ebb-proxy/ebb/proxy/downstream"
	"github.com/ebb-proxy/ebb/proxy/h2"
	"github.com/ebb-proxy/ebb/proxy/internal/enginetest"
	"github.com/ebb-proxy/ebb/proxy/proxytest"
)

// BenchmarkStreamGet measures ebb's H2→H1 request path whole: a client on
// a loopback connection sends GETs one stream at a time (the header block
// indexed in HPACK's dynamic table, as clients send repeated requests),
// and ebb decodes it, routes, applies the header rules, exchanges with an
// HTTP/1 origin over a pooled connection and frames the answer. The client
// side allocates nothing, so allocs/op is the engine's: the figure the
// design holds at zero.
func BenchmarkStreamGet(b *testing.B) {
	origin := proxytest.RawOrigin(b, []byte(proxytest.BenchResponse))
	runStreamGet(b, enginetest.New(b, nil, origin), "/index.html?q=1")
}

// runStreamGet measures GETs of path, one stream at a time, through the
// HTTP/2 engine over e.
func runStreamGet(b *testing.B, e *enginetest.Engine, path string) {
	cl := startBench(b, &h2.Server{Handler: h2.Forwarder(e.Listener)}, e.Registry)
	fields := [][2]string{
		{":method", "GET"}, {":scheme", "http"}, {":authority", "example.com"},
		{":path", path}, {"user-agent", "bench"}, {"accept", "*/*"},
	}
	// The first request fills the client's dynamic table; every later
	// one is the same few indexed fields.
	first, again := cl.blocks(fields)
	if status, n := cl.roundTrip(first, true); status != 200 || n != 64 {
		b.Fatalf("got %d with %d bytes", status, n)
	}
	for range 100 {
		if _, n := cl.roundTrip(again, false); n != 64 {
			b.Fatalf("got %d body bytes", n)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, n := cl.roundTrip(again, false); n != 64 {
			b.Fatalf("got %d body bytes", n)
		}
	}
}

// benchClient is an HTTP/2 client that allocates nothing per request: it
// writes prepared HEADERS frames and reads frames by their headers.
type benchClient struct {
	tb   testing.TB
	conn net.Conn
	br   *bufio.Reader
	id   uint32
	hdr  [9]byte
	out  []byte
	recv int64 // DATA bytes not credited back yet
	dec  *hpack.Decoder
	st   int
}

// startBench serves srv on one loopback connection and returns its client.
func startBench(tb testing.TB, srv *h2.Server, reg *downstream.Registry) *benchClient {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		nc, err := ln.Accept()
		ln.Close()
		if err != nil {
			return
		}
		dc := reg.Track(nc, "bench", true, nil)
		srv.Serve(h2.WithConn(context.Background(), dc), dc, nil)
	}()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		conn.Close()
		<-done
	})
	cl := &benchClient{tb: tb, conn: conn, br: bufio.NewReader(conn), id: 1}
	cl.dec = hpack.NewDecoder(4096, func(f hpack.HeaderField) {
		if f.Name == ":status" {
			cl.st = 0
			for _, c := range []byte(f.Value) {
				cl.st = cl.st*10 + int(c-'0')
			}
		}
	})
	var buf bytes.Buffer
	buf.WriteString(http2.ClientPreface)
	fr := http2.NewFramer(&buf, nil)
	_ = fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 30})
	_ = fr.WriteWindowUpdate(0, 1<<30)
	if _, err := conn.Write(buf.Bytes()); err != nil {
		tb.Fatal(err)
	}
	for {
		typ, flags, _, n := cl.frame()
		if _, err := cl.br.Discard(n); err != nil {
			tb.Fatal(err)
		}
		if typ == http2.FrameSettings && flags&http2.FlagSettingsAck == 0 {
			break
		}
	}
	buf.Reset()
	_ = fr.WriteSettingsAck()
	if _, err := conn.Write(buf.Bytes()); err != nil {
		tb.Fatal(err)
	}
	return cl
}

// blocks returns the header block of the first request with fields, which
// adds them to the dynamic table, and that of the requests after it.
func (cl *benchClient) blocks(fields [][2]string) (first, again []byte) {
	var buf bytes.Buffer
	enc := hpack.NewEncoder(&buf)
	for _, f := range fields {
		_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	first = bytes.Clone(buf.Bytes())
	buf.Reset()
	for _, f := range fields {
		_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	return first, bytes.Clone(buf.Bytes())
}

// frame reads a frame header.
func (cl *benchClient) frame() (typ http2.FrameType, flags http2.Flags, id uint32, n int) {
	if _, err := io.ReadFull(cl.br, cl.hdr[:]); err != nil {
		cl.tb.Fatal(err)
	}
	h := cl.hdr
	n = int(h[0])<<16 | int(h[1])<<8 | int(h[2])
	return http2.FrameType(h[3]), http2.Flags(h[4]), binary.BigEndian.Uint32(h[5:]) & (1<<31 - 1), n
}

// roundTrip sends one request with the header block blk and returns the
// response's status (when decode: otherwise 0) and body size.
func (cl *benchClient) roundTrip(blk []byte, decode bool) (status, body int) {
	id := cl.id
	cl.id += 2
	cl.out = append(cl.out[:0], byte(len(blk)>>16), byte(len(blk)>>8), byte(len(blk)),
		byte(http2.FrameHeaders), byte(http2.FlagHeadersEndHeaders|http2.FlagHeadersEndStream),
		byte(id>>24), byte(id>>16), byte(id>>8), byte(id))
	cl.out = append(cl.out, blk...)
	if cl.recv > 1<<29 {
		// Credit the connection's window back now and then.
		cl.out = append(cl.out, 0, 0, 4, byte(http2.FrameWindowUpdate), 0, 0, 0, 0, 0)
		cl.out = binary.BigEndian.AppendUint32(cl.out, uint32(cl.recv))
		cl.recv = 0
	}
	if _, err := cl.conn.Write(cl.out); err != nil {
		cl.tb.Fatal(err)
	}
	cl.st = 0
	for {
		typ, flags, fid, n := cl.frame()
		if fid != id {
			if _, err := cl.br.Discard(n); err != nil {
				cl.tb.Fatal(err)
			}
			continue
		}
		switch typ {
		case http2.FrameHeaders:
			if decode {
				p := make([]byte, n)
				if _, err := io.ReadFull(cl.br, p); err != nil {
					cl.tb.Fatal(err)
				}
				if _, err := cl.dec.Write(p); err != nil {
					cl.tb.Fatal(err)
				}
				n = 0
			}
		case http2.FrameData:
			body += n
			cl.recv += int64(n)
		case http2.FrameRSTStream:
			cl.tb.Fatalf("stream %d reset", id)
		}
		if _, err := cl.br.Discard(n); err != nil {
			cl.tb.Fatal(err)
		}
		if flags&http2.FlagDataEndStream != 0 {
			return cl.st, body
		}
	}
}

// BenchmarkStreamGetH2C is BenchmarkStreamGet to an h2c upstream: ebb's
// HTTP/2 client, the request's fields going from the client's header
// block to the upstream's without net/http's types. The origin plays
// HTTP/2 frame by frame with a prepared answer; what it allocates (x/net's
// frame reading) counts in allocs/op too.
func BenchmarkStreamGetH2C(b *testing.B) {
	var blk []byte
	origin := proxytest.H2CFrames(b, false, func(c *proxytest.H2CConn, f http2.Frame) bool {
		if h, ok := f.(*http2.HeadersFrame); ok {
			if blk == nil {
				blk = bytes.Clone(c.Block([][2]string{{":status", "200"}, {"content-type", "text/plain"}, {"content-length", "64"}}))
			}
			c.Fr.WriteHeaders(http2.HeadersFrameParam{StreamID: h.StreamID, BlockFragment: blk, EndHeaders: true})
			c.Fr.WriteData(h.StreamID, true, benchBody[:])
		}
		return true
	})
	h2c := func(c *config.Cluster) { c.Protocol = config.ProtocolH2C }
	runStreamGet(b, enginetest.New(b, h2c, origin), "/index.html?q=1")
}

var benchBody [64]byte
