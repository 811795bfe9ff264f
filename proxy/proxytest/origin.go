// Package proxytest holds what the behaviour tests of ebb share, in the
// process (the proxy packages) and against the binary (e2e), as
// net/http/httptest does for net/http:
// origins speaking raw HTTP/1.1 over loopback TCP, and the cluster
// configuration the loader's defaults would give.
package proxytest

import (
	"bufio"
	"bytes"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ebb-proxy/ebb/config"
)

// Origin is an upstream speaking raw HTTP/1.1 over TCP on 127.0.0.1:
// serve is called for each accepted connection, in a goroutine, and the
// connection is closed when it returns. The origin stops with the test,
// which waits for every goroutine it started.
func Origin(tb testing.TB, serve func(c net.Conn, br *bufio.Reader)) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	var wg sync.WaitGroup
	tb.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				serve(c, bufio.NewReader(c))
			})
		}
	})
	return ln.Addr().String()
}

// ReadHeader consumes one request header (the tests' requests have no
// body, or one the origin ignores), reporting false when the connection
// ended first.
func ReadHeader(br *bufio.Reader) bool {
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return false
		}
		if len(bytes.TrimSpace(line)) == 0 {
			return true
		}
	}
}

// BenchResponse is what the engines' benchmarks have the origin answer: a
// 64-byte body, and "Connection: keep-alive", as most servers say, which
// ebb must strip on every response.
const BenchResponse = "HTTP/1.1 200 OK\r\nServer: raw\r\nContent-Type: text/plain\r\nConnection: keep-alive\r\nContent-Length: 64\r\n\r\n" +
	"0123456789012345678901234567890123456789012345678901234567890123"

// RawOrigin answers every request with fixed bytes, allocating nothing, so
// that a benchmark's allocations are ebb's alone.
func RawOrigin(tb testing.TB, response []byte) string {
	return Origin(tb, func(c net.Conn, br *bufio.Reader) {
		for ReadHeader(br) {
			if _, err := c.Write(response); err != nil {
				return
			}
		}
	})
}

// RefusedAddr returns a loopback address nothing listens on.
func RefusedAddr(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// Cluster returns the configuration of a cluster "origin" of the given
// endpoints, with the element defaults the loader would apply and short
// timeouts.
func Cluster(origins ...string) config.Cluster {
	c := config.Cluster{Name: "origin", Discovery: config.Discovery{Static: origins}}
	c.Balancer = config.BalancerP2C
	c.MaxConnsPerEndpoint = 16
	c.Timeouts = config.ClusterTimeouts{Connect: time.Second, Response: 5 * time.Second, Idle: time.Minute}
	c.Retries = config.Retries{Attempts: config.DefaultRetryAttempts, Budget: config.DefaultRetryBudget, BufferBody: config.DefaultRetryBufferBody}
	return c
}

// Listener returns the configuration of a listener "bench" on
// 127.0.0.1:0 routing every request to cluster "origin", with the
// element defaults the loader would apply.
func Listener() config.Listener {
	l := config.Listener{Name: "bench", Address: "127.0.0.1:0",
		Routes: []config.Route{{Match: config.Match{PathPrefix: "/"}, Cluster: "origin"}}}
	l.Limits.MaxHeaderBytes = config.DefaultMaxHeaderBytes
	l.Timeouts = config.ListenerTimeouts{Header: time.Second, Idle: time.Minute, Write: time.Minute}
	return l
}

// Discard is a logger that drops everything.
func Discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// VerifyNoLeaks runs a package's tests and then fails if any goroutine
// they started is still running (go.uber.org/goleak). Three of fasthttp's
// own goroutines are not ebb's to end: a HostClient's cleaner of idle
// connections and a server's cleaner of idle workers each sleep out their
// interval (time.Sleep, not a select on the stop) before they see they
// are done, and the server's date updater runs for the life of the
// process.
func VerifyNoLeaks(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*HostClient).connsCleaner"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
	)
}
