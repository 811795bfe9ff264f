package e2e

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"
)

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
	writeEndpoints := func(addr string) {
		tmp := eps + ".tmp"
		if err := os.WriteFile(tmp, []byte(fmt.Sprintf("- %s\n", addr)), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, eps); err != nil {
			t.Fatal(err)
		}
	}
	writeEndpoints(hostPort(a))
	e := startEbb(t, fmt.Sprintf(`
admin: { address: 127.0.0.1:0 }
listeners:
  - name: public
    address: 127.0.0.1:0
    routes: [{ cluster: app }]
clusters:
  - name: app
    discovery: { file: %q }
`, eps))
	c := newClient(t)
	if code, body, _ := get(t, c, e.url("public", "/")); code != 200 || string(body) != "a" {
		t.Fatalf("before the change: %d %q", code, body)
	}
	writeEndpoints(hostPort(b))
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
