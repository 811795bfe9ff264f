package proxy

import (
	"bufio"
	"strings"
	"testing"

	"github.com/ebb-proxy/ebb/config"
)

func bufioReader(s string) *bufio.Reader { return bufio.NewReader(strings.NewReader(s)) }

func TestRouteMatch(t *testing.T) {
	clusters := map[string]*cluster{}
	for _, n := range []string{"api", "v2", "wild", "app"} {
		clusters[n] = &cluster{name: n}
	}
	routes := []config.Route{
		{Match: config.Match{Host: "api.example.com", PathPrefix: "/v2/"}, Cluster: "v2"},
		{Match: config.Match{Host: "API.example.com"}, Cluster: "api"},
		{Match: config.Match{Host: "*.example.org"}, Cluster: "wild"},
		{Match: config.Match{PathPrefix: "/"}, Cluster: "app"},
	}
	tbl := &routeTable{}
	for _, r := range routes {
		tbl.routes = append(tbl.routes, compileRoute(r, clusters[r.Cluster], nil))
	}
	tests := []struct {
		host, path, want string
	}{
		{"api.example.com", "/v2/users", "v2"},
		{"api.example.com:8443", "/v2/", "v2"},
		{"Api.Example.Com", "/v1/users", "api"},
		{"api.example.com.", "/", "api"},
		{"a.example.org", "/", "wild"},
		{"deep.a.example.org", "/x", "wild"},
		{"example.org", "/", "app"}, // *.example.org is subdomains only
		{"other", "/anything", "app"},
		{"[::1]:8080", "/", "app"},
	}
	for _, tt := range tests {
		r := tbl.match([]byte(tt.host), []byte(tt.path))
		got := "<none>"
		if r != nil {
			got = r.cluster.name
		}
		if got != tt.want {
			t.Errorf("match(%q, %q) = %s, want %s", tt.host, tt.path, got, tt.want)
		}
	}
	if r := (&routeTable{routes: tbl.routes[:1]}).match([]byte("api.example.com"), []byte("/v1/")); r != nil {
		t.Errorf("a path outside every prefix matched %s", r.cluster.name)
	}
}

func TestStripPort(t *testing.T) {
	for in, want := range map[string]string{
		"example.com":      "example.com",
		"example.com:80":   "example.com",
		"[::1]":            "[::1]",
		"[::1]:8080":       "[::1]",
		"example.com.:443": "example.com",
		"":                 "",
	} {
		if got := string(stripPort([]byte(in))); got != want {
			t.Errorf("stripPort(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestStatusClass(t *testing.T) {
	for code, want := range map[int]string{100: "1xx", 200: "2xx", 302: "3xx", 404: "4xx", 503: "5xx", 0: "other", 600: "other"} {
		if got := statusClasses[statusClass(code)]; got != want {
			t.Errorf("statusClass(%d) = %s, want %s", code, got, want)
		}
	}
}
