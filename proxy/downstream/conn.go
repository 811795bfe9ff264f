package downstream

import (
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ebb-proxy/ebb/proxy/sock"
)

// Protocol is what a downstream connection speaks, once known.
type Protocol int32

// Protocols.
const (
	ProtoUnknown Protocol = iota
	ProtoHTTP1
	ProtoHTTP2
	// ProtoWebSocket: an HTTP/1 connection upgraded to a WebSocket, its
	// frames relayed to an upstream (a tunnel).
	ProtoWebSocket
	numProtocols
)

func (p Protocol) String() string {
	switch p {
	case ProtoHTTP1:
		return "http1"
	case ProtoHTTP2:
		return "http2"
	case ProtoWebSocket:
		return "websocket"
	}
	return "unknown"
}

// State is where a downstream connection is in its life.
type State int32

// States. Upgraded connections (WebSocket tunnels) have left HTTP: the
// drain tells them to go away in their own protocol (Conn.Tunnel).
const (
	StateNew State = iota
	StateActive
	StateIdle
	StateUpgraded
	StateClosed
	numStates
)

func (s State) String() string {
	switch s {
	case StateNew:
		return "new"
	case StateActive:
		return "active"
	case StateIdle:
		return "idle"
	case StateUpgraded:
		return "upgraded"
	}
	return "closed"
}

// Conn is a downstream connection known to the Registry. It wraps the
// accepted net.Conn; engines serve the Conn itself so that every byte and
// the final Close pass through here.
//
// Listener and ClientIP are read-only after Track. Scratch belongs to the
// goroutine serving the connection's current request (HTTP/1 serves one
// request at a time per connection). proto and state are atomics because the
// registry and metrics read them from other goroutines.
type Conn struct {
	net.Conn

	// Listener is the name of the listener that accepted the connection.
	Listener string
	// ClientIP is the peer's address, formatted once for X-Forwarded-For.
	ClientIP []byte
	// Peer is the peer's IP address (zero when not TCP), for the
	// listener's trusted_proxies.
	Peer netip.Addr
	// Scratch is a per-connection buffer for building header values without
	// allocating on every request.
	Scratch []byte
	// WriteTimeout, when set before the connection is served, bounds each
	// write: a peer that stops reading cannot hold the connection forever.
	WriteTimeout time.Duration
	// Skew, when set before the connection is served, is added to every
	// read deadline set on the connection (not to a zero one). Listeners
	// give each connection a random skew under a twentieth of their
	// header timeout, so that connections opened together, as an
	// attack's are, time out spread over that span: cut all at once,
	// a thousand of them held the engine for tens of milliseconds,
	// stalling every other client. A deadline meant to cut a read short
	// at once is set far in the past, where a skew leaves it.
	Skew time.Duration
	// Drainable is false for connections of outbound listeners (the local
	// application's egress), which the drain leaves alone.
	Drainable bool

	reg     *Registry
	sio     sock.IO // reads and writes Conn (see package sock)
	onClose func()  // read-only after Track
	proto   atomic.Int32
	state   atomic.Int32
	linger  atomic.Bool
	// rx and tx count the bytes read from and written to the socket (a
	// TLS connection's records, not its plaintext); each is added to by
	// one goroutine at a time and read by metrics.
	rx, tx atomic.Int64

	// The drain's close signal: closeReq is set at the connection's
	// moment; onSignal is the engine's way of passing it on (HTTP/2:
	// GOAWAY), run once, when both are there. HTTP/1 reads closeReq on
	// each response instead.
	closeReq  atomic.Bool
	smu       sync.Mutex
	onSignal  func()                    // guarded by smu
	onTunnel  func(grace time.Duration) // guarded by smu: the tunnel's close (Tunnel), nil once run
	watchers  map[int]func()            // guarded by smu: WatchSignal's
	nextWatch int                       // guarded by smu
	streams   func() int                // guarded by smu: the engine's count of open streams (HTTP/2)
	signaled  time.Time                 // guarded by smu: when closeReq was set
	idleSince atomic.Int64              // unix nanoseconds; 0 unless idle

	// The idle close's handshake (idleclose.go): the controller asks, the
	// reading goroutine answers. readDL is the read deadline last set
	// through the Conn (skew included), put back when an ask is declined;
	// dmu orders the socket's read deadline, readDL and idleClose's moves
	// between none and asked.
	idleClose atomic.Int32
	dmu       sync.Mutex
	readDL    time.Time // guarded by dmu
	// rxIdle is rx when the connection last went idle (0 while new): a
	// read since then means a request has begun, even if the engine has
	// not said so (a TLS record is read in parts before its request).
	rxIdle atomic.Int64

	writeDeadline WriteDeadline // belongs to the writing goroutine
	peek          [24]byte      // bytes read to recognize the protocol...
	replay        []byte        // ...and not yet read again; owned by the reader
	closeOnce     sync.Once
	closeErr      error
}

// Lingering close bounds: read and discard until the client has been
// silent for lingerQuiet, or lingerMax in all.
const (
	lingerQuiet = 500 * time.Millisecond
	lingerMax   = 5 * time.Second
)

// LingerOnClose asks the next Close to close gracefully: send FIN, then
// read and discard what the client is still sending until it stops (within
// bounds), and only then close. Closing a socket with unread data makes the
// kernel send a reset, which can destroy a response (a 413, say) before
// the client has read it. nginx calls this lingering_close.
func (c *Conn) LingerOnClose() { c.linger.Store(true) }

func (c *Conn) lingerClose() { c.finThenDrain(lingerQuiet, lingerMax) }

// finThenDrain half-closes the connection, then reads and discards what
// the client still sends until it has been silent for quiet, closed its
// side, or max has passed.
func (c *Conn) finThenDrain(quiet, max time.Duration) {
	cw, ok := c.Conn.(interface{ CloseWrite() error })
	if !ok || cw.CloseWrite() != nil {
		return
	}
	var buf [4 << 10]byte
	end := time.Now().Add(max)
	for {
		d := time.Now().Add(quiet)
		if d.After(end) {
			d = end
		}
		if c.Conn.SetReadDeadline(d) != nil {
			return
		}
		if _, err := c.Conn.Read(buf[:]); err != nil {
			return
		}
	}
}

// Read reads the bytes Peek kept first, then the connection.
//
// It does not yield the processor before the first read after a write,
// as upstream connections do (see package proxy/upstream): a client's next
// request is seldom there as soon as the response is written, and a
// yielded goroutine goes to the scheduler's global queue, which runs
// before the network is polled. Yielding here let goroutines whose
// clients answer quickly serve request after request without ever
// parking, while the processor, never idle, left the network unpolled
// (for up to sysmon's 10 ms): connections whose requests had arrived
// waited, and the HTTP/1 p99 was 5–7× HAProxy's.
//
// A read cut short by the drain's idle close (see idleclose.go) does not
// return: either the connection is closed (io.EOF) or the read goes on.
func (c *Conn) Read(p []byte) (int, error) {
	if len(c.replay) > 0 {
		n := copy(p, c.replay) // counted in rx when Peek read them
		c.replay = c.replay[n:]
		return n, nil
	}
	for {
		n, err := c.sio.Read(p)
		c.rx.Add(int64(n))
		if n > 0 || !c.idleCloseAsked(err) {
			return n, err
		}
		if c.answerIdleClose() {
			return 0, io.EOF
		}
	}
}

// Peek reads the connection's first bytes, up to len(prefix), for as long
// as they match prefix, and keeps them for the next reads to return again:
// recognizing a protocol by its first bytes consumes nothing. It stops at
// the first byte that differs (a short HTTP/1.0 request is recognized at
// its first byte, without waiting for more), and reports whether all of
// prefix arrived. err is the read error, if one came before a decision;
// bytes read before it are replayed all the same. Peek must be called
// before anything else reads the connection.
func (c *Conn) Peek(prefix []byte) (match bool, err error) {
	buf := c.peek[:min(len(prefix), len(c.peek))]
	n := 0
	for n < len(buf) {
		var k int
		k, err = c.sio.Read(buf[n:])
		c.rx.Add(int64(k))
		if k == 0 && c.idleCloseAsked(err) {
			if c.answerIdleClose() {
				err = io.EOF
				break
			}
			continue
		}
		n += k
		if string(buf[:n]) != string(prefix[:n]) {
			break
		}
		if err != nil {
			break
		}
	}
	c.replay = buf[:n]
	return n == len(prefix) && string(buf[:n]) == string(prefix), err
}

// Peeked returns the bytes Peek read that have not been read again yet.
func (c *Conn) Peeked() []byte { return c.replay }

// SetReadDeadline sets the read deadline, Skew later (see Skew).
func (c *Conn) SetReadDeadline(t time.Time) error {
	if !t.IsZero() {
		t = t.Add(c.Skew)
	}
	return c.setReadDeadline(t)
}

// SetDeadline sets the read deadline Skew later than t and the write
// deadline at t.
func (c *Conn) SetDeadline(t time.Time) error {
	rt := t
	if !t.IsZero() {
		rt = t.Add(c.Skew)
	}
	if err := c.setReadDeadline(rt); err != nil {
		return err
	}
	return c.Conn.SetWriteDeadline(t)
}

// Write writes to the connection, within WriteTimeout if set.
func (c *Conn) Write(p []byte) (int, error) {
	if c.WriteTimeout > 0 {
		if err := c.writeDeadline.Renew(c.Conn, c.WriteTimeout); err != nil {
			return 0, err
		}
	}
	n, err := c.sio.Write(p)
	c.tx.Add(int64(n))
	return n, err
}

// WriteDeadline keeps a connection's write deadline at least half a
// timeout ahead of every write, moving it only when it has come closer
// than that: moving a deadline costs a timer update in the runtime, and
// most writes then need none. Writes to one connection come from one
// goroutine at a time, which owns it.
type WriteDeadline struct {
	at time.Time // the deadline currently set
}

// Renew makes sure c's write deadline is at least timeout/2 away.
func (d *WriteDeadline) Renew(c net.Conn, timeout time.Duration) error {
	now := time.Now()
	if d.at.Sub(now) >= timeout/2 {
		return nil
	}
	d.at = now.Add(timeout)
	return c.SetWriteDeadline(d.at)
}

// Protocol returns the connection's protocol.
func (c *Conn) Protocol() Protocol { return Protocol(c.proto.Load()) }

// SetProtocol records the connection's protocol once it is known.
func (c *Conn) SetProtocol(p Protocol) { c.proto.Store(int32(p)) }

// State returns the connection's state.
func (c *Conn) State() State { return State(c.state.Load()) }

// SetState records a state change. Closed is final: a late transition
// reported by an engine after Close is ignored.
func (c *Conn) SetState(s State) {
	for {
		old := c.state.Load()
		if State(old) == StateClosed || old == int32(s) {
			return
		}
		if c.state.CompareAndSwap(old, int32(s)) {
			if s == StateIdle {
				c.rxIdle.Store(c.rx.Load())
				c.idleSince.Store(time.Now().UnixNano())
			} else {
				c.idleSince.Store(0)
			}
			if c.reg != nil {
				c.reg.changed()
			}
			return
		}
	}
}

// CountStreams gives the connection the engine's count of its open
// streams, for the drain's timeline (HTTP/2; without it an active
// connection counts as one request in flight). It is called from other
// goroutines, a few times a second during a drain.
func (c *Conn) CountStreams(f func() int) {
	c.smu.Lock()
	c.streams = f
	c.smu.Unlock()
}

// InFlight is the number of requests in flight on an active connection.
func (c *Conn) InFlight() int {
	c.smu.Lock()
	f := c.streams
	c.smu.Unlock()
	if f == nil {
		return 1
	}
	return f()
}

// CloseRequested reports whether the drain has given this connection its
// close signal. HTTP/1 engines answer with Connection: close from then on.
func (c *Conn) CloseRequested() bool { return c.closeReq.Load() }

// OnSignal registers what the engine does when the connection gets its
// close signal (HTTP/2: the two-phase GOAWAY). If the signal has already
// been given (a connection accepted during the drain), f runs at once.
func (c *Conn) OnSignal(f func()) {
	c.smu.Lock()
	c.onSignal = f
	run := c.closeReq.Load()
	c.smu.Unlock()
	if run {
		f()
	}
}

// Tunnel marks the connection as a WebSocket tunnel (protocol
// websocket, state upgraded) that end can close in-band: end sends the
// client a close frame with status 1001 and runs the close handshake on
// both sides, each given grace to answer. The drain calls end once, at
// the connection's moment (drain.websocket.close: at_signal) or in the
// tunnels' own window before the deadline (at_deadline); at once if that
// has passed already (a WebSocket opened on a connection that had its
// moment). end is called from the drain's goroutine and must not block.
func (c *Conn) Tunnel(end func(grace time.Duration)) {
	c.SetProtocol(ProtoWebSocket)
	c.SetState(StateUpgraded)
	c.smu.Lock()
	c.onTunnel = end
	c.smu.Unlock()
	if c.reg != nil && c.reg.tunnelDue(c.closeReq.Load()) {
		c.EndTunnel()
	}
}

// EndTunnel runs the tunnel's close, once (the drain's tunnels' window).
func (c *Conn) EndTunnel() {
	c.smu.Lock()
	f := c.onTunnel
	c.onTunnel = nil
	c.smu.Unlock()
	if f != nil {
		f(c.reg.TunnelGrace())
	}
}

// IsTunnel reports whether the connection is a tunnel not yet closed by
// the drain.
func (c *Conn) IsTunnel() bool {
	c.smu.Lock()
	defer c.smu.Unlock()
	return c.onTunnel != nil
}

// WatchSignal has f called when the connection gets its close signal, or
// at once if it has had it; stop unregisters f. f is called from the
// drain's goroutine and must not block. The engines watch for it each
// event stream they relay (a connection may carry several: HTTP/2).
func (c *Conn) WatchSignal(f func()) (stop func()) {
	c.smu.Lock()
	if c.closeReq.Load() {
		c.smu.Unlock()
		f()
		return func() {}
	}
	if c.watchers == nil {
		c.watchers = make(map[int]func())
	}
	id := c.nextWatch
	c.nextWatch++
	c.watchers[id] = f
	c.smu.Unlock()
	return func() {
		c.smu.Lock()
		delete(c.watchers, id)
		c.smu.Unlock()
	}
}

// Signal gives the connection its close signal, once (the drain, at the
// connection's moment): the engine's
// in-band signal, and a tunnel's close unless tunnels close at the
// deadline.
func (c *Conn) Signal(now time.Time) {
	c.smu.Lock()
	if c.closeReq.Load() {
		c.smu.Unlock()
		return
	}
	c.closeReq.Store(true)
	c.signaled = now
	f := c.onSignal
	watchers := make([]func(), 0, len(c.watchers))
	for _, w := range c.watchers {
		watchers = append(watchers, w)
	}
	c.watchers = nil
	c.smu.Unlock()
	if f != nil {
		f()
	}
	for _, w := range watchers {
		w()
	}
	if c.reg != nil && c.reg.tunnelDue(true) {
		c.EndTunnel()
	}
}

// SignaledAt returns when the connection got its close signal.
func (c *Conn) SignaledAt() time.Time {
	c.smu.Lock()
	defer c.smu.Unlock()
	return c.signaled
}

// Close closes the connection once and removes it from the registry,
// lingering first if LingerOnClose was called.
func (c *Conn) Close() error {
	c.closeOnce.Do(func() {
		if c.linger.Load() {
			c.lingerClose()
		}
		c.closeErr = c.Conn.Close()
		c.state.Store(int32(StateClosed))
		c.reg.remove(c)
		if c.onClose != nil {
			c.onClose()
		}
	})
	return c.closeErr
}

// Abort closes the connection now, cutting short a lingering close.
func (c *Conn) Abort() error {
	c.linger.Store(false)
	c.Conn.Close()
	return c.Close()
}

// NetConn returns the wrapped connection.
func (c *Conn) NetConn() net.Conn { return c.Conn }

// ConnOf returns the registry's connection under c: c itself, or the
// connection a TLS session (or any wrapper with NetConn) runs on; nil if
// there is none.
func ConnOf(c net.Conn) *Conn {
	for c != nil {
		switch v := c.(type) {
		case *Conn:
			return v
		case interface{ NetConn() net.Conn }:
			c = v.NetConn()
		default:
			return nil
		}
	}
	return nil
}

// peerOf returns the IP address of a, zero when a is not TCP.
func peerOf(a net.Addr) netip.Addr {
	if ta, ok := a.(*net.TCPAddr); ok {
		if ip, ok := netip.AddrFromSlice(ta.IP); ok {
			return ip.Unmap()
		}
	}
	return netip.Addr{}
}

func formatIP(a net.Addr) []byte {
	if ta, ok := a.(*net.TCPAddr); ok {
		if ip, ok := netip.AddrFromSlice(ta.IP); ok {
			return ip.Unmap().AppendTo(nil)
		}
	}
	if a == nil {
		return nil
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return []byte(a.String())
	}
	return []byte(host)
}
