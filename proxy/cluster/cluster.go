// Package cluster holds clusters: sets of interchangeable endpoints fed by
// discovery, the balancer that picks one per request (power of two
// choices on requests in flight or on peak-EWMA latency, or round robin),
// passive health (ejection of failing endpoints), and the retry policy with its budget, which decides whether
// a failed request goes to another endpoint. The exchange itself is
// package upstream's.
package cluster

import (
	"context"
	"crypto/tls"
	"log/slog"
	"math/rand/v2"
	"net"
	"slices"
	"sync/atomic"
	"time"

	"github.com/ebb-proxy/ebb/config"
	"github.com/ebb-proxy/ebb/discovery"
	"github.com/ebb-proxy/ebb/proxy/downstream"
	"github.com/ebb-proxy/ebb/proxy/h2client"
	"github.com/ebb-proxy/ebb/proxy/metrics"
	"github.com/ebb-proxy/ebb/proxy/upstream"
)

// Endpoint is one upstream address with its connection pool.
//
// addr and rt are read-only after construction; inflight is shared by every
// request goroutine.
type Endpoint struct {
	addr     string
	state    atomic.Uint32 // a discovery.EndpointState
	inflight atomic.Int64
	removed  atomic.Bool // discovery no longer lists it
	health   health
	ewma     ewma // the ewma balancer's latency estimate
	// rt is the HTTP/1 transport of http1 clusters, and of auto ones for
	// an endpoint that speaks HTTP/1.1 (over TLS; speaksH1); h2 the
	// HTTP/2 client of h2c, h2 and auto clusters.
	rt       upstream.H1
	h2       *h2client.Pool
	h2dial   func(context.Context) (net.Conn, error)
	speaksH1 atomic.Bool // an auto endpoint's TLS handshake negotiated HTTP/1.1
	h1tls    *tls.Config // rt's connections to an auto cluster's endpoint
	// spare is the connection whose handshake found that an auto
	// cluster's endpoint speaks HTTP/1.1, until rt takes it.
	spare  atomic.Pointer[tls.Conn]
	dialer *net.Dialer
}

// Addr returns the endpoint's address (host:port).
func (ep *Endpoint) Addr() string { return ep.addr }

// Release ends one exchange counted in inflight. The last exchange of a
// removed endpoint closes the connections it leaves idle: they would
// otherwise wait in the pool for the idle timeout (an HTTP/2 upstream
// shutting down gracefully would wait for ebb to close them).
func (ep *Endpoint) Release() {
	if ep.inflight.Add(-1) == 0 && ep.removed.Load() {
		ep.closeIdle()
	}
}

// closeIdle closes the endpoint's idle upstream connections; those busy
// finish their requests (HTTP/2 ones their streams) first.
func (ep *Endpoint) closeIdle() {
	if ep.h2 != nil {
		ep.h2.CloseIdle()
	}
	if ep.rt != nil {
		ep.rt.CloseIdle()
	}
	if tlc := ep.spare.Swap(nil); tlc != nil {
		tlc.Close()
	}
}

// Cluster is a set of interchangeable endpoints and the policy that picks
// one for each request.
//
// cfg and the balancer choice are read-only after construction. endpoints
// is an immutable slice swapped whole when discovery updates it: a request
// loads it once and uses that snapshot.
type Cluster struct {
	name      string
	cfg       config.Cluster
	endpoints atomic.Pointer[[]*Endpoint] // those requests go to
	all       atomic.Pointer[[]*Endpoint] // every endpoint of the last set
	// leaving holds endpoints discovery removed while exchanges were in
	// flight on them, for /endpoints; pruned at the next update. Written
	// by the one goroutine that updates the cluster.
	leaving atomic.Pointer[[]*Endpoint]
	rr      atomic.Uint64
	// inFlight counts the requests Admit let in and that have not left.
	inFlight atomic.Int64
	balancer string      // config.BalancerLeastRequest, BalancerEWMA or BalancerRoundRobin
	netHTTP  bool        // not http1: requests take net/http's form, or HTTP/2's own (see NetHTTP)
	scheme   string      // of upstream URLs: "http" or "https"
	tls      *tls.Config // h2 and auto clusters
	metrics  *metrics.Cluster
	reg      *downstream.Registry // for counting dials during the drain
	budget   budget
	source   discovery.Source // nil if the configuration named none usable
	// lastSet is the set last applied, for /endpoints. Written by the one
	// goroutine that updates the cluster.
	lastSet atomic.Pointer[discovery.Set]
	log     *slog.Logger
}

// New builds the cluster cfg describes and loads its endpoints once from
// its discovery source (RunDiscovery follows the source afterwards). m
// may be nil (no metrics).
func New(cfg config.Cluster, m *metrics.Cluster, reg *downstream.Registry, log *slog.Logger) *Cluster {
	if cfg.OutlierDetection == (config.OutlierDetection{}) {
		cfg.OutlierDetection = config.DefaultOutlierDetection() // a configuration not loaded from a file (tests)
	}
	c := &Cluster{name: cfg.Name, cfg: cfg, balancer: balancerOf(cfg.Balancer), metrics: m, reg: reg, scheme: upstream.Scheme(cfg.Protocol), log: log,
		netHTTP: cfg.Protocol != "" && cfg.Protocol != config.ProtocolHTTP1}
	c.budget.ratio = cfg.Retries.Budget
	eps := []*Endpoint{}
	c.endpoints.Store(&eps)
	c.all.Store(&eps)
	if c.scheme == "https" {
		tc, err := upstream.ClientTLSConfig(cfg)
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
		c.Update(set)
	}
	return c
}

// Update applies a set from the cluster's source, unless it is empty after
// one that was not and discovery.on_empty says to keep the last one.
func (c *Cluster) Update(set discovery.Set) {
	if len(set.Endpoints) == 0 {
		if last := c.lastSet.Load(); last != nil && len(last.Endpoints) > 0 {
			c.metrics.EmptyUpdate()
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
func (c *Cluster) setEndpoints(set discovery.Set) {
	old := *c.all.Load()
	byAddr := make(map[string]*Endpoint, len(old))
	wasPicked := make(map[*Endpoint]bool, len(old))
	for _, ep := range old {
		byAddr[ep.addr] = ep
	}
	for _, ep := range *c.endpoints.Load() {
		wasPicked[ep] = true
	}
	all := make([]*Endpoint, 0, len(set.Endpoints))
	var ready []*Endpoint
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
	// The removed ones are marked and listed as leaving before they
	// disappear from all: at no moment does State omit an endpoint that
	// an exchange has claimed (see claim).
	var leaving []*Endpoint
	if l := c.leaving.Load(); l != nil {
		for _, ep := range *l {
			if ep.inflight.Load() > 0 && ep.removed.Load() {
				leaving = append(leaving, ep)
			}
		}
	}
	for _, gone := range byAddr {
		gone.removed.Store(true)
		leaving = append(leaving, gone)
	}
	c.leaving.Store(&leaving)
	c.all.Store(&all)
	c.endpoints.Store(&picked)
	c.lastSet.Store(&set)
	for _, gone := range byAddr {
		gone.closeIdle()
	}
	// One that no longer takes requests (it is terminating while others
	// are ready) lets go of its idle connections too.
	isPicked := make(map[*Endpoint]bool, len(picked))
	for _, ep := range picked {
		isPicked[ep] = true
	}
	for _, ep := range all {
		if wasPicked[ep] && !isPicked[ep] {
			ep.closeIdle()
		}
	}
}

func (c *Cluster) newEndpoint(addr string) *Endpoint {
	ep := &Endpoint{addr: addr, dialer: &net.Dialer{Timeout: c.cfg.Timeouts.Connect, KeepAlive: 30 * time.Second}}
	switch c.cfg.Protocol {
	case config.ProtocolH2C, config.ProtocolH2:
		ep.h2 = h2client.NewPool(c.h2Config(ep))
		return ep
	case config.ProtocolAuto:
		// HTTP/2 through ebb's own client when the handshake says h2,
		// the HTTP/1 transport for an endpoint that says HTTP/1.1. Its
		// exchanges end as the HTTP/2 client's do, when ExchangeHTTP's
		// caller releases the endpoint: the transport's own end is none.
		ep.h2 = h2client.NewPool(c.h2Config(ep))
		ep.h1tls = c.endpointTLS(ep, []string{"http/1.1"})
		ep.rt = upstream.NewH1(addr, &c.cfg, func() (net.Conn, error) { return c.dialHTTP1(ep) }, func() {})
		return ep
	}
	ep.rt = upstream.NewH1(addr, &c.cfg, func() (net.Conn, error) { return c.Dial(ep) }, ep.Release)
	return ep
}

// Dial opens a connection to ep (upgrades use one of their own). Dials are never refused by ebb itself,
// whatever the drain phase: in-flight and late requests need them.
func (c *Cluster) Dial(ep *Endpoint) (*upstream.Conn, error) {
	nc, err := c.dialContext(context.Background(), ep)
	if err != nil {
		return nil, err
	}
	return upstream.NewConn(nc, c.cfg.Timeouts.Response), nil
}

// dialContext opens and counts a TCP connection to ep.
func (c *Cluster) dialContext(ctx context.Context, ep *Endpoint) (net.Conn, error) {
	if c.reg.Draining() {
		c.reg.Stats.Dials.Add(1) // attempts: a failed one is worth seeing too
	}
	nc, err := ep.dialer.DialContext(ctx, "tcp", ep.addr)
	if err != nil {
		c.metrics.ConnectError()
		return nil, err
	}
	c.metrics.Connect()
	return nc, nil
}

// Pick chooses the endpoint for one request, or nil when there is none.
// The exchange claims it (see claim) when it starts.
func (c *Cluster) Pick() *Endpoint {
	eps := *c.endpoints.Load()
	switch n := len(eps); n {
	case 0:
		return nil
	case 1:
		return eps[0]
	default:
		if c.balancer == config.BalancerRoundRobin {
			a := eps[(c.rr.Add(1)-1)%uint64(n)]
			if a.health.available(nowNano) {
				return a
			}
			return c.firstAvailable(eps, a)
		}
		// Power of two choices: the less loaded of two distinct random
		// endpoints (Mitzenmacher), which avoids herding onto the single
		// least loaded one when many requests decide at once. Load is
		// the requests in flight (least_request), or those times the
		// latency estimate (ewma).
		i := rand.IntN(n)
		j := rand.IntN(n - 1)
		if j >= i {
			j++
		}
		a, b := eps[i], eps[j]
		okA, okB := a.health.available(nowNano), b.health.available(nowNano)
		switch {
		case okA && okB:
			if c.balancer == config.BalancerEWMA {
				now := nowNano()
				if ewmaLoad(b, now) < ewmaLoad(a, now) {
					return b
				}
				return a
			}
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

// balancerOf maps the configuration's balancer to the one used: p2c is
// least_request's former name.
func balancerOf(name string) string {
	if name == config.BalancerP2C {
		return config.BalancerLeastRequest
	}
	return name
}

// claim counts one exchange on ep, picked for it a moment ago, and
// returns the endpoint to send it to: ep, unless discovery removed ep
// since; then another one picked now (ep itself when no other is left).
//
// Counting before looking at removed, both sequentially consistent, is
// what makes the end of a removal observable: once removed is set and
// the count has been seen at zero, no exchange will ever start on the
// endpoint again, so a backend told to stop after /endpoints stops listing
// it (State lists it as removed until then) gets no request it would have
// to race with its own shutdown (Go's http.Server.Shutdown closes a
// connection whose request it has received but not yet read, which no
// HTTP/1.1 client can tell from a crash in the handler).
func (c *Cluster) claim(ep *Endpoint) *Endpoint {
	for tries := 1; ; tries++ {
		ep.inflight.Add(1)
		if !ep.removed.Load() || tries == 3 {
			return ep
		}
		next := c.Pick()
		if next == nil || next == ep {
			return ep
		}
		ep.Release()
		ep = next
	}
}

// firstAvailable returns an endpoint that is not ejected, starting after
// from, or from itself when every endpoint is ejected (then all are used).
func (c *Cluster) firstAvailable(eps []*Endpoint, from *Endpoint) *Endpoint {
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

// Retire takes a cluster a reload removed out of service: its endpoints
// are removed, as discovery removes one (requests in flight finish, then
// their connections close instead of going back to a pool), and their
// idle connections close now.
func (c *Cluster) Retire() {
	for _, ep := range *c.all.Load() {
		ep.removed.Store(true)
		ep.closeIdle()
	}
}

// close closes the idle upstream connections of every endpoint.
func (c *Cluster) Close() {
	for _, ep := range *c.all.Load() {
		ep.closeIdle()
	}
}

// Name returns the cluster's name.
func (c *Cluster) Name() string { return c.name }

// Config returns the cluster's configuration. It must not be changed.
func (c *Cluster) Config() *config.Cluster { return &c.cfg }

// NetHTTP reports whether the cluster's protocol is other than http1:
// its requests are built in net/http's form (ExchangeHTTP, through ebb's
// HTTP/2 client or, for an auto endpoint that speaks HTTP/1.1, its
// HTTP/1 transport), or, from HTTP/2 clients to h2c and h2 clusters, in
// HTTP/2's own (H2, ExchangeH2); not in fasthttp's (ExchangeH1).
func (c *Cluster) NetHTTP() bool { return c.netHTTP }

// Scheme returns the scheme of the URLs requests to the endpoints use:
// "http", or "https" for h2 and auto clusters.
func (c *Cluster) Scheme() string { return c.scheme }

// CountRequest counts a request sent to the cluster at now, for the retry
// budget.
func (c *Cluster) CountRequest(now time.Time) { c.budget.request(now) }

// Admit counts a request in flight to the cluster, reporting false (and
// counting nothing) when max_in_flight requests already are. A request
// admitted calls Leave once it is over.
func (c *Cluster) Admit() bool {
	n := c.inFlight.Add(1)
	if max := int64(c.cfg.MaxInFlight); max > 0 && n > max {
		c.inFlight.Add(-1)
		return false
	}
	return true
}

// Leave ends a request Admit counted.
func (c *Cluster) Leave() { c.inFlight.Add(-1) }

// InFlight returns the requests Admit let in that have not left.
func (c *Cluster) InFlight() int64 { return c.inFlight.Load() }

// Metrics returns the cluster's counters (nil: none).
func (c *Cluster) Metrics() *metrics.Cluster { return c.metrics }

// RunDiscovery follows the cluster's discovery source, applying each set
// it sends, until ctx ends. It returns at once when the configuration
// named no usable source.
func (c *Cluster) RunDiscovery(ctx context.Context) error {
	if c.source == nil {
		return nil
	}
	return c.source.Run(ctx, c.Update)
}

// State is what /endpoints shows of one cluster.
type State struct {
	Cluster   string          `json:"cluster"`
	Source    string          `json:"source"`
	Updated   time.Time       `json:"updated,omitzero"`
	Endpoints []EndpointState `json:"endpoints"`
}

// EndpointState is what /endpoints shows of one endpoint.
type EndpointState struct {
	Address string `json:"address"`
	// State is ready, serving (terminating, used only while no endpoint
	// is ready) or terminating; removed for an endpoint discovery no
	// longer lists that still has exchanges in flight (listed until the
	// last one ends: from then on ebb sends it nothing, see claim).
	State    string `json:"state"`
	InFlight int64  `json:"in_flight"`
	// Ejected: passive health has taken it out of the balancer's choice
	// for now; Ejections counts how often.
	Ejected   bool  `json:"ejected"`
	Ejections int64 `json:"ejections"`
	// LatencyMS is the ewma balancer's estimate of its latency to a
	// response head, decayed to now (absent with the other balancers,
	// and before the endpoint's first answer).
	LatencyMS float64 `json:"latency_estimate_ms,omitempty"`
}

// State reports the cluster's current endpoints.
func (c *Cluster) State() State {
	st := State{Cluster: c.name, Endpoints: []EndpointState{}}
	if set := c.lastSet.Load(); set != nil {
		st.Source, st.Updated = set.Source, set.Updated
	}
	eps := *c.all.Load()
	now := nowNano()
	for _, ep := range eps {
		st.Endpoints = append(st.Endpoints, EndpointState{Address: ep.addr,
			State: discovery.EndpointState(ep.state.Load()).String(), InFlight: ep.inflight.Load(),
			Ejected: !ep.health.available(nowNano), Ejections: ep.health.ejections.Load(), LatencyMS: c.latencyMS(ep, now)})
	}
	if l := c.leaving.Load(); l != nil {
		for _, ep := range *l {
			// One read of all from before the update lists it already.
			if n := ep.inflight.Load(); n > 0 && ep.removed.Load() && !slices.Contains(eps, ep) {
				st.Endpoints = append(st.Endpoints, EndpointState{Address: ep.addr, State: "removed", InFlight: n,
					Ejected: !ep.health.available(nowNano), Ejections: ep.health.ejections.Load(), LatencyMS: c.latencyMS(ep, now)})
			}
		}
	}
	return st
}
