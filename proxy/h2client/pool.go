// Package h2client is ebb's client side of HTTP/2 (RFC 9113): the pool of
// connections to one upstream endpoint of an h2c or h2 cluster, and the
// exchanges on them. It is written on x/net's frame layer (http2.Framer)
// and HPACK decoder, and shares with the server engine (package proxy/h2)
// what package proxy/h2/wire holds: the stateless HPACK encoding, the
// field list header blocks are decoded into, the checks of fields, the
// framing of header blocks.
//
// A connection has two goroutines of its own, and none per stream:
//
//   - the read loop reads every frame and processes it there: settings,
//     flow control, PING, GOAWAY, header blocks decoded straight into the
//     stream's field list, body bytes appended to the stream's buffer;
//   - the writer writes what the others framed into the connection's
//     output buffer, with one system call per batch.
//
// A request's HEADERS (and its body, when the caller has it whole) are
// framed by the caller's goroutine, which then waits for the response
// head; the response body is read by whoever reads it (the relay to the
// client). A request body that streams in from the client is written by a
// goroutine of its own (see Stream.Write), what a waiting request needs.
// Everything the goroutines share is guarded by one mutex per connection;
// the pool has its own for the list of connections.
//
// What an upstream does when it goes away is visible here, so that ebb
// drains towards an upstream as it drains its clients: a stream above the
// last stream id of an upstream's GOAWAY, or refused with REFUSED_STREAM,
// fails with an error wrapping upstream.ErrResend (the upstream did not
// process it: the retry policy sends it again whatever its method), and
// new streams go to another connection, opened if needed.
package h2client

import (
	"context"
	"errors"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/ebb-proxy/ebb/proxy/upstream"
)

// Config is what a Pool needs to know of its cluster.
type Config struct {
	// Dial opens a connection to the endpoint, ready for HTTP/2: for h2,
	// the TLS handshake done and "h2" negotiated.
	Dial func(ctx context.Context) (net.Conn, error)
	// MaxConns bounds the pool's connections (0: no bound).
	MaxConns int
	// ConnectTimeout bounds the HTTP/2 handshake of a new connection, and
	// the wait for a stream when every connection allowed is full.
	ConnectTimeout time.Duration
	// ResponseTimeout bounds the wait for a response head (0: none).
	ResponseTimeout time.Duration
	// IdleTimeout closes a connection that carried no stream that long
	// (0: never).
	IdleTimeout time.Duration
	// PingAfter is how long a connection with streams may be silent
	// before a PING asks whether it is alive; PingTimeout how long its
	// answer may take before the connection is taken for dead.
	PingAfter, PingTimeout time.Duration
	// MaxHeaderBytes bounds a response's header block, as decoded (names
	// and values, plus 32 bytes per field: RFC 9113 §6.5.2).
	MaxHeaderBytes int
	// StreamWindow is the flow-control window of each stream: the most
	// of a response body ebb holds for a reader that does not read.
	StreamWindow int32
	// ConnWindow is the connection's flow-control window.
	ConnWindow int32
}

// Defaults for what Config leaves at zero.
const (
	defaultStreamWindow   = 256 << 10
	defaultConnWindow     = 1 << 20
	defaultMaxHeaderBytes = 16 << 10
	defaultConnectTimeout = 5 * time.Second
)

// ErrOverloaded is the error of a request that found every connection the
// pool may open full, and no stream freed within the connect timeout.
var ErrOverloaded = &upstream.Error{Kind: upstream.KindOverloaded, Err: errors.New("every connection to the upstream endpoint is at its stream limit")}

// Pool holds the connections to one endpoint: streams are multiplexed on
// a connection up to the peer's SETTINGS_MAX_CONCURRENT_STREAMS, a new
// connection is opened (by the request that needs it) when every one is
// full, up to MaxConns. Safe for concurrent use.
type Pool struct {
	cfg Config

	mu sync.Mutex
	// Guarded by mu.
	conns   []*conn
	dialing int
	// freed is closed (and replaced) when a stream slot may have become
	// free or a connection was added or failed, if a request waits for a
	// slot (waiting): they look again.
	freed   chan struct{}
	waiting int
}

// NewPool returns a pool for the endpoint cfg.Dial reaches.
func NewPool(cfg Config) *Pool {
	if cfg.StreamWindow <= 0 {
		cfg.StreamWindow = defaultStreamWindow
	}
	if cfg.ConnWindow < cfg.StreamWindow {
		cfg.ConnWindow = max(defaultConnWindow, cfg.StreamWindow)
	}
	if cfg.MaxHeaderBytes <= 0 {
		cfg.MaxHeaderBytes = defaultMaxHeaderBytes
	}
	if cfg.ConnectTimeout <= 0 {
		cfg.ConnectTimeout = defaultConnectTimeout
	}
	return &Pool{cfg: cfg, freed: make(chan struct{})}
}

// acquire returns a connection with a stream slot reserved for the
// caller (who opens a stream with it or gives it back), opening one if
// every connection is full and the pool may grow. fresh reports a
// connection this call opened.
func (p *Pool) acquire(ctx context.Context) (c *conn, fresh bool, err error) {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		p.mu.Lock()
		for _, c := range p.conns {
			if c.reserveLocked() {
				p.mu.Unlock()
				return c, false, nil
			}
		}
		if p.dialing == 0 && (p.cfg.MaxConns <= 0 || len(p.conns) < p.cfg.MaxConns) {
			p.dialing++
			p.mu.Unlock()
			c, err := p.dial(ctx)
			p.mu.Lock()
			p.dialing--
			if err == nil {
				p.conns = append(p.conns, c)
				c.reserveLocked() // a fresh connection has room for one
			}
			p.wakeLocked()
			p.mu.Unlock()
			return c, true, err
		}
		// A connection is being opened, or none more is allowed: wait
		// for it, or for a stream to end.
		freed := p.freed
		p.waiting++
		p.mu.Unlock()
		if timer == nil {
			timer = time.NewTimer(p.cfg.ConnectTimeout)
		}
		var err error
		select {
		case <-freed:
		case <-ctx.Done():
			err = ctx.Err()
		case <-timer.C:
			err = ErrOverloaded
		}
		p.mu.Lock()
		p.waiting--
		p.mu.Unlock()
		if err != nil {
			return nil, false, err
		}
	}
}

// wakeLocked tells the requests waiting for a slot to look again.
func (p *Pool) wakeLocked() {
	if p.waiting > 0 {
		close(p.freed)
		p.freed = make(chan struct{})
	}
}

// release gives back a slot of c (a stream ended, or a reservation was
// not used).
func (p *Pool) release(c *conn) {
	p.mu.Lock()
	c.slots--
	p.wakeLocked()
	p.mu.Unlock()
}

// removeLocked takes c out of the pool, if there: it failed, went away,
// or is closing.
func (p *Pool) removeLocked(c *conn) {
	if i := slices.Index(p.conns, c); i >= 0 {
		p.conns = slices.Delete(p.conns, i, i+1)
		p.wakeLocked()
	}
}

// CloseIdle closes the connections that carry no stream (with a GOAWAY);
// those busy take no new stream and close once their streams are done.
// The pool itself stays usable: a request sent later opens a new
// connection.
func (p *Pool) CloseIdle() {
	for _, c := range p.takeAll() {
		c.retire()
	}
}

// takeAll takes every connection out of the pool and returns them.
func (p *Pool) takeAll() []*conn {
	p.mu.Lock()
	defer p.mu.Unlock()
	conns := append([]*conn(nil), p.conns...)
	p.conns = p.conns[:0]
	p.wakeLocked()
	return conns
}

// Close closes every connection of the pool at once, streams in flight
// failing, and waits for their goroutines to return. Connections that
// left the pool earlier (gone away, retired) end on their own.
func (p *Pool) Close() {
	for _, c := range p.takeAll() {
		c.fail(errPoolClosed)
		c.nc.Close()
		c.wait()
	}
}

// Conns returns how many connections the pool holds.
func (p *Pool) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

var errPoolClosed = errors.New("h2client: pool closed")
