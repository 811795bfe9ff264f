package downstream

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ebb-proxy/ebb/config"
)

// Registry knows every open downstream connection, so that a drain can act
// on each one and tell when none is left. The request path never touches
// it: connections are added at accept and removed at close. The drain's
// controller (package drain) drives it through the methods that say so.
type Registry struct {
	mu    sync.Mutex
	conns map[*Conn]struct{} // guarded by mu
	// empty is closed while no connection is open; it is replaced by an open
	// channel when the first connection arrives. Guarded by mu.
	empty chan struct{}
	// gone holds the bytes of closed connections, by listener. Guarded
	// by mu.
	gone map[string]Bytes

	// Stats counts what the drain did, for metrics and the drain's
	// timeline: the engines add to it, the controller sets its Phase.
	Stats Stats

	// lastTrack is when the last connection arrived (unix nanoseconds).
	lastTrack atomic.Int64
	// signalNew: the drain's signal phase has begun, so connections
	// arriving now get their close signal at once.
	signalNew atomic.Bool
	// The drain's WebSocket settings, set when it begins: tunnels close
	// at their connection's moment unless wsAtDeadline, and then once
	// wsWindow (their window before the deadline) has begun; each side
	// has wsGrace (nanoseconds) to answer a close frame.
	wsAtDeadline atomic.Bool
	wsWindow     atomic.Bool
	wsGrace      atomic.Int64
	// events is drain.event_streams: which event streams the engines end
	// at their connection's signal (eventsOff, eventsResumable,
	// eventsAll).
	events atomic.Int32
	// watching: the controller wants to hear of every change (kick).
	watching atomic.Bool
	kick     chan struct{} // capacity 1
}

// Stats counts the drain's actions. Every field is safe for concurrent use.
type Stats struct {
	// Phase is the drain's phase (a drain.Phase, set by its controller):
	// zero while serving, before any drain.
	Phase atomic.Int32
	// CloseSignals counts, by protocol, the close signals passed on:
	// responses sent with Connection: close because of the drain (HTTP/1),
	// two-phase GOAWAYs begun (HTTP/2) and close frames with status 1001
	// sent to WebSocket clients.
	CloseSignals [numProtocols]atomic.Int64
	// EventStreamEnds counts the event streams (text/event-stream
	// responses) the drain ended after a complete event.
	EventStreamEnds atomic.Int64
	// EventStreams is the number of event-stream responses being relayed
	// now, on any protocol (a gauge: the engines add and remove).
	EventStreams atomic.Int64
	// IdleCloses counts idle HTTP/1 connections the drain closed.
	IdleCloses atomic.Int64
	// ForcedCloses counts connections closed at the deadline or on a
	// forced stop.
	ForcedCloses atomic.Int64
	// Requests counts requests received during the drain.
	Requests atomic.Int64
	// Dials counts upstream connections opened during the drain.
	Dials atomic.Int64
	// Errors counts the 5xx responses ebb made itself during the drain
	// (no endpoint, an upstream failure): errors clients saw.
	Errors atomic.Int64
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	empty := make(chan struct{})
	close(empty)
	return &Registry{conns: make(map[*Conn]struct{}), empty: empty, kick: make(chan struct{}, 1)}
}

// Draining reports whether a drain has begun. The request path asks it to
// count requests and dials during the drain.
func (r *Registry) Draining() bool { return r.Stats.Phase.Load() != 0 }

// Track registers an accepted connection and returns the wrapper every
// engine must use from then on. drainable is false for connections of
// outbound listeners. onClose, if not nil, runs once the connection is
// closed (the accept loop's connection slot).
func (r *Registry) Track(nc net.Conn, listener string, drainable bool, onClose func()) *Conn {
	c := &Conn{
		Conn:      nc,
		Listener:  listener,
		ClientIP:  formatIP(nc.RemoteAddr()),
		Peer:      peerOf(nc.RemoteAddr()),
		Drainable: drainable,
		reg:       r,
		onClose:   onClose,
	}
	c.sio.Init(nc)
	now := time.Now()
	if drainable && r.signalNew.Load() {
		c.Signal(now)
	}
	r.mu.Lock()
	if len(r.conns) == 0 {
		r.empty = make(chan struct{})
	}
	r.conns[c] = struct{}{}
	r.mu.Unlock()
	r.lastTrack.Store(now.UnixNano())
	r.changed()
	return c
}

func (r *Registry) remove(c *Conn) {
	r.mu.Lock()
	if _, ok := r.conns[c]; ok {
		delete(r.conns, c)
		if r.gone == nil {
			r.gone = make(map[string]Bytes)
		}
		b := r.gone[c.Listener]
		b.Received += c.rx.Load()
		b.Sent += c.tx.Load()
		r.gone[c.Listener] = b
		if len(r.conns) == 0 {
			close(r.empty)
		}
	}
	r.mu.Unlock()
	r.changed()
}

// Which event streams the drain ends (drain.event_streams).
const (
	eventsResumable int32 = iota
	eventsAll
	eventsOff
)

// SetEventStreams sets drain.event_streams (config.EventStreams*), before
// the engines serve.
func (r *Registry) SetEventStreams(policy string) {
	switch policy {
	case config.EventStreamsAll:
		r.events.Store(eventsAll)
	case config.EventStreamsOff:
		r.events.Store(eventsOff)
	default:
		r.events.Store(eventsResumable)
	}
}

// EndsEventStreams reports whether the drain ends event streams (on), and
// all of them rather than only those that sent an id field (all).
func (r *Registry) EndsEventStreams() (on, all bool) {
	p := r.events.Load()
	return p != eventsOff, p == eventsAll
}

// tunnelDue reports whether a tunnel on a connection whose close signal
// has (signaled) or has not been given must be closed now.
func (r *Registry) tunnelDue(signaled bool) bool {
	if !signaled {
		return false
	}
	return !r.wsAtDeadline.Load() || r.wsWindow.Load()
}

// TunnelGrace is each side's time to answer a close frame: the drain's,
// or drain.websocket.grace's default when it has none (a configuration
// built in code, not loaded).
func (r *Registry) TunnelGrace() time.Duration {
	if g := time.Duration(r.wsGrace.Load()); g > 0 {
		return g
	}
	return config.DefaultWebSocketGrace
}

// The drain's controller tells the registry what the connections must
// know of the drain, and watches them.

// CloseTunnels sets drain.websocket for the drain beginning: tunnels close
// at their connection's moment unless atDeadline, and then from the
// tunnels' window on (OpenTunnelWindow); each side has grace to answer a
// close frame.
func (r *Registry) CloseTunnels(atDeadline bool, grace time.Duration) {
	r.wsGrace.Store(int64(grace))
	r.wsAtDeadline.Store(atDeadline)
}

// TunnelsAtDeadline reports whether tunnels wait for the tunnels' window
// (drain.websocket.close: at_deadline).
func (r *Registry) TunnelsAtDeadline() bool { return r.wsAtDeadline.Load() }

// OpenTunnelWindow begins the tunnels' window (at_deadline): a tunnel
// opened from now on, on a connection that has had its close signal, is
// closed at once.
func (r *Registry) OpenTunnelWindow() { r.wsWindow.Store(true) }

// SignalArrivals begins the signal phase for connections yet to come:
// from now on, each gets its close signal as it is tracked.
func (r *Registry) SignalArrivals() { r.signalNew.Store(true) }

// LastArrival returns when the last connection was tracked (zero if none
// was).
func (r *Registry) LastArrival() time.Time {
	if ns := r.lastTrack.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

// Watch has the registry tell changed of every connection that arrives,
// leaves or changes state, until stop; changed holds at most one pending
// notice. One watcher at a time (the drain's controller).
func (r *Registry) Watch() (changed <-chan struct{}, stop func()) {
	r.watching.Store(true)
	return r.kick, func() { r.watching.Store(false) }
}

// changed tells a watching controller that a connection arrived, left or
// changed state. It costs one atomic load when nobody watches.
func (r *Registry) changed() {
	if !r.watching.Load() {
		return
	}
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// Len returns the number of open connections.
func (r *Registry) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.conns)
}

// Each calls f for every open connection. f must not call back into the
// registry (closing a connection does, so collect first and close after).
func (r *Registry) Each(f func(*Conn)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for c := range r.conns {
		f(c)
	}
}

// Conns returns the open connections at this moment.
func (r *Registry) Conns() []*Conn {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*Conn, 0, len(r.conns))
	for c := range r.conns {
		out = append(out, c)
	}
	return out
}

// WaitEmpty blocks until no connection is open or ctx ends.
func (r *Registry) WaitEmpty(ctx context.Context) error {
	for {
		r.mu.Lock()
		empty := r.empty
		n := len(r.conns)
		r.mu.Unlock()
		if n == 0 {
			return nil
		}
		select {
		case <-empty:
			// Loop: a new connection may have arrived since.
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Active counts the connections with requests in flight: HTTP/1 ones
// serving a request, HTTP/2 ones with streams open.
func (r *Registry) Active() int {
	n := 0
	r.Each(func(c *Conn) {
		if c.State() == StateActive {
			n++
		}
	})
	return n
}

// CloseAll closes every open connection now and returns how many it closed.
func (r *Registry) CloseAll() int {
	conns := r.Conns()
	for _, c := range conns {
		c.Abort()
	}
	return len(conns)
}

// Count is the number of connections with one listener, protocol and state.
type Count struct {
	Listener string
	Protocol Protocol
	State    State
	N        int
}

// Bytes are the bytes received from and sent to clients on the socket.
type Bytes struct {
	Received, Sent int64
}

// Traffic returns the bytes every connection exchanged with its client,
// open and closed, by listener.
func (r *Registry) Traffic() map[string]Bytes {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]Bytes, len(r.gone))
	for l, b := range r.gone {
		out[l] = b
	}
	for c := range r.conns {
		b := out[c.Listener]
		b.Received += c.rx.Load()
		b.Sent += c.tx.Load()
		out[c.Listener] = b
	}
	return out
}

// Counts groups the open connections by listener, protocol and state.
func (r *Registry) Counts() []Count {
	type key struct {
		l string
		p Protocol
		s State
	}
	m := map[key]int{}
	r.Each(func(c *Conn) {
		m[key{c.Listener, c.Protocol(), c.State()}]++
	})
	out := make([]Count, 0, len(m))
	for k, n := range m {
		out = append(out, Count{Listener: k.l, Protocol: k.p, State: k.s, N: n})
	}
	return out
}
