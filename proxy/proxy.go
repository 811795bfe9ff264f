// Package proxy is ebb's data path: listeners with ebb's own accept loop,
// the HTTP/1 engine on fasthttp, routing, clusters and their balancers, the
// upstream transport, header rules, timeouts and limits.
//
// Routes and clusters reach the request path as an immutable snapshot
// behind an atomic pointer: a request loads it once and uses it to the end,
// and an update swaps in a new one without a lock.
package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/ebb-proxy/ebb/config"
	"github.com/ebb-proxy/ebb/discovery"
	"github.com/ebb-proxy/ebb/drain"
)

// ErrClosed is returned by Start after Shutdown or Close.
var ErrClosed = errors.New("proxy: closed")

// snapshot is the dynamic configuration compiled for the request path.
// It is immutable once published.
type snapshot struct {
	tables   []*routeTable // indexed like the static listeners
	clusters map[string]*cluster
}

// Proxy serves every listener of one configuration.
//
// listeners is fixed at New. snap is swapped by Update. mu guards started
// and closed.
type Proxy struct {
	log       *slog.Logger
	access    *slog.Logger // nil unless telemetry.log.access
	reg       *drain.Registry
	metrics   *metrics
	listeners []*listener
	snap      atomic.Pointer[snapshot]
	// goAwayGrace is drain.http2.goaway_grace: the longest wait for the
	// PING acknowledgement between the two GOAWAYs.
	goAwayGrace time.Duration

	mu      sync.Mutex
	started bool
	closed  bool
	wg      sync.WaitGroup // serving goroutines
}

// New builds a proxy for cfg. It binds nothing until Start.
func New(cfg *config.Config, reg *drain.Registry, meter metric.Meter, log *slog.Logger) (*Proxy, error) {
	m, err := newMetrics(meter, reg)
	if err != nil {
		return nil, fmt.Errorf("proxy: creating instruments: %w", err)
	}
	p := &Proxy{log: log, reg: reg, metrics: m, goAwayGrace: cfg.Drain.HTTP2.GoawayGrace}
	if cfg.Telemetry.Log.Access {
		p.access = log.With("log", "access")
	}
	for i, l := range cfg.Listeners {
		p.listeners = append(p.listeners, newListener(p, i, l))
	}
	p.snap.Store(p.build(cfg))
	return p, nil
}

// build compiles routes and clusters. A later Update will carry endpoints
// and pools of unchanged clusters over, since they must outlive a reload.
func (p *Proxy) build(cfg *config.Config) *snapshot {
	s := &snapshot{clusters: make(map[string]*cluster, len(cfg.Clusters))}
	for _, c := range cfg.Clusters {
		s.clusters[c.Name] = newCluster(c, p.metrics.forCluster(c.Name), p.reg, p.log)
	}
	for _, l := range cfg.Listeners {
		t := &routeTable{noRoute: p.metrics.forRoute(l.Name, "")}
		byCluster := map[string]*routeMetrics{}
		for _, r := range l.Routes {
			rm, ok := byCluster[r.Cluster]
			if !ok {
				rm = p.metrics.forRoute(l.Name, r.Cluster)
				byCluster[r.Cluster] = rm
			}
			t.routes = append(t.routes, compileRoute(r, s.clusters[r.Cluster], rm))
		}
		s.tables = append(s.tables, t)
	}
	return s
}

// Start binds every listener and starts serving. If one cannot be bound,
// those already bound are closed and the error names the listener.
func (p *Proxy) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ErrClosed
	}
	if p.started {
		return errors.New("proxy: already started")
	}
	for i, l := range p.listeners {
		if err := l.bind(); err != nil {
			for _, b := range p.listeners[:i] {
				b.close()
			}
			return err
		}
	}
	p.started = true
	for _, l := range p.listeners {
		p.wg.Go(l.serve)
	}
	return nil
}

// MetricsProducer returns the producer of the per-request metrics, to be
// added to the telemetry pipeline (see telemetry.Telemetry.AddProducer).
func (p *Proxy) MetricsProducer() sdkmetric.Producer { return p.metrics }

// ClusterState is what /endpoints shows of one cluster.
type ClusterState struct {
	Cluster   string          `json:"cluster"`
	Source    string          `json:"source"`
	Updated   time.Time       `json:"updated,omitzero"`
	Endpoints []EndpointState `json:"endpoints"`
}

// EndpointState is what /endpoints shows of one endpoint.
type EndpointState struct {
	Address string `json:"address"`
	// State is ready, serving (terminating, used only while no endpoint
	// is ready) or terminating.
	State    string `json:"state"`
	InFlight int64  `json:"in_flight"`
	// Ejected: passive health has taken it out of the balancer's choice
	// for now; Ejections counts how often.
	Ejected   bool  `json:"ejected"`
	Ejections int64 `json:"ejections"`
}

// Endpoints reports every cluster's current endpoints, by cluster name.
func (p *Proxy) Endpoints() []ClusterState {
	clusters := p.snap.Load().clusters
	out := make([]ClusterState, 0, len(clusters))
	for _, c := range clusters {
		st := ClusterState{Cluster: c.name, Endpoints: []EndpointState{}}
		if set := c.lastSet.Load(); set != nil {
			st.Source, st.Updated = set.Source, set.Updated
		}
		for _, ep := range *c.all.Load() {
			st.Endpoints = append(st.Endpoints, EndpointState{Address: ep.addr,
				State: discovery.EndpointState(ep.state.Load()).String(), InFlight: ep.inflight.Load(),
				Ejected: !ep.health.available(nowNano), Ejections: ep.health.ejections.Load()})
		}
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b ClusterState) int { return strings.Compare(a.Cluster, b.Cluster) })
	return out
}

// RunDiscovery runs every cluster's endpoint source, feeding updates into
// the clusters, until ctx ends. It returns once every source has stopped.
func (p *Proxy) RunDiscovery(ctx context.Context) {
	var wg sync.WaitGroup
	for _, c := range p.snap.Load().clusters {
		if c.source == nil {
			continue
		}
		wg.Go(func() {
			if err := c.source.Run(ctx, c.update); err != nil {
				p.log.Error("discovery stopped", "cluster", c.name, "err", err)
			}
		})
	}
	wg.Wait()
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

// StopAccepting closes the sockets of the inbound listeners; open
// connections are served on, and outbound listeners keep accepting until
// Close.
func (p *Proxy) StopAccepting() {
	for _, l := range p.listeners {
		if l.cfg.Role != config.RoleOutbound {
			l.stopAccepting()
		}
	}
}

// Close stops everything now: sockets, engines and every connection.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	for _, l := range p.listeners {
		l.close()
	}
	p.reg.CloseAll()
	p.wg.Wait()
	for _, l := range p.listeners {
		l.wait()
	}
	p.closeUpstreams()
	return nil
}

func (p *Proxy) closeUpstreams() {
	for _, c := range p.snap.Load().clusters {
		c.close()
	}
}
