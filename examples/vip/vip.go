// Package vip is a Kubernetes Service VIP (kube-proxy, IPVS or iptables
// mode) in a test's or a demo's process: the rolling-restart demo puts its
// replicas behind one, and so do the drain scenarios of e2e.
package vip

import (
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"time"
)

// dialTimeout bounds the connection to a backend.
const dialTimeout = 15 * time.Second

// VIP is a simulated Kubernetes Service VIP (kube-proxy, IPVS or iptables
// mode): it accepts TCP connections on 127.0.0.1:0 and
// forwards each, byte for byte in both directions, to one backend chosen
// round-robin among those listed when the connection arrived. A connection
// stays pinned to its backend when the list changes (SetBackends), as
// conntrack keeps it. A half-close from either side is passed on as a
// half-close, a reset (or any other error of a side) as a reset, as a DNAT
// passes them on; a backend that refuses the connection is passed on as a
// reset, as a DNAT to a gone pod would be, and so is a connection arriving
// while no backend is listed.
//
// ln is read-only after New. wg counts the accept loop and each
// connection's forwarding goroutine (which owns the goroutine of its second
// direction); Close waits for them. Everything else is guarded by mu.
type VIP struct {
	ln *net.TCPListener
	wg sync.WaitGroup

	mu       sync.Mutex
	backends []string                // the listed backends
	next     int                     // round-robin cursor
	pairs    map[*pair]struct{}      // connections being forwarded
	stats    map[string]*BackendStat // by backend address
	noRoute  int                     // connections refused: empty list
	closed   bool
	// changed is closed, and replaced, whenever a connection is routed,
	// forwarded or ended (see Await).
	changed chan struct{}
}

// pair is one forwarded connection: the client's side and the backend's.
type pair struct {
	client, backend *net.TCPConn
}

func (p *pair) close() {
	p.client.Close()
	p.backend.Close()
}

// BackendStat is what the VIP saw of one backend.
type BackendStat struct {
	Routed     []time.Time // when each connection was sent to it
	Open       int         // connections being forwarded now
	DialErrors []string    // connections it refused
	LastEnd    time.Time   // when the last of its connections ended
	// Silent counts the connections that ended without the client having
	// sent a byte (a pool's spare dial, a preconnect), and LastSilentEnd
	// is when the last of them ended.
	Silent        int
	LastSilentEnd time.Time
}

// New starts a VIP on 127.0.0.1 listing backends. Close stops it.
func New(backends ...string) (*VIP, error) {
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return nil, err
	}
	v := &VIP{ln: ln, pairs: map[*pair]struct{}{}, stats: map[string]*BackendStat{}, changed: make(chan struct{})}
	v.SetBackends(backends...)
	v.wg.Go(v.acceptLoop)
	return v, nil
}

// Addr returns the VIP's host:port.
func (v *VIP) Addr() string { return v.ln.Addr().String() }

// SetBackends replaces the list new connections are spread over; the
// connections already forwarded keep their backend.
func (v *VIP) SetBackends(backends ...string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.backends = append([]string(nil), backends...)
	for _, b := range backends {
		v.statLocked(b)
	}
}

func (v *VIP) statLocked(backend string) *BackendStat {
	s, ok := v.stats[backend]
	if !ok {
		s = &BackendStat{}
		v.stats[backend] = s
	}
	return s
}

// Stat returns a copy of what the VIP saw of backend.
func (v *VIP) Stat(backend string) BackendStat {
	v.mu.Lock()
	defer v.mu.Unlock()
	s := *v.statLocked(backend)
	s.Routed = append([]time.Time(nil), s.Routed...)
	s.DialErrors = append([]string(nil), s.DialErrors...)
	return s
}

// changedLocked wakes the callers of Await.
func (v *VIP) changedLocked() {
	close(v.changed)
	v.changed = make(chan struct{})
}

// Await waits up to d for cond to hold for what the VIP saw of backend,
// and reports whether it did.
func (v *VIP) Await(backend string, d time.Duration, cond func(BackendStat) bool) bool {
	timeout := time.NewTimer(d)
	defer timeout.Stop()
	for {
		v.mu.Lock()
		ok := cond(*v.statLocked(backend))
		changed := v.changed
		v.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-changed:
		case <-timeout.C:
			return false
		}
	}
}

// DialErrors returns the connections every backend refused, each as
// "HH:MM:SS.mmm: error".
func (v *VIP) DialErrors() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	var all []string
	for _, s := range v.stats {
		all = append(all, s.DialErrors...)
	}
	slices.Sort(all)
	return all
}

// RefusedNoRoute returns how many connections arrived while no backend
// was listed.
func (v *VIP) RefusedNoRoute() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.noRoute
}

// RoutedSince counts the connections sent to the backend at or after t.
func (s BackendStat) RoutedSince(t time.Time) int {
	n := 0
	for _, at := range s.Routed {
		if !at.Before(t) {
			n++
		}
	}
	return n
}

func (v *VIP) acceptLoop() {
	for {
		c, err := v.ln.AcceptTCP()
		if err != nil {
			return // closed
		}
		backend, ok := v.route()
		if !ok {
			c.SetLinger(0) // a reset, as for a Service without endpoints
			c.Close()
			continue
		}
		v.wg.Go(func() { v.forward(c, backend) })
	}
}

// route picks the backend of a new connection, round-robin.
func (v *VIP) route() (string, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.backends) == 0 {
		v.noRoute++
		return "", false
	}
	b := v.backends[v.next%len(v.backends)]
	v.next++
	s := v.statLocked(b)
	s.Routed = append(s.Routed, time.Now())
	v.changedLocked()
	return b, true
}

// forward connects client to backend and copies both ways until both
// directions have ended.
func (v *VIP) forward(client *net.TCPConn, backend string) {
	nc, err := net.DialTimeout("tcp", backend, dialTimeout)
	if err != nil {
		v.mu.Lock()
		s := v.statLocked(backend)
		s.DialErrors = append(s.DialErrors, fmt.Sprintf("%s: %v", time.Now().Format("15:04:05.000"), err))
		v.changedLocked()
		v.mu.Unlock()
		client.SetLinger(0)
		client.Close()
		return
	}
	p := &pair{client: client, backend: nc.(*net.TCPConn)}
	v.mu.Lock()
	if v.closed {
		v.mu.Unlock()
		p.close()
		return
	}
	v.pairs[p] = struct{}{}
	v.statLocked(backend).Open++
	v.changedLocked()
	v.mu.Unlock()

	var up sync.WaitGroup
	var sent int64
	up.Go(func() { sent = copyHalf(p.backend, p.client, p) })
	copyHalf(p.client, p.backend, p)
	up.Wait()
	p.close()

	now := time.Now()
	v.mu.Lock()
	delete(v.pairs, p)
	s := v.statLocked(backend)
	s.Open--
	s.LastEnd = now
	if sent == 0 {
		s.Silent++
		s.LastSilentEnd = now
	}
	v.changedLocked()
	v.mu.Unlock()
}

// copyHalf copies src to dst. The end of src's stream (a FIN) is passed on
// as a half-close of dst; an error on either side (a reset, a peer gone)
// is passed on as a reset of dst, and src is closed. It returns how many
// bytes it copied.
func copyHalf(dst, src *net.TCPConn, p *pair) int64 {
	n, err := io.Copy(dst, src)
	if err != nil {
		dst.SetLinger(0) // its close sends a reset
		p.close()
		return n
	}
	if err := dst.CloseWrite(); err != nil {
		p.close()
	}
	return n
}

// Close stops accepting, closes every forwarded connection and waits for
// every goroutine. Safe to call more than once.
func (v *VIP) Close() {
	v.mu.Lock()
	v.closed = true
	v.ln.Close()
	for p := range v.pairs {
		p.close()
	}
	v.mu.Unlock()
	v.wg.Wait()
}

// Add lists one more backend.
func (v *VIP) Add(backend string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.backends = append(v.backends, backend)
	v.statLocked(backend)
}

// Remove unlists backend; the connections already forwarded to it stay.
func (v *VIP) Remove(backend string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.backends = slices.DeleteFunc(v.backends, func(b string) bool { return b == backend })
}
