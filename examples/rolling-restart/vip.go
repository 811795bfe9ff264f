package main

import (
	"io"
	"net"
	"sync"
)

// vip is a Service VIP as kube-proxy makes one: each new TCP connection
// goes to one of the endpoints listed when it arrives, round-robin, and
// stays pinned there when the list changes (conntrack); bytes are copied
// both ways, a FIN passed on as a FIN, an error as a reset. A connection
// to an endpoint that refuses it, or arriving while none is listed, is
// reset: what a client of a Service sees when a pod is gone but still
// listed.
type vip struct {
	ln *net.TCPListener
	wg sync.WaitGroup

	mu        sync.Mutex
	endpoints []string              // guarded by mu
	next      int                   // guarded by mu
	conns     map[*net.TCPConn]bool // guarded by mu: both sides of every forwarded connection
	closed    bool                  // guarded by mu
}

func newVIP() (*vip, error) {
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return nil, err
	}
	v := &vip{ln: ln, conns: map[*net.TCPConn]bool{}}
	v.wg.Go(v.accept)
	return v, nil
}

func (v *vip) addr() string { return v.ln.Addr().String() }

// add lists an endpoint; remove unlists one (its connections stay).
func (v *vip) add(ep string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.endpoints = append(v.endpoints, ep)
}

func (v *vip) remove(ep string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for i, e := range v.endpoints {
		if e == ep {
			v.endpoints = append(v.endpoints[:i], v.endpoints[i+1:]...)
			return
		}
	}
}

func (v *vip) accept() {
	for {
		c, err := v.ln.AcceptTCP()
		if err != nil {
			return // closed
		}
		v.mu.Lock()
		ep := ""
		if len(v.endpoints) > 0 {
			ep = v.endpoints[v.next%len(v.endpoints)]
			v.next++
		}
		v.mu.Unlock()
		v.wg.Go(func() { v.forward(c, ep) })
	}
}

func (v *vip) forward(client *net.TCPConn, ep string) {
	var up *net.TCPConn
	if ep != "" {
		if c, err := net.Dial("tcp", ep); err == nil {
			up = c.(*net.TCPConn)
		}
	}
	if up == nil || !v.track(client, up) {
		client.SetLinger(0) // a reset
		client.Close()
		if up != nil {
			up.Close()
		}
		return
	}
	var done sync.WaitGroup
	done.Go(func() { pipe(up, client) })
	pipe(client, up)
	done.Wait()
	v.mu.Lock()
	delete(v.conns, client)
	delete(v.conns, up)
	v.mu.Unlock()
	client.Close()
	up.Close()
}

// track records a forwarded connection; false once the VIP is closed.
func (v *vip) track(a, b *net.TCPConn) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.closed {
		return false
	}
	v.conns[a], v.conns[b] = true, true
	return true
}

// pipe copies src to dst: src's FIN becomes dst's, an error on either side
// resets dst and closes src.
func pipe(dst, src *net.TCPConn) {
	if _, err := io.Copy(dst, src); err != nil {
		dst.SetLinger(0)
		dst.Close()
		src.Close()
		return
	}
	dst.CloseWrite()
}

// close stops the VIP and everything it forwards.
func (v *vip) close() {
	v.mu.Lock()
	v.closed = true
	v.ln.Close()
	for c := range v.conns {
		c.Close()
	}
	v.mu.Unlock()
	v.wg.Wait()
}
