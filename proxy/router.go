package proxy

import (
	"bytes"
	"strings"

	"github.com/ebb-proxy/ebb/config"
)

// route is one compiled routing rule.
type route struct {
	host     []byte // lower case, without "*."; empty matches any host
	wildcard bool   // host was "*.example.com": match subdomains only
	prefix   []byte // empty matches any path
	cluster  *cluster
	metrics  *routeMetrics
}

// routeTable holds one listener's routes in order; the first match wins.
type routeTable struct {
	routes []route
	// noRoute counts requests no route matched.
	noRoute *routeMetrics
}

func compileRoute(r config.Route, c *cluster, m *routeMetrics) route {
	host := strings.ToLower(r.Match.Host)
	wildcard := strings.HasPrefix(host, "*.")
	if wildcard {
		host = host[1:] // keep the dot: ".example.com"
	}
	return route{host: []byte(host), wildcard: wildcard, prefix: []byte(r.Match.PathPrefix), cluster: c, metrics: m}
}

// match returns the first route for host (as sent, possibly with a port)
// and path, or nil.
func (t *routeTable) match(host, path []byte) *route {
	host = stripPort(host)
	for i := range t.routes {
		r := &t.routes[i]
		if len(r.prefix) > 0 && !bytes.HasPrefix(path, r.prefix) {
			continue
		}
		if len(r.host) > 0 && !r.matchHost(host) {
			continue
		}
		return r
	}
	return nil
}

func (r *route) matchHost(host []byte) bool {
	if r.wildcard {
		return len(host) > len(r.host) && bytes.EqualFold(host[len(host)-len(r.host):], r.host)
	}
	return bytes.EqualFold(host, r.host)
}

// stripPort removes a trailing :port from a Host value, leaving IPv6
// literals ([::1]) intact, and a trailing dot of a fully qualified name.
func stripPort(host []byte) []byte {
	if i := bytes.LastIndexByte(host, ':'); i >= 0 && bytes.IndexByte(host[i:], ']') < 0 {
		host = host[:i]
	}
	if n := len(host); n > 1 && host[n-1] == '.' {
		host = host[:n-1]
	}
	return host
}
