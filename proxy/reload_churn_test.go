package proxy

import (
	"fmt"
	"net/http"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestUpdateChurn applies 1,000 configurations in a row, each rebuilding
// one cluster and adding or removing another, with requests between them:
// goroutines and open files come back to their baseline (RSS is logged).
func TestUpdateChurn(t *testing.T) {
	origin := hostPort(newOrigin(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {})))
	yaml := func(i int) string {
		y := reloadYAML("a", [2]string{"a", origin}) +
			fmt.Sprintf("  - name: b\n    discovery: { static: [%q] }\n    timeouts: { connect: %dms }\n", origin, 1000+i)
		if i%2 == 1 {
			y += fmt.Sprintf("  - name: extra\n    discovery: { static: [%q] }\n", origin)
		}
		return y
	}
	px := startMatrixProxy(t, yaml(0))
	runDiscovery(t, px)
	client := newClient(t)
	url := "http://" + px.Addr("public").String() + "/"
	get := func() {
		t.Helper()
		if code, _, _ := do(t, client, mustRequest(t, http.MethodGet, url)); code != 200 {
			t.Fatalf("GET: %d", code)
		}
	}
	get()
	// The baseline: after one reload of each shape, so that lazily
	// started goroutines are there already.
	for i := 1; i <= 2; i++ {
		if _, err := px.Update(loadYAML(t, yaml(i))); err != nil {
			t.Fatal(err)
		}
		get()
	}
	goroutines, fds, rss := runtime.NumGoroutine(), openFiles(t), rssKiB(t)
	for i := 3; i < 1003; i++ {
		if _, err := px.Update(loadYAML(t, yaml(i))); err != nil {
			t.Fatalf("reload %d: %v", i, err)
		}
		if i%50 == 0 {
			get()
		}
	}
	get()
	// Retired clusters close their connections as their last exchanges
	// end, and discovery goroutines of removed clusters have stopped
	// (Update waits for them): what is left must settle at once.
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for runtime.NumGoroutine() > goroutines || openFiles(t) > fds {
		select {
		case <-tick.C:
		case <-deadline.C:
			t.Fatalf("after 1,000 reloads: %d goroutines (baseline %d), %d open files (baseline %d)",
				runtime.NumGoroutine(), goroutines, openFiles(t), fds)
		}
	}
	t.Logf("after 1,000 reloads: %d goroutines (baseline %d), %d open files (baseline %d), RSS %d KiB (baseline %d KiB)",
		runtime.NumGoroutine(), goroutines, openFiles(t), fds, rssKiB(t), rss)
}

func openFiles(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

func rssKiB(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	var kb int
	for _, line := range strings.Split(string(b), "\n") {
		if _, err := fmt.Sscanf(line, "VmRSS: %d kB", &kb); err == nil {
			return kb
		}
	}
	return 0
}
