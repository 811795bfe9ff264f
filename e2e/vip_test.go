package e2e

import (
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"testing"
	"time"
)

// vip is a simulated Kubernetes Service VIP (kube-proxy, IPVS or iptables
// mode) in the test process: it accepts TCP connections on 127.0.0.1:0 and
// forwards each, byte for byte in both directions, to one backend chosen
// round-robin among those listed when the connection arrived. A connection
// stays pinned to its backend when the list changes (setBackends), as
// conntrack keeps it. A half-close from either side is passed on as a
// half-close, a reset (or any other error of a side) as a reset, as a DNAT
// passes them on; a backend that refuses the connection is passed on as a
// reset, as a DNAT to a gone pod would be, and so is a connection arriving
// while no backend is listed. Every scenario with a Service in front of
// ebb replicas (clients, or nginx, in front of the VIP) uses it.
//
// ln is read-only after newVIP. wg counts the accept loop and each
// connection's forwarding goroutine (which owns the goroutine of its second
// direction); close waits for them. Everything else is guarded by mu.
type vip struct {
	ln *net.TCPListener
	wg sync.WaitGroup

	mu       sync.Mutex
	backends []string                   // the listed backends
	next     int                        // round-robin cursor
	pairs    map[*vipPair]struct{}      // connections being forwarded
	stats    map[string]*vipBackendStat // by backend address
	noRoute  int                        // connections refused: empty list
	closed   bool
	// changed is closed, and replaced, whenever a connection is routed,
	// forwarded or ended (see await).
	changed chan struct{}
}

// vipPair is one forwarded connection: the client's side and the backend's.
type vipPair struct {
	client, backend *net.TCPConn
}

func (p *vipPair) close() {
	p.client.Close()
	p.backend.Close()
}

// vipBackendStat is what the VIP saw of one backend.
type vipBackendStat struct {
	routed     []time.Time // when each connection was sent to it
	open       int         // connections being forwarded now
	dialErrors []string    // connections it refused
	lastEnd    time.Time   // when the last of its connections ended
	// silent counts the connections that ended without the client having
	// sent a byte (a pool's spare dial, a preconnect), and lastSilentEnd
	// is when the last of them ended.
	silent        int
	lastSilentEnd time.Time
}

// newVIP starts a VIP listing backends; it is closed at cleanup.
func newVIP(t *testing.T, backends ...string) *vip {
	t.Helper()
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	v := &vip{ln: ln, pairs: map[*vipPair]struct{}{}, stats: map[string]*vipBackendStat{}, changed: make(chan struct{})}
	v.setBackends(backends...)
	v.wg.Go(v.acceptLoop)
	t.Cleanup(v.close)
	return v
}

// addr returns the VIP's host:port.
func (v *vip) addr() string { return v.ln.Addr().String() }

// setBackends replaces the list new connections are spread over; the
// connections already forwarded keep their backend.
func (v *vip) setBackends(backends ...string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.backends = append([]string(nil), backends...)
	for _, b := range backends {
		v.statLocked(b)
	}
}

func (v *vip) statLocked(backend string) *vipBackendStat {
	s, ok := v.stats[backend]
	if !ok {
		s = &vipBackendStat{}
		v.stats[backend] = s
	}
	return s
}

// stat returns a copy of what the VIP saw of backend.
func (v *vip) stat(backend string) vipBackendStat {
	v.mu.Lock()
	defer v.mu.Unlock()
	s := *v.statLocked(backend)
	s.routed = append([]time.Time(nil), s.routed...)
	s.dialErrors = append([]string(nil), s.dialErrors...)
	return s
}

// changedLocked wakes the callers of await.
func (v *vip) changedLocked() {
	close(v.changed)
	v.changed = make(chan struct{})
}

// await waits up to d for cond to hold for what the VIP saw of backend,
// and reports whether it did.
func (v *vip) await(backend string, d time.Duration, cond func(vipBackendStat) bool) bool {
	timeout, stop := after(d)
	defer stop()
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
		case <-timeout:
			return false
		}
	}
}

// dialErrors returns the connections every backend refused, each as
// "HH:MM:SS.mmm: error".
func (v *vip) dialErrors() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	var all []string
	for _, s := range v.stats {
		all = append(all, s.dialErrors...)
	}
	slices.Sort(all)
	return all
}

// refusedNoRoute returns how many connections arrived while no backend was
// listed.
func (v *vip) refusedNoRoute() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.noRoute
}

// routedSince counts the connections sent to the backend at or after t.
func (s vipBackendStat) routedSince(t time.Time) int {
	n := 0
	for _, at := range s.routed {
		if !at.Before(t) {
			n++
		}
	}
	return n
}

func (v *vip) acceptLoop() {
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
func (v *vip) route() (string, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.backends) == 0 {
		v.noRoute++
		return "", false
	}
	b := v.backends[v.next%len(v.backends)]
	v.next++
	s := v.statLocked(b)
	s.routed = append(s.routed, time.Now())
	v.changedLocked()
	return b, true
}

// forward connects client to backend and copies both ways until both
// directions have ended.
func (v *vip) forward(client *net.TCPConn, backend string) {
	nc, err := net.DialTimeout("tcp", backend, waitTimeout)
	if err != nil {
		v.mu.Lock()
		s := v.statLocked(backend)
		s.dialErrors = append(s.dialErrors, fmt.Sprintf("%s: %v", time.Now().Format("15:04:05.000"), err))
		v.changedLocked()
		v.mu.Unlock()
		client.SetLinger(0)
		client.Close()
		return
	}
	p := &vipPair{client: client, backend: nc.(*net.TCPConn)}
	v.mu.Lock()
	if v.closed {
		v.mu.Unlock()
		p.close()
		return
	}
	v.pairs[p] = struct{}{}
	v.statLocked(backend).open++
	v.changedLocked()
	v.mu.Unlock()

	var up sync.WaitGroup
	var sent int64
	up.Go(func() { sent = vipPipe(p.backend, p.client, p) })
	vipPipe(p.client, p.backend, p)
	up.Wait()
	p.close()

	now := time.Now()
	v.mu.Lock()
	delete(v.pairs, p)
	s := v.statLocked(backend)
	s.open--
	s.lastEnd = now
	if sent == 0 {
		s.silent++
		s.lastSilentEnd = now
	}
	v.changedLocked()
	v.mu.Unlock()
}

// vipPipe copies src to dst. The end of src's stream (a FIN) is passed on
// as a half-close of dst; an error on either side (a reset, a peer gone)
// is passed on as a reset of dst, and src is closed. It returns how many
// bytes it copied.
func vipPipe(dst, src *net.TCPConn, p *vipPair) int64 {
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

// close stops accepting, closes every forwarded connection and waits for
// every goroutine. Safe to call more than once.
func (v *vip) close() {
	v.mu.Lock()
	v.closed = true
	v.ln.Close()
	for p := range v.pairs {
		p.close()
	}
	v.mu.Unlock()
	v.wg.Wait()
}
