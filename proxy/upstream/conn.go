package upstream

import (
	"crypto/tls"
	"net"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/ebb-proxy/ebb/proxy/downstream"
	"github.com/ebb-proxy/ebb/proxy/events"
	"github.com/ebb-proxy/ebb/proxy/sock"
)

// BodyWatcher is told that a response body streamed to the client has
// ended, with the number of bytes read from it (the access log's
// response_bytes).
type BodyWatcher interface {
	BodyRelayed(n int64)
}

// WatchedBody is a streamed response body that tells a watcher of its
// end; the body streams of the HTTP/1 transport are.
type WatchedBody interface {
	// Watch makes w the body's watcher. It is called before the body is
	// read, on the goroutine that set the body.
	Watch(w BodyWatcher)
}

// CutBody is a streamed response body that an event stream's Cutter can
// end on an event boundary (see package proxy/events); the body streams
// of the HTTP/1 transport are.
type CutBody interface {
	// CutWith has the body end where c cuts it, and done called once the
	// body is closed (before the upstream connection is let go). It is
	// called before the body is read, on the goroutine that set it.
	CutWith(c *events.Cutter, done func())
	// Interrupt wakes a read of the body blocked waiting for the
	// upstream. It may be called from any goroutine until done.
	Interrupt()
}

// Conn is an upstream connection with what ebb needs to know about it.
// One exchange at a time uses it.
type Conn struct {
	net.Conn
	// tcp is the socket: Conn itself, or what a TLS connection runs on
	// (the checks of TCP_INFO and of an idle socket look at it).
	tcp  net.Conn
	sio  sock.IO // reads and writes Conn (see package sock)
	used bool    // it has carried a complete exchange
	sent int64   // bytes written to it
	// ackBase is the peer's acknowledged byte count (ackedBytes) right
	// after the connect, or -1 if unknown: later counts less ackBase are
	// the bytes of data the upstream's TCP stack received.
	ackBase       int64
	wrote         atomic.Bool   // the last operation was a write
	writeTimeout  time.Duration // bounds each write: a stalled upstream is let go
	writeDeadline downstream.WriteDeadline
	idle          idleCheck // before each reuse
}

// NewConn wraps a freshly connected upstream connection. writeTimeout,
// if positive, bounds each write.
func NewConn(nc net.Conn, writeTimeout time.Duration) *Conn {
	tcp := nc
	if tc, ok := nc.(*tls.Conn); ok {
		// Bytes acknowledged count TLS's records, never fewer than the
		// request's own: a request is still never taken for unreceived
		// when it was received. A record waiting on an idle socket (a
		// close_notify, a session ticket) makes it unusable, as any byte.
		tcp = tc.NetConn()
	}
	c := &Conn{Conn: nc, tcp: tcp, writeTimeout: writeTimeout, ackBase: ackedBytes(tcp)}
	c.sio.Init(nc)
	c.idle.init(tcp)
	return c
}

// Read yields the processor once before the first read after a write: the
// answer to what was just written is rarely there yet, and a read that
// finds nothing costs a system call (EAGAIN) before the goroutine parks.
// Under load, other goroutines run meanwhile and the read then finds data;
// alone, Gosched returns at once. It seldom chains: between two upstream
// writes the goroutine reads its client, which has rarely sent the next
// request yet, so it parks there, the run queues drain and the network is
// polled each round. Measured on one core at 64 connections, interleaved
// with a build without it (eleven pairs): a median 13 % more HTTP/1
// requests per second and 11 % less CPU per request, for a wider spread
// of latencies (p75 over p50 1.26 against 1.08; p99 a median 3 % higher,
// up to 1.7×), because with one network poll per round the order in
// which connections are served flips every round (bench/README.md, "What
// is left of the tail"). Client connections do not yield (see
// downstream.Conn.Read for why).
func (c *Conn) Read(p []byte) (int, error) {
	if c.wrote.Swap(false) {
		runtime.Gosched()
	}
	return c.sio.Read(p)
}

func (c *Conn) Write(p []byte) (int, error) {
	c.wrote.Store(true)
	if c.writeTimeout > 0 {
		if err := c.writeDeadline.Renew(c.Conn, c.writeTimeout); err != nil {
			return 0, err
		}
	}
	n, err := c.sio.Write(p)
	c.sent += int64(n)
	return n, err
}
