package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/ebb-proxy/ebb/config"
	"github.com/ebb-proxy/ebb/proxy/paths"
)

// loadYAML loads yaml as ebb loads its configuration file.
func loadYAML(t *testing.T, yaml string) *config.Config {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ebb.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path, config.Options{})
	if err != nil {
		t.Fatalf("loading the configuration: %v\n%s", err, yaml)
	}
	if cfg.Telemetry.AccessLog.Path == "" {
		// Not the test binary's standard output: a test that reads the
		// access log names a file.
		cfg.Telemetry.AccessLog.Path = os.DevNull
	}
	return cfg
}

// runDiscovery runs px's discovery until the test ends.
func runDiscovery(t *testing.T, px *Proxy) {
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		px.RunDiscovery(ctx)
	}()
	t.Cleanup(func() { stop(); <-done })
}

// countingOrigin answers its name and counts the connections it accepted;
// closed receives one value per connection closed. /slow is answered
// once release is closed, after a value on started.
func countingOrigin(t *testing.T, name string, started chan<- struct{}, release <-chan struct{}) (addr string, accepted *atomic.Int32, closed <-chan struct{}) {
	t.Helper()
	accepted = new(atomic.Int32)
	cl := make(chan struct{}, 16)
	srv := newUnstartedOrigin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			started <- struct{}{}
			<-release
		}
		_, _ = io.WriteString(w, name)
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			accepted.Add(1)
		case http.StateClosed:
			cl <- struct{}{}
		}
	}
	srv.Start()
	return hostPort(srv), accepted, cl
}

func reloadYAML(route string, clusters ...[2]string) string {
	y := fmt.Sprintf(`
admin: { address: 127.0.0.1:0 }
listeners:
  - name: public
    address: 127.0.0.1:0
    routes:
      - match: { path_prefix: "/" }
        cluster: %s
clusters:
`, route)
	for _, c := range clusters {
		y += fmt.Sprintf("  - name: %s\n    discovery: { static: [%q] }\n", c[0], c[1])
	}
	return y
}

// TestUpdate reloads routes and clusters under a client on one keep-alive
// connection: each change is in force for the next request, a request in
// flight finishes on the snapshot it started with (even on a cluster the
// reload removes), a cluster whose configuration is unchanged keeps its
// pooled connections (no new dial when traffic comes back to it), a
// removed cluster's connection closes once its exchange is over, and
// changes only a restart applies are reported, not applied.
func TestUpdate(t *testing.T) {
	started, release := make(chan struct{}, 1), make(chan struct{})
	aAddr, aConns, aClosed := countingOrigin(t, "A", started, release)
	bAddr, _, _ := countingOrigin(t, "B", nil, nil)
	a, b := [2]string{"a", aAddr}, [2]string{"b", bAddr}
	px := startMatrixProxy(t, reloadYAML("a", a, b))
	runDiscovery(t, px)
	base := "http://" + px.Addr("public").String()
	client := newClient(t)
	get := func(path, want string) {
		t.Helper()
		if code, body, _ := do(t, client, mustRequest(t, http.MethodGet, base+path)); code != 200 || string(body) != want {
			t.Fatalf("GET %s: %d %q, want 200 %q", path, code, body, want)
		}
	}
	update := func(yaml string, want Change) {
		t.Helper()
		got, err := px.Update(loadYAML(t, yaml))
		if err != nil {
			t.Fatalf("Update: %v", err)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("Update: %+v, want %+v", got, want)
		}
	}
	get("/", "A")
	update(reloadYAML("b", a, b), Change{Kept: []string{"a", "b"}})
	get("/", "B")
	// Back to a, unchanged: its pooled connection serves, no new dial.
	update(reloadYAML("a", a, b), Change{Kept: []string{"a", "b"}})
	get("/", "A")
	if n := aConns.Load(); n != 1 {
		t.Fatalf("A accepted %d connections, want 1 (the pool kept across reloads)", n)
	}

	// a removed while a request is in flight on it.
	slow := make(chan string, 1)
	go func() {
		_, body, _ := do(t, newClient(t), mustRequest(t, http.MethodGet, base+"/slow"))
		slow <- string(body)
	}()
	recv(t, started, "the slow request to reach A")
	update(reloadYAML("b", b, [2]string{"c", bAddr}), Change{Added: []string{"c"}, Removed: []string{"a"}, Kept: []string{"b"}})
	get("/", "B")
	close(release)
	if body := recv(t, slow, "the request in flight on the removed cluster"); body != "A" {
		t.Fatalf("the request in flight got %q, want A", body)
	}
	recv(t, aClosed, "cluster a's connection to close after its exchange")

	// A listener's own settings need a restart: reported, not applied.
	got, err := px.Update(loadYAML(t, reloadYAML("b", b)))
	if err != nil || !slices.Equal(got.Removed, []string{"c"}) {
		t.Fatalf("Update: %+v, %v", got, err)
	}
	// limits.max_body_bytes and max_in_flight, headers, paths and the
	// access log apply live.
	live := loadYAML(t, reloadYAML("b", b))
	live.Listeners[0].Limits.MaxBodyBytes = 10
	live.Listeners[0].Limits.MaxInFlight = 7
	live.Listeners[0].Headers.TrustForwarded = true
	live.Listeners[0].Paths = config.Paths{Normalize: true, EscapedSlashes: config.EscapedSlashesReject}
	live.Telemetry.AccessLog.Enabled = false
	if got, err := px.Update(live); err != nil || len(got.Restart) != 0 {
		t.Fatalf("Update with the body limit, max_in_flight, header trust and access log changed: %+v, %v; want all applied", got, err)
	}
	post, err := http.NewRequest(http.MethodPost, base+"/", strings.NewReader(strings.Repeat("x", 100)))
	if err != nil {
		t.Fatal(err)
	}
	if code, _, _ := do(t, newClient(t), post); code != http.StatusRequestEntityTooLarge {
		t.Fatalf("a 100-byte body after limits.max_body_bytes became 10: %d, want 413", code)
	}
	if tb := px.snap.Load().Tables[0]; px.snap.Load().Access != nil || !tb.TrustForwarded || tb.MaxInFlight != 7 ||
		tb.Paths != (paths.Options{Normalize: true, EscapedSlashes: paths.RejectEscaped}) {
		t.Fatal("the access log's turning off, the header trust, max_in_flight or paths was not applied")
	}
	withTimeout := loadYAML(t, reloadYAML("b", b))
	withTimeout.Listeners[0].Timeouts.Idle *= 2
	for range 2 { // and still, the second time: the running value is the old one
		if got, err := px.Update(withTimeout); err != nil || !slices.Contains(got.Restart, "listeners.public.timeouts") {
			t.Fatalf("Update with a listener timeout changed: %+v, %v; want listeners.public.timeouts to need a restart", got, err)
		}
	}
	twoListeners := loadYAML(t, reloadYAML("b", b))
	extra := twoListeners.Listeners[0]
	extra.Name = "second"
	twoListeners.Listeners = append(twoListeners.Listeners, extra)
	if _, err := px.Update(twoListeners); !errors.Is(err, ErrListenersChanged) {
		t.Fatalf("Update with a listener added: %v, want ErrListenersChanged", err)
	}
	get("/", "B")
}
