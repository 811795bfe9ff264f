package e2e

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fileClusterYAML is ebb's configuration: one listener to one cluster of
// protocol whose endpoints are listed in the file eps.
func fileClusterYAML(eps, protocol string) string {
	return fmt.Sprintf(`
admin: { address: 127.0.0.1:0 }
listeners:
  - name: public
    address: 127.0.0.1:0
    routes: [{ cluster: app }]
clusters:
  - name: app
    protocol: %s
    discovery: { file: %q }
`, protocol, eps)
}

// writeEndpointFile lists addrs in the endpoint file path, replacing it
// with a rename as configuration management does.
func writeEndpointFile(t *testing.T, path string, addrs ...string) {
	t.Helper()
	var b strings.Builder
	for _, addr := range addrs {
		fmt.Fprintf(&b, "- %s\n", addr)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// TestFileDiscovery moves a cluster from one origin to another by
// rewriting its endpoint file (an atomic rename, as editors and
// configuration management do) while ebb serves: requests follow the file,
// and none fails on the way.
func TestFileDiscovery(t *testing.T) {
	t.Parallel()
	named := func(name string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, name) })
	}
	a, b := newOrigin(t, named("a")), newOrigin(t, named("b"))
	dir := t.TempDir()
	eps := filepath.Join(dir, "eps.yaml")
	writeEndpointFile(t, eps, hostPort(a))
	e := startEbb(t, fileClusterYAML(eps, "http1"))
	c := newClient(t)
	if code, body, _ := get(t, c, e.url("public", "/")); code != 200 || string(body) != "a" {
		t.Fatalf("before the change: %d %q", code, body)
	}
	writeEndpointFile(t, eps, hostPort(b))
	// The watcher delivers the change within moments; every request on the
	// way must succeed, from a or from b.
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, body, _ := get(t, c, e.url("public", "/"))
		if code != 200 || (string(body) != "a" && string(body) != "b") {
			t.Fatalf("during the change: %d %q", code, body)
		}
		if string(body) == "b" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("requests still go to a 10s after the endpoint file named only b")
		}
	}
	for range 20 {
		if code, body, _ := get(t, c, e.url("public", "/")); code != 200 || string(body) != "b" {
			t.Fatalf("after the change: %d %q", code, body)
		}
	}
}
