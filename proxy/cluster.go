package proxy

import (
	"context"
	"crypto/tls"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/ebb-proxy/ebb/config"
	"github.com/ebb-proxy/ebb/discovery"
	"github.com/ebb-proxy/ebb/drain"
)

// endpoint is one upstream address with its connection pool.
//
// addr and rt are read-only after construction; inflight is shared by every
// request goroutine.
type endpoint struct {
	addr     string
	state    atomic.Uint32 // a discovery.EndpointState
	inflight atomic.Int64
	removed  atomic.Bool // discovery no longer lists it
	health   health
	rt       roundTripper    // http1 clusters
	ht       *http.Transport // h2c, h2 and auto clusters
	dialer   *net.Dialer
}

// release ends one exchange counted in inflight. The last exchange of a
// removed endpoint closes the connections it leaves idle: they would
// otherwise wait in the pool for the idle timeout (an HTTP/2 upstream
// shutting down gracefully would wait for ebb to close them).
func (ep *endpoint) release() {
	if ep.inflight.Add(-1) == 0 && ep.removed.Load() {
		ep.closeIdle()
	}
}

// closeIdle closes the endpoint's idle upstream connections; those busy
// finish their requests (HTTP/2 ones their streams) first.
func (ep *endpoint) closeIdle() {
	if ep.ht != nil {
		ep.ht.CloseIdleConnections()
		return
	}
	ep.rt.close()
}

// cluster is a set of interchangeable endpoints and the policy that picks
// one for each request.
//
// cfg and the balancer choice are read-only after construction. endpoints
// is an immutable slice swapped whole when discovery updates it: a request
// loads it once and uses that snapshot.
type cluster struct {
	name      string
	cfg       config.Cluster
	endpoints atomic.Pointer[[]*endpoint] // those requests go to
	all       atomic.Pointer[[]*endpoint] // every endpoint of the last set
	rr        atomic.Uint64
	p2c       bool
	netHTTP   bool        // endpoints are reached through net/http (h2c, h2, auto)
	scheme    string      // of upstream URLs: "http" or "https"
	tls       *tls.Config // h2 and auto clusters
	metrics   *clusterMetrics
	reg       *drain.Registry // for counting dials during the drain
	budget    retryBudget
	source    discovery.Source // nil if the configuration named none usable
	// lastSet is the set last applied, for /endpoints. Written by the one
	// goroutine that updates the cluster.
	lastSet atomic.Pointer[discovery.Set]
	log     *slog.Logger
}

func newCluster(cfg config.Cluster, m *clusterMetrics, reg *drain.Registry, log *slog.Logger) *cluster {
	c := &cluster{name: cfg.Name, cfg: cfg, p2c: cfg.Balancer != config.BalancerRoundRobin, metrics: m, reg: reg, scheme: upstreamScheme(cfg.Protocol), log: log,
		netHTTP: cfg.Protocol != "" && cfg.Protocol != config.ProtocolHTTP1}
	c.budget.ratio = cfg.Retries.Budget
	eps := []*endpoint{}
	c.endpoints.Store(&eps)
	c.all.Store(&eps)
	if c.scheme == "https" {
		tc, err := clientTLSConfig(cfg)
		if err != nil {
			// Validation checked the file; it changed since. Without
			// the CA, verification fails and requests get a 502.
			log.Error("upstream TLS", "cluster", cfg.Name, "err", err)
			tc = &tls.Config{MinVersion: tls.VersionTLS12, ServerName: cfg.TLS.ServerName}
		}
		c.tls = tc
	}
	src, err := discovery.New(cfg.Discovery, log)
	if err != nil {
		log.Error("discovery", "cluster", cfg.Name, "err", err)
		return c
	}
	c.source = src
	// Load once now, so that the first requests have endpoints.
	if set, err := src.Load(); err != nil {
		log.Warn("no endpoints yet", "cluster", cfg.Name, "err", err)
	} else {
		c.update(set)
	}
	return c
}

// update applies a set from the cluster's source, unless it is empty after
// one that was not and discovery.on_empty says to keep the last one.
func (c *cluster) update(set discovery.Set) {
	if len(set.Endpoints) == 0 {
		if last := c.lastSet.Load(); last != nil && len(last.Endpoints) > 0 {
			if c.metrics != nil {
				c.metrics.emptyUpdates.Add(context.Background(), 1, c.metrics.attrs...)
			}
			if c.cfg.Discovery.OnEmpty != config.OnEmptyApply {
				c.log.Warn("discovery lists no endpoints any more; keeping the last set (discovery.on_empty: keep)",
					"cluster", c.name, "source", set.Source, "kept", len(last.Endpoints))
				return
			}
			c.log.Warn("discovery lists no endpoints any more; applying the empty set (discovery.on_empty: apply)",
				"cluster", c.name, "source", set.Source, "before", len(last.Endpoints))
		}
	}
	c.setEndpoints(set)
}

// setEndpoints publishes a new endpoint set. Endpoints that stay keep their
// pools and in-flight counts; removed ones get no new request and their
// idle connections are closed, while requests in flight on them finish.
// Updates for one cluster come from one goroutine (its source).
func (c *cluster) setEndpoints(set discovery.Set) {
	old := *c.all.Load()
	byAddr := make(map[string]*endpoint, len(old))
	wasPicked := make(map[*endpoint]bool, len(old))
	for _, ep := range old {
		byAddr[ep.addr] = ep
	}
	for _, ep := range *c.endpoints.Load() {
		wasPicked[ep] = true
	}
	all := make([]*endpoint, 0, len(set.Endpoints))
	var ready []*endpoint
	for _, e := range set.Endpoints {
		ep, ok := byAddr[e.Address]
		if ok {
			delete(byAddr, e.Address)
			ep.removed.Store(false)
		} else {
			ep = c.newEndpoint(e.Address)
		}
		ep.state.Store(uint32(e.State))
		all = append(all, ep)
		if e.State == discovery.Ready {
			ready = append(ready, ep)
		}
	}
	// Terminating (still serving) endpoints take requests only while no
	// ready endpoint is left.
	picked := ready
	if len(picked) == 0 {
		picked = all
	}
	c.all.Store(&all)
	c.endpoints.Store(&picked)
	c.lastSet.Store(&set)
	for _, gone := range byAddr {
		gone.removed.Store(true)
		gone.closeIdle()
	}
	// One that no longer takes requests (it is terminating while others
	// are ready) lets go of its idle connections too.
	isPicked := make(map[*endpoint]bool, len(picked))
	for _, ep := range picked {
		isPicked[ep] = true
	}
	for _, ep := range all {
		if wasPicked[ep] && !isPicked[ep] {
			ep.closeIdle()
		}
	}
}

func (c *cluster) newEndpoint(addr string) *endpoint {
	ep := &endpoint{addr: addr, dialer: &net.Dialer{Timeout: c.cfg.Timeouts.Connect, KeepAlive: 30 * time.Second}}
	if c.netHTTP {
		ep.ht = newHTTPTransport(c.cfg, c.tls, func(ctx context.Context) (net.Conn, error) {
			return c.dialContext(ctx, ep)
		})
		return ep
	}
	hc := &fasthttp.HostClient{
		Addr:                     addr,
		Dial:                     c.dialFunc(ep),
		MaxConns:                 c.cfg.MaxConnsPerEndpoint,
		MaxIdleConnDuration:      c.cfg.Timeouts.Idle,
		MaxConnWaitTimeout:       c.cfg.Timeouts.Connect,
		ReadBufferSize:           upstreamReadBufferSize,
		NoDefaultUserAgentHeader: true,
		DisablePathNormalizing:   true,
		// Most recently used first: the connection least likely to have
		// been closed by the upstream's keep-alive timeout.
		ConnPoolStrategy: fasthttp.LIFO,
	}
	ep.rt = newTransport(hc, c.cfg.Timeouts.Response, ep.release)
	return ep
}

// dialFunc opens upstream connections for ep's pool.
func (c *cluster) dialFunc(ep *endpoint) fasthttp.DialFunc {
	return func(string) (net.Conn, error) { return c.dial(ep) }
}

// dial opens a connection to ep. Dials are never refused by ebb itself,
// whatever the drain phase: in-flight and late requests need them.
func (c *cluster) dial(ep *endpoint) (*upConn, error) {
	nc, err := c.dialContext(context.Background(), ep)
	if err != nil {
		return nil, err
	}
	return &upConn{Conn: nc, writeTimeout: c.cfg.Timeouts.Response, ackBase: ackedBytes(nc)}, nil
}

// dialContext opens and counts a TCP connection to ep; net/http's
// Transport calls it directly.
func (c *cluster) dialContext(ctx context.Context, ep *endpoint) (net.Conn, error) {
	if c.reg.Draining() {
		c.reg.Stats.Dials.Add(1) // attempts: a failed one is worth seeing too
	}
	nc, err := ep.dialer.DialContext(ctx, "tcp", ep.addr)
	if err != nil {
		c.metrics.connectErrors.Add(context.Background(), 1, c.metrics.attrs...)
		return nil, err
	}
	c.metrics.connects.Add(context.Background(), 1, c.metrics.attrs...)
	return nc, nil
}

// pick chooses the endpoint for one request, or nil when there is none.
func (c *cluster) pick() *endpoint {
	eps := *c.endpoints.Load()
	switch n := len(eps); n {
	case 0:
		return nil
	case 1:
		return eps[0]
	default:
		var a, b *endpoint
		if !c.p2c {
			a = eps[(c.rr.Add(1)-1)%uint64(n)]
			if a.health.available(nowNano) {
				return a
			}
			return c.firstAvailable(eps, a)
		}
		// Power of two choices: the less loaded of two distinct random
		// endpoints (Mitzenmacher), which avoids herding onto the single
		// least loaded one when many requests decide at once.
		i := rand.IntN(n)
		j := rand.IntN(n - 1)
		if j >= i {
			j++
		}
		a, b = eps[i], eps[j]
		okA, okB := a.health.available(nowNano), b.health.available(nowNano)
		switch {
		case okA && okB:
			if b.inflight.Load() < a.inflight.Load() {
				return b
			}
			return a
		case okA:
			return a
		case okB:
			return b
		}
		return c.firstAvailable(eps, a)
	}
}

// firstAvailable returns an endpoint that is not ejected, starting after
// from, or from itself when every endpoint is ejected (then all are used).
func (c *cluster) firstAvailable(eps []*endpoint, from *endpoint) *endpoint {
	start := 0
	for i, ep := range eps {
		if ep == from {
			start = i
		}
	}
	for k := 1; k < len(eps); k++ {
		if ep := eps[(start+k)%len(eps)]; ep.health.available(nowNano) {
			return ep
		}
	}
	return from
}

// close closes the idle upstream connections of every endpoint.
func (c *cluster) close() {
	for _, ep := range *c.all.Load() {
		ep.closeIdle()
	}
}
