package proxy

import (
	"context"
	"crypto/tls"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ebb-proxy/ebb/config"
	"github.com/ebb-proxy/ebb/proxy/downstream"
	"github.com/ebb-proxy/ebb/proxy/forward"
	"github.com/ebb-proxy/ebb/proxy/h1"
	"github.com/ebb-proxy/ebb/proxy/h2"
)

// listener is one configured listener: its socket, ebb's accept loop on it,
// and the engines serving what the loop accepts: HTTP/1 (package h1) and
// HTTP/2 (package h2), chosen per connection by ALPN or by the client
// preface (see serveConn).
//
// All fields but loop, certs and tls (set by bind) are set by newListener
// and read-only after.
type listener struct {
	p     *Proxy
	cfg   config.Listener
	fwd   *forward.Listener // what both engines' requests share
	h1    *h1.Server
	h2    *h2.Server
	chl   *chanListener
	loop  *acceptLoop // set by bind
	certs *certStore  // set by bind when the listener has TLS
	tls   *tls.Config

	conns sync.WaitGroup // serveConn goroutines

	capWarned atomic.Int64 // unix nanoseconds of the last warning that max_connections was reached

	tlsFailures [numFailures]atomic.Int64 // TLS handshakes failed, by reason

	h2mu    sync.Mutex
	h2conns map[*h2.Conn]struct{} // the HTTP/2 connections being served
}

// trackH2 adds (or, with on false, removes) an HTTP/2 connection.
func (l *listener) trackH2(c *h2.Conn, on bool) {
	l.h2mu.Lock()
	defer l.h2mu.Unlock()
	if !on {
		delete(l.h2conns, c)
		return
	}
	if l.h2conns == nil {
		l.h2conns = make(map[*h2.Conn]struct{})
	}
	l.h2conns[c] = struct{}{}
}

// terminateH2 ends every HTTP/2 connection as cleanly as an end at once
// can be (the final GOAWAY, RST_STREAM(CANCEL) per open stream), and
// returns them.
func (l *listener) terminateH2() []*h2.Conn {
	l.h2mu.Lock()
	defer l.h2mu.Unlock()
	out := make([]*h2.Conn, 0, len(l.h2conns))
	for c := range l.h2conns {
		c.Terminate()
		out = append(out, c)
	}
	return out
}

func newListener(p *Proxy, idx int, cfg config.Listener) *listener {
	l := &listener{p: p, cfg: cfg}
	l.fwd = &forward.Listener{Config: cfg, Index: idx, Snapshot: &p.snap, Registry: p.reg, Log: p.log}
	l.h1 = h1.New(l.fwd)
	l.h2 = &h2.Server{
		Handler:        h2.Forwarder(l.fwd),
		IdleTimeout:    cfg.Timeouts.Idle,
		HeaderTimeout:  cfg.Timeouts.Header,
		MinBodyRate:    int64(cfg.Limits.MinBodyRate),
		WriteTimeout:   cfg.Timeouts.Write,
		MaxHeaderBytes: int(cfg.Limits.MaxHeaderBytes),
		// Validated to fit: at most 10000 streams, windows below 2^31.
		MaxConcurrentStreams: uint32(cfg.HTTP2.MaxConcurrentStreams),
		StreamWindow:         uint32(cfg.HTTP2.StreamWindow),
		ConnWindow:           uint32(cfg.HTTP2.ConnectionWindow),
		StateChanged: func(c net.Conn, active bool) {
			if dc := downstream.ConnOf(c); dc != nil {
				if active {
					dc.SetState(downstream.StateActive)
				} else {
					dc.SetState(downstream.StateIdle)
				}
			}
		},
		Log: p.log.With("listener", cfg.Name),
	}
	return l
}

// bind opens the listening socket with listen.
func (l *listener) bind(listen ListenFunc) error {
	ln, err := listen(l.cfg.Address)
	if err != nil {
		return fmt.Errorf("proxy: listener %q: %w", l.cfg.Name, err)
	}
	if t := l.cfg.TLS; t != nil {
		certs, err := newCertStore(t.Cert, t.Key, l.p.log.With("listener", l.cfg.Name))
		if err != nil {
			ln.Close()
			return fmt.Errorf("proxy: listener %q: %w", l.cfg.Name, err)
		}
		l.certs, l.tls = certs, serverTLSConfig(certs)
	}
	l.chl = newChanListener(ln.Addr())
	l.loop = newAcceptLoop(ln, l.cfg.Name, l.cfg.Role != config.RoleOutbound, l.p.reg, func(c *downstream.Conn) {
		c.WriteTimeout = l.cfg.Timeouts.Write
		c.Skew = timeoutSkew(l.cfg.Timeouts.Header)
		l.conns.Go(func() { l.serveConn(c) })
	})
	l.loop.limit(l.cfg.Limits.MaxConnections, l.atCap)
	return nil
}

// skewShare: a connection's timeouts fall up to header/skewShare later
// than set, at random (downstream.Conn.Skew): 500 ms at the default 10 s.
const skewShare = 20

// timeoutSkew returns a new connection's skew for a listener whose header
// timeout is header.
func timeoutSkew(header time.Duration) time.Duration {
	if span := header / skewShare; span > 0 {
		return rand.N(span)
	}
	return 0
}

// capWarnEvery spaces the warnings that a listener is at its
// max_connections.
const capWarnEvery = 10 * time.Second

// atCap warns, at most every capWarnEvery, that the listener accepts
// nothing until a connection closes.
func (l *listener) atCap() {
	now := time.Now().UnixNano()
	last := l.capWarned.Load()
	if now-last < int64(capWarnEvery) || !l.capWarned.CompareAndSwap(last, now) {
		return
	}
	l.p.log.Warn("listener at limits.max_connections: new connections wait until one closes",
		"listener", l.cfg.Name, "max_connections", l.cfg.Limits.MaxConnections)
}

// serve runs the accept loop and the HTTP/1 engine until both have
// stopped, and the certificate watcher until the loop has.
func (l *listener) serve() {
	loopDone := make(chan struct{})
	var watchers sync.WaitGroup
	if l.certs != nil {
		ctx, cancel := context.WithCancel(context.Background())
		defer watchers.Wait()
		defer cancel()
		watchers.Go(func() { l.certs.run(ctx) })
	}
	go func() {
		defer close(loopDone)
		l.loop.run()
	}()
	if err := l.h1.Serve(l.chl); err != nil {
		l.p.log.Error("engine stopped", "listener", l.cfg.Name, "err", err)
	}
	// The engine stops on close, which stops the loop first.
	<-loopDone
}

func (l *listener) stopAccepting() {
	if l.loop != nil {
		l.loop.stop()
	}
}

// close stops accepting at once and stops the HTTP/1 engine. The caller
// closes the connections and then calls wait.
func (l *listener) close() {
	if l.loop != nil {
		l.loop.close()
	}
	if l.chl != nil {
		l.chl.Close()
	}
}

// wait waits for every connection's goroutine to end.
func (l *listener) wait() { l.conns.Wait() }
