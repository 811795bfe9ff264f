package proxy

import (
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
// and path, or nil. HTTP/1 requests come as bytes...
func (t *routeTable) match(host, path []byte) *route { return matchRoute(t, host, path) }

// matchString is match for HTTP/2 requests, which come as strings.
func (t *routeTable) matchString(host, path string) *route { return matchRoute(t, host, path) }

func matchRoute[S string | []byte](t *routeTable, host, path S) *route {
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

func matchHost[S string | []byte](r *route, host S) bool {
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
