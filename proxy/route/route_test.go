package route

import (
	"testing"

	"github.com/ebb-proxy/ebb/config"
	"github.com/ebb-proxy/ebb/proxy/cluster"
	"github.com/ebb-proxy/ebb/proxy/downstream"
	"github.com/ebb-proxy/ebb/proxy/proxytest"
)

func TestRouteMatch(t *testing.T) {
	clusters := map[string]*cluster.Cluster{}
	for _, n := range []string{"api", "v2", "wild", "app"} {
		clusters[n] = cluster.New(config.Cluster{Name: n, Discovery: config.Discovery{Static: []string{"127.0.0.1:1"}}}, nil, downstream.NewRegistry(), proxytest.Discard())
	}
	routes := []config.Route{
		{Match: config.Match{Host: "api.example.com", PathPrefix: "/v2/"}, Cluster: "v2"},
		{Match: config.Match{Host: "API.example.com"}, Cluster: "api"},
		{Match: config.Match{Host: "*.example.org"}, Cluster: "wild"},
		{Match: config.Match{PathPrefix: "/"}, Cluster: "app"},
	}
	tbl := &Table{}
	for _, r := range routes {
		tbl.routes = append(tbl.routes, compile(r, clusters[r.Cluster], nil))
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
		r := Match(tbl, []byte(tt.host), []byte(tt.path))
		got := "<none>"
		if r != nil {
			got = r.Cluster.Name()
		}
		if got != tt.want {
			t.Errorf("match(%q, %q) = %s, want %s", tt.host, tt.path, got, tt.want)
		}
	}
	if r := Match(&Table{routes: tbl.routes[:1]}, []byte("api.example.com"), []byte("/v1/")); r != nil {
		t.Errorf("a path outside every prefix matched %s", r.Cluster.Name())
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
