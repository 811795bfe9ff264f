package h2client_test

import (
	"bufio"
	"bytes"
	"context"
	"net"
	"runtime"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/ebb-proxy/ebb/proxy/h2client"
	"github.com/ebb-proxy/ebb/proxy/proxytest"
)

// BenchmarkIdleConnMemory reports what an idle upstream HTTP/2 connection
// costs ebb in memory (heap and goroutine stacks, in bytes per
// connection: B/conn), beyond its socket: n connections opened by as many
// pools, each having carried one exchange, against n connections that
// made the same exchange by hand and hold nothing but the socket. The
// origin is the same for both, in the process, so its share cancels out.
func BenchmarkIdleConnMemory(b *testing.B) {
	const n = 200
	origin := proxytest.H2CFrames(b, false, func(c *proxytest.H2CConn, f http2.Frame) bool {
		if h, ok := f.(*http2.HeadersFrame); ok {
			c.Fr.WriteHeaders(http2.HeadersFrameParam{StreamID: h.StreamID, BlockFragment: c.Block([][2]string{{":status", "204"}}), EndStream: true, EndHeaders: true})
		}
		return true
	})
	var perConn float64
	for b.Loop() {
		raw := inUse(b, func() func() { return rawConns(b, origin, n) })
		pools := inUse(b, func() func() { return clientConns(b, origin, n) })
		perConn = (float64(pools) - float64(raw)) / n
	}
	b.ReportMetric(perConn, "B/conn")
}

// inUse returns the heap and stack memory held while what open opened is
// open (open returns its close).
func inUse(b *testing.B, open func() func()) uint64 {
	b.Helper()
	before := memInUse()
	closeAll := open()
	after := memInUse()
	closeAll()
	if after < before {
		return 0
	}
	return after - before
}

func memInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse + m.StackInuse
}

// clientConns opens n pools' connections, each with one exchange done.
func clientConns(b *testing.B, addr string, n int) func() {
	pools := make([]*h2client.Pool, n)
	for i := range pools {
		pools[i] = h2client.NewPool(h2client.Config{
			Dial: func(ctx context.Context) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "tcp", addr)
			},
			ResponseTimeout: 10 * time.Second,
		})
		resp, err := pools[i].RoundTrip(request(b, "GET", addr, "/", nil))
		if err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
	}
	return func() {
		for _, p := range pools {
			p.Close()
		}
	}
}

// rawConns opens n connections that make the same exchange by hand.
func rawConns(b *testing.B, addr string, n int) func() {
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", addr}, {":path", "/"}} {
		_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	conns := make([]net.Conn, n)
	for i := range conns {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			b.Fatal(err)
		}
		conns[i] = c
		fr := http2.NewFramer(c, bufio.NewReader(c))
		c.Write([]byte(http2.ClientPreface))
		fr.WriteSettings()
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndStream: true, EndHeaders: true})
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				b.Fatal(err)
			}
			if h, ok := f.(*http2.HeadersFrame); ok && h.StreamEnded() {
				break
			}
		}
	}
	return func() {
		for _, c := range conns {
			c.Close()
		}
	}
}
