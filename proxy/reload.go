package proxy

import (
	"context"
	"errors"
	"reflect"
	"sort"
	"sync"

	"github.com/ebb-proxy/ebb/config"
	"github.com/ebb-proxy/ebb/proxy/cluster"
	"github.com/ebb-proxy/ebb/proxy/route"
)

// Change says what a configuration change did to the proxy (Update), or
// would have done.
type Change struct {
	// Clusters added, removed, rebuilt because their configuration
	// changed, and kept as they were (endpoints, pools, health and
	// discovery going on).
	Added   []string `json:"added,omitempty"`
	Removed []string `json:"removed,omitempty"`
	Rebuilt []string `json:"rebuilt,omitempty"`
	Kept    []string `json:"kept,omitempty"`
	// Restart lists the changed settings that only a restart applies:
	// they keep their running values.
	Restart []string `json:"restart,omitempty"`
}

// ErrListenersChanged refuses a configuration whose listeners are not the
// running ones (by name, in order): adding, removing or renaming a
// listener needs a restart.
var ErrListenersChanged = errors.New("listeners added, removed, renamed or reordered: only a restart applies that")

// Update applies the dynamic part of cfg (a configuration loaded and
// validated as a whole): routes and clusters, each listener's
// limits.max_body_bytes, limits.max_in_flight, headers and paths, and
// telemetry.access_log's enabled and format, swapped
// in one atomic step. Requests in flight finish on the snapshot they
// started with; a cluster whose configuration is unchanged is taken over
// with its endpoints, pools, health state and running discovery; a
// removed cluster's connections close once their exchanges are over. The
// listeners' other settings (address, role, TLS, timeouts, header limit,
// http2) and the other sections keep the values ebb started with and,
// when cfg changes them, are reported in Change.Restart. Update fails,
// changing nothing, when the listeners are not the running ones.
func (p *Proxy) Update(cfg *config.Config) (Change, error) {
	p.updateMu.Lock()
	defer p.updateMu.Unlock()
	var ch Change
	if len(cfg.Listeners) != len(p.listeners) {
		return ch, ErrListenersChanged
	}
	for i, l := range p.listeners {
		if cfg.Listeners[i].Name != l.cfg.Name {
			return ch, ErrListenersChanged
		}
		ch.Restart = append(ch.Restart, listenerRestart(l.cfg, cfg.Listeners[i])...)
	}
	ch.Restart = append(ch.Restart, p.staticRestart(cfg)...)
	prev := p.snap.Load()
	log, err := p.accessLog(cfg)
	if err != nil {
		return ch, err
	}
	next := route.Build(cfg, p.metrics, p.reg, p.log, prev)
	next.Access, next.Tracer = log, p.tracer
	for name, c := range next.Clusters {
		switch old := prev.Clusters[name]; {
		case old == c:
			ch.Kept = append(ch.Kept, name)
		case old != nil:
			ch.Rebuilt = append(ch.Rebuilt, name)
		default:
			ch.Added = append(ch.Added, name)
		}
	}
	var gone []*cluster.Cluster
	for name, c := range prev.Clusters {
		if next.Clusters[name] != c {
			gone = append(gone, c)
			if next.Clusters[name] == nil {
				ch.Removed = append(ch.Removed, name)
			}
		}
	}
	for _, s := range [][]string{ch.Added, ch.Removed, ch.Rebuilt, ch.Kept} {
		sort.Strings(s)
	}
	p.snap.Store(next)
	for _, c := range next.Clusters {
		if prev.Clusters[c.Name()] != c {
			p.disc.start(c)
		}
	}
	for _, c := range gone {
		// Its discovery must be over first: an update after the retiring
		// would put its endpoints back in service.
		p.disc.stop(c)
		c.Retire()
	}
	return ch, nil
}

// listenerRestart names the settings of a listener that differ between
// old and new, but for those Update applies: its routes,
// limits.max_body_bytes, limits.max_in_flight, headers and paths.
func listenerRestart(old, new config.Listener) []string {
	old.Routes, new.Routes = nil, nil
	old.Limits.MaxBodyBytes, new.Limits.MaxBodyBytes = 0, 0
	old.Limits.MaxInFlight, new.Limits.MaxInFlight = 0, 0
	old.Headers, new.Headers = config.ForwardingHeaders{}, config.ForwardingHeaders{}
	old.Paths, new.Paths = config.Paths{}, config.Paths{}
	if reflect.DeepEqual(old, new) {
		return nil
	}
	var out []string
	ov, nv := reflect.ValueOf(old), reflect.ValueOf(new)
	for i := range ov.NumField() {
		f := ov.Type().Field(i)
		if !reflect.DeepEqual(ov.Field(i).Interface(), nv.Field(i).Interface()) {
			out = append(out, "listeners."+old.Name+"."+keyOf(f))
		}
	}
	return out
}

// staticRestart names the top-level sections other than listeners and
// clusters that differ from the configuration ebb started with (but for
// telemetry.access_log's enabled and format, which Update applies).
func (p *Proxy) staticRestart(cfg *config.Config) []string {
	var out []string
	running, next := p.cfgStatic, *cfg
	running.Telemetry.AccessLog.Enabled, next.Telemetry.AccessLog.Enabled = false, false
	running.Telemetry.AccessLog.Format, next.Telemetry.AccessLog.Format = "", ""
	ov, nv := reflect.ValueOf(running), reflect.ValueOf(next)
	for i := range ov.NumField() {
		f := ov.Type().Field(i)
		key := keyOf(f)
		if key == "" || key == "-" || key == "listeners" || key == "clusters" {
			continue
		}
		if !reflect.DeepEqual(ov.Field(i).Interface(), nv.Field(i).Interface()) {
			out = append(out, key)
		}
	}
	return out
}

// keyOf is a configuration field's key (its "key" tag), "" for fields
// that are not configuration keys.
func keyOf(f reflect.StructField) string { return f.Tag.Get("key") }

// discoveries runs the discovery source of each cluster in service, from
// RunDiscovery until its context ends; Update starts those of new
// clusters and stops those of removed ones.
type discoveries struct {
	mu      sync.Mutex
	ctx     context.Context // nil until RunDiscovery
	running map[*cluster.Cluster]*discovery
	wg      sync.WaitGroup
	log     func(c *cluster.Cluster, err error)
}

type discovery struct {
	cancel context.CancelFunc
	done   chan struct{}
}

func (d *discoveries) start(c *cluster.Cluster) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.ctx == nil || d.ctx.Err() != nil {
		return // RunDiscovery starts it, or has ended
	}
	if d.running == nil {
		d.running = make(map[*cluster.Cluster]*discovery)
	}
	if d.running[c] != nil {
		return
	}
	ctx, cancel := context.WithCancel(d.ctx)
	r := &discovery{cancel: cancel, done: make(chan struct{})}
	d.running[c] = r
	d.wg.Go(func() {
		defer close(r.done)
		defer cancel()
		if err := c.RunDiscovery(ctx); err != nil {
			d.log(c, err)
		}
	})
}

// stop ends c's discovery and waits for it.
func (d *discoveries) stop(c *cluster.Cluster) {
	d.mu.Lock()
	r := d.running[c]
	delete(d.running, c)
	d.mu.Unlock()
	if r != nil {
		r.cancel()
		<-r.done
	}
}

// run starts the discovery of the clusters in service (current, called
// once ctx is set, so that a concurrent Update's are not missed) and
// waits until ctx has ended and every discovery with it.
func (d *discoveries) run(ctx context.Context, current func() map[string]*cluster.Cluster) {
	d.mu.Lock()
	d.ctx = ctx
	d.mu.Unlock()
	for _, c := range current() {
		d.start(c)
	}
	<-ctx.Done()
	d.wg.Wait()
}
