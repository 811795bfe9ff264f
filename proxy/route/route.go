// Package route compiles the dynamic configuration for the request path:
// each listener's routing table (host and path prefix, first match wins)
// with the clusters its routes send to, published together as one
// immutable Snapshot.
package route

import (
	"log/slog"
	"net/netip"
	"reflect"
	"strings"

	"github.com/ebb-proxy/ebb/config"
	"github.com/ebb-proxy/ebb/proxy/access"
	"github.com/ebb-proxy/ebb/proxy/cluster"
	"github.com/ebb-proxy/ebb/proxy/downstream"
	"github.com/ebb-proxy/ebb/proxy/headers"
	"github.com/ebb-proxy/ebb/proxy/metrics"
	"github.com/ebb-proxy/ebb/proxy/paths"
	"github.com/ebb-proxy/ebb/proxy/tracing"
)

// Snapshot is the dynamic configuration compiled for the request path.
// It is immutable once published: a request loads it once and uses it to
// the end.
type Snapshot struct {
	Tables   []*Table // indexed like the configuration's listeners
	Clusters map[string]*cluster.Cluster
	// Access receives one line per request (telemetry.access_log); nil:
	// off. Build leaves it to the caller.
	Access *access.Log
	// Tracer makes the requests' spans (telemetry.tracing); nil: off.
	// Build leaves it to the caller.
	Tracer *tracing.Tracer
}

// Build compiles routes and clusters of cfg. A cluster of prev (nil: none)
// whose configuration is the same is taken over as it is: its endpoints,
// pools, health and discovery go on. Each new cluster loads its endpoints
// once from its source; the caller runs its discovery afterwards.
func Build(cfg *config.Config, m *metrics.Metrics, reg *downstream.Registry, log *slog.Logger, prev *Snapshot) *Snapshot {
	s := &Snapshot{Clusters: make(map[string]*cluster.Cluster, len(cfg.Clusters))}
	for _, c := range cfg.Clusters {
		if prev != nil {
			if old := prev.Clusters[c.Name]; old != nil && reflect.DeepEqual(*old.Config(), c) {
				s.Clusters[c.Name] = old
				continue
			}
		}
		s.Clusters[c.Name] = cluster.New(c, m.ForCluster(c.Name), reg, log)
	}
	for _, l := range cfg.Listeners {
		t := &Table{NoRoute: m.ForRoute(l.Name, ""), MaxBodyBytes: int64(l.Limits.MaxBodyBytes), MaxInFlight: int64(l.Limits.MaxInFlight), TrustForwarded: l.Headers.TrustForwarded,
			Via10: via("1.0", l.Headers.Via), Via11: via("1.1", l.Headers.Via), Via2: via("2", l.Headers.Via),
			TrustedProxies: trustedProxies(l.Headers.TrustedProxies), RequestID: requestIDPolicy(l.Headers.RequestID),
			Paths: pathOptions(l.Paths)}
		byCluster := map[string]*metrics.Route{}
		for _, r := range l.Routes {
			rm, ok := byCluster[r.Cluster]
			if !ok {
				rm = m.ForRoute(l.Name, r.Cluster)
				byCluster[r.Cluster] = rm
			}
			t.routes = append(t.routes, compile(r, s.Clusters[r.Cluster], rm))
		}
		s.Tables = append(s.Tables, t)
	}
	return s
}

// Close closes the idle upstream connections of every cluster.
func (s *Snapshot) Close() {
	for _, c := range s.Clusters {
		c.Close()
	}
}

// Route is one compiled routing rule.
type Route struct {
	host     []byte // lower case, without "*."; empty matches any host
	wildcard bool   // host was "*.example.com": match subdomains only
	prefix   []byte // empty matches any path
	// Cluster receives the requests the route matches.
	Cluster *cluster.Cluster
	// Metrics counts them.
	Metrics *metrics.Route
}

// Table holds one listener's routes in order; the first match wins.
type Table struct {
	routes []Route
	// NoRoute counts requests no route matched (and those refused before
	// routing).
	NoRoute *metrics.Route
	// The listener's settings a reload changes live:
	// limits.max_body_bytes (0: none), limits.max_in_flight (0: none) and
	// headers.trust_forwarded.
	MaxBodyBytes int64
	MaxInFlight  int64
	// Via10, Via11 and Via2 are what headers.via adds to Via for a
	// message received in HTTP/1.0, HTTP/1.1 and HTTP/2 ("1.1 ebb"); nil
	// when it is off.
	Via10, Via11, Via2 []byte
	TrustForwarded     bool
	TrustedProxies     []netip.Prefix
	// RequestID is headers.request_id.
	RequestID headers.RequestIDPolicy
	// Paths is the listener's paths block: how a request's path is
	// rewritten before routing (all off: not at all).
	Paths paths.Options
}

// ViaFor returns what headers.via adds to the Via of a response an
// upstream sent in HTTP/major (2, else 1.1).
func (t *Table) ViaFor(major int) []byte {
	if major == 2 {
		return t.Via2
	}
	return t.Via11
}

// pathOptions maps a listener's paths block to its options.
func pathOptions(p config.Paths) paths.Options {
	o := paths.Options{Normalize: p.Normalize, MergeSlashes: p.MergeSlashes}
	switch p.EscapedSlashes {
	case config.EscapedSlashesReject:
		o.EscapedSlashes = paths.RejectEscaped
	case config.EscapedSlashesDecode:
		o.EscapedSlashes = paths.DecodeEscaped
	}
	return o
}

// requestIDPolicy maps headers.request_id to its policy.
func requestIDPolicy(v string) headers.RequestIDPolicy {
	switch v {
	case config.RequestIDTrusted:
		return headers.RequestIDTrusted
	case config.RequestIDAny:
		return headers.RequestIDAny
	}
	return headers.RequestIDOff
}

// via returns the Via entry for a message received in version, or nil
// when name is empty.
func via(version, name string) []byte {
	if name == "" {
		return nil
	}
	return []byte(version + " " + name)
}

// Trusts reports whether the forwarding headers of peer are built on
// (headers.trusted_proxies, or trust_forwarded for every peer).
func (t *Table) Trusts(peer netip.Addr) bool {
	if t.TrustForwarded {
		return true
	}
	for _, p := range t.TrustedProxies {
		if p.Contains(peer) {
			return true
		}
	}
	return false
}

// trustedProxies parses headers.trusted_proxies, validated already: an
// address is a prefix of its full length.
func trustedProxies(list []string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range list {
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p.Masked())
		} else if a, err := netip.ParseAddr(s); err == nil {
			out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
		}
	}
	return out
}

func compile(r config.Route, c *cluster.Cluster, m *metrics.Route) Route {
	host := strings.ToLower(r.Match.Host)
	wildcard := strings.HasPrefix(host, "*.")
	if wildcard {
		host = host[1:] // keep the dot: ".example.com"
	}
	return Route{host: []byte(host), wildcard: wildcard, prefix: []byte(r.Match.PathPrefix), Cluster: c, Metrics: m}
}

// Match returns the first route for host (as sent, possibly with a port)
// and path, or nil. Either may come as bytes or as a string.
func Match[H, P string | []byte](t *Table, host H, path P) *Route {
	host = stripPort(host)
	for i := range t.routes {
		r := &t.routes[i]
		if len(r.prefix) > 0 && (len(path) < len(r.prefix) || string(path[:len(r.prefix)]) != string(r.prefix)) {
			continue
		}
		if len(r.host) > 0 && !matchHost(r, host) {
			continue
		}
		return r
	}
	return nil
}

func matchHost[S string | []byte](r *Route, host S) bool {
	if r.wildcard {
		return len(host) > len(r.host) && equalFoldASCII(host[len(host)-len(r.host):], r.host)
	}
	return equalFoldASCII(host, r.host)
}

// equalFoldASCII compares s with lower, which is lower case, ignoring the
// case of ASCII letters in s (host names are ASCII on the wire).
func equalFoldASCII[S string | []byte](s S, lower []byte) bool {
	if len(s) != len(lower) {
		return false
	}
	for i := range len(lower) {
		c := s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}

// stripPort removes a trailing :port from a Host value, leaving IPv6
// literals ([::1]) intact, and a trailing dot of a fully qualified name.
func stripPort[S string | []byte](host S) S {
	for i := len(host) - 1; i >= 0; i-- {
		if host[i] == ']' {
			break // an IPv6 literal without port
		}
		if host[i] == ':' {
			host = host[:i]
			break
		}
	}
	if n := len(host); n > 1 && host[n-1] == '.' {
		host = host[:n-1]
	}
	return host
}
