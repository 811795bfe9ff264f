// Package proxy is ebb's data path as its owner sees it: Proxy serves the
// listeners of one configuration. A listener is ebb's own accept loop on
// a socket (TLS certificates rotated from disk), handing each connection
// to the engine its first bytes or ALPN choose: package h1 (fasthttp) or
// package h2 (HTTP/2). Both engines serve each request through the
// forwarding skeleton of package forward, over the routes and clusters of
// packages route and cluster, to the transports of package upstream, with
// the header rules of package headers and the instruments of package
// metrics.
//
// Routes and clusters reach the request path as an immutable snapshot
// (route.Snapshot) behind an atomic pointer: a request loads it once and
// uses it to the end.
package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/ebb-proxy/ebb/config"
	"github.com/ebb-proxy/ebb/proxy/access"
	"github.com/ebb-proxy/ebb/proxy/cluster"
	"github.com/ebb-proxy/ebb/proxy/downstream"
	"github.com/ebb-proxy/ebb/proxy/h2"
	"github.com/ebb-proxy/ebb/proxy/metrics"
	"github.com/ebb-proxy/ebb/proxy/route"
	"github.com/ebb-proxy/ebb/proxy/tracing"
	"github.com/ebb-proxy/ebb/telemetry/collect"
)

// ErrClosed is returned by Start after Close.
var ErrClosed = errors.New("proxy: closed")

// Proxy serves every listener of one configuration.
//
// listeners are set by New and fixed after; snap is swapped whole by
// Update (live reload). mu guards bound, started and closed.
type Proxy struct {
	log       *slog.Logger
	reg       *downstream.Registry
	metrics   *metrics.Metrics
	listeners []*listener
	snap      atomic.Pointer[route.Snapshot]
	// goAwayGrace is drain.http2.goaway_grace: the longest wait for the
	// PING acknowledgement between the two GOAWAYs.
	goAwayGrace time.Duration
	// idleClose is drain.http1.idle_close (0: never), also how long an
	// HTTP/2 connection that has opened no stream waits for its first
	// before its GOAWAY (h2.Conn.GoAway).
	idleClose time.Duration

	mu      sync.Mutex
	bound   bool
	started bool
	closed  bool
	wg      sync.WaitGroup // serving goroutines

	updateMu  sync.Mutex    // one Update at a time
	cfgStatic config.Config // the configuration ebb started with, for what Update cannot change
	disc      discoveries

	// tracer makes the requests' spans (nil: tracing off); every
	// snapshot has it.
	tracer *tracing.Tracer

	// sink is where the access log goes, opened the first time a
	// configuration enables it (nil until then); guarded by updateMu
	// until Close.
	sink *access.Sink
}

// New builds a proxy for cfg. Its instruments are made with meter; tp,
// if not nil, makes its spans (tracing on). It binds nothing until Start.
func New(cfg *config.Config, reg *downstream.Registry, meter metric.Meter, tp trace.TracerProvider, log *slog.Logger) (*Proxy, error) {
	m, err := metrics.New(meter, reg)
	if err != nil {
		return nil, fmt.Errorf("proxy: creating instruments: %w", err)
	}
	p := &Proxy{log: log, reg: reg, metrics: m, goAwayGrace: cfg.Drain.HTTP2.GoawayGrace,
		idleClose: max(time.Duration(cfg.Drain.HTTP1.IdleClose), 0), cfgStatic: *cfg, tracer: tracing.New(tp)}
	p.disc.log = func(c *cluster.Cluster, err error) { log.Error("discovery stopped", "cluster", c.Name(), "err", err) }
	// The snapshot first: the listeners' engines read it.
	snap := route.Build(cfg, m, reg, log, nil)
	if snap.Access, err = p.accessLog(cfg); err != nil {
		snap.Close()
		return nil, err
	}
	snap.Tracer = p.tracer
	if err := p.instruments(meter); err != nil {
		return nil, fmt.Errorf("proxy: creating instruments: %w", err)
	}
	p.snap.Store(snap)
	for i, l := range cfg.Listeners {
		p.listeners = append(p.listeners, newListener(p, i, l))
	}
	return p, nil
}

// accessLog returns the access log cfg asks for (nil: off), opening its
// sink the first time. The sink's path is the one ebb started with: a
// reload does not move it.
func (p *Proxy) accessLog(cfg *config.Config) (*access.Log, error) {
	al := cfg.Telemetry.AccessLog
	if !al.Enabled {
		return nil, nil
	}
	f, err := access.ParseFormat(al.Format)
	if err != nil {
		return nil, err
	}
	if p.sink == nil {
		path := p.cfgStatic.Telemetry.AccessLog.Path
		s, err := access.OpenSink(path, os.Stdout, func(err error) {
			p.log.Error("writing the access log: lines lost", "path", path, "err", err)
		})
		if err != nil {
			return nil, err
		}
		p.sink = s
	}
	return access.New(f, p.sink), nil
}

// ReopenAccessLog reopens the access log's file (SIGUSR1, after
// logrotate moved it); a no-op when it goes to standard output or is off.
func (p *Proxy) ReopenAccessLog() error {
	p.updateMu.Lock()
	defer p.updateMu.Unlock()
	if p.sink == nil {
		return nil
	}
	return p.sink.Reopen()
}

// Start binds every listener and starts serving: Bind, then Serve.
func (p *Proxy) Start() error {
	if err := p.Bind(nil); err != nil {
		return err
	}
	return p.Serve()
}

// ListenFunc opens a listener's socket for a configured address: for
// example downstream.Listen(address), or a socket handed over by the
// process ebb takes over from (see drain/takeover).
type ListenFunc func(address string) (net.Listener, error)

// Bind opens every listener's socket with listen (nil: downstream.Listen) and
// loads its certificates, without accepting yet. If one fails, those
// already open are closed and the error names the listener.
func (p *Proxy) Bind(listen ListenFunc) error {
	if listen == nil {
		listen = downstream.Listen
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ErrClosed
	}
	if p.bound {
		return errors.New("proxy: already bound")
	}
	for i, l := range p.listeners {
		if err := l.bind(listen); err != nil {
			for _, b := range p.listeners[:i] {
				b.close()
			}
			return err
		}
	}
	p.bound = true
	return nil
}

// Serve starts accepting on the sockets Bind opened.
func (p *Proxy) Serve() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.closed:
		return ErrClosed
	case !p.bound:
		return errors.New("proxy: not bound")
	case p.started:
		return errors.New("proxy: already started")
	}
	p.started = true
	for _, l := range p.listeners {
		p.wg.Go(l.serve)
	}
	return nil
}

// Socket is a listener's listening socket, as Sockets reports it.
type Socket struct {
	Name     string // the listener's name
	Address  string // its configured address
	Listener net.Listener
}

// Sockets returns the listening socket of every bound listener that still
// accepts, for handing over to a successor process. From then on they
// count as shared: stopping closes them at once, since the successor takes
// what waits in their queues.
func (p *Proxy) Sockets() []Socket {
	var out []Socket
	for _, l := range p.listeners {
		if l.loop != nil && !l.loop.stopped() {
			l.loop.share()
			out = append(out, Socket{Name: l.cfg.Name, Address: l.cfg.Address, Listener: l.loop.ln})
		}
	}
	return out
}

// MetricsCollector returns the collector of the per-request metrics, to
// be added to the telemetry pipeline (see telemetry.Telemetry.AddCollector).
func (p *Proxy) MetricsCollector() collect.Collector { return p.metrics }

// Endpoints reports every cluster's current endpoints, by cluster name.
func (p *Proxy) Endpoints() []cluster.State {
	clusters := p.snap.Load().Clusters
	out := make([]cluster.State, 0, len(clusters))
	for _, c := range clusters {
		out = append(out, c.State())
	}
	slices.SortFunc(out, func(a, b cluster.State) int { return strings.Compare(a.Cluster, b.Cluster) })
	return out
}

// RunDiscovery runs the endpoint source of every cluster in service,
// feeding updates into the clusters, until ctx ends; Update starts those
// of the clusters it adds and stops those it removes. It returns once
// every source has stopped.
func (p *Proxy) RunDiscovery(ctx context.Context) {
	p.disc.run(ctx, func() map[string]*cluster.Cluster { return p.snap.Load().Clusters })
}

// Addr returns the bound address of the named listener, or nil.
func (p *Proxy) Addr(name string) net.Addr {
	for _, l := range p.listeners {
		if l.cfg.Name == name && l.loop != nil {
			return l.loop.ln.Addr()
		}
	}
	return nil
}

// StopAccepting closes the sockets of the inbound listeners, without
// resetting the connections waiting in their accept queues (acceptLoop.stop),
// and returns once they are closed; open connections are served on, and
// outbound listeners keep accepting until Close.
func (p *Proxy) StopAccepting() {
	var wg sync.WaitGroup
	for _, l := range p.listeners {
		if l.cfg.Role != config.RoleOutbound {
			wg.Go(l.stopAccepting)
		}
	}
	wg.Wait()
}

// terminateWait bounds how long Close waits for HTTP/2 connections to
// write their last frames.
const terminateWait = 500 * time.Millisecond

// Close stops everything now: sockets, engines and every connection.
// HTTP/2 connections get their final GOAWAY and a RST_STREAM(CANCEL) per
// open stream first.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	for _, l := range p.listeners {
		l.close()
	}
	// HTTP/2 clients are told (the final GOAWAY, a RST_STREAM(CANCEL) per
	// stream) before their connections close, within terminateWait.
	var ending []*h2.Conn
	for _, l := range p.listeners {
		ending = append(ending, l.terminateH2()...)
	}
	if len(ending) > 0 {
		t := time.NewTimer(terminateWait)
	wait:
		for _, c := range ending {
			select {
			case <-c.Done():
			case <-t.C:
				break wait
			}
		}
		t.Stop()
	}
	p.reg.CloseAll()
	p.wg.Wait()
	for _, l := range p.listeners {
		l.wait()
	}
	p.snap.Load().Close()
	p.updateMu.Lock()
	defer p.updateMu.Unlock()
	if p.sink != nil {
		// Every request has ended: its line is queued.
		return p.sink.Close()
	}
	return nil
}
