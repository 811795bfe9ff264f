package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestAccessLogRotate rotates ebb's access log as logrotate does: the
// file is moved, SIGUSR1 makes ebb open the path again, and the next
// lines go to the new file. The line of a request answered just before
// the exit is written too: the queue is flushed at exit.
func TestAccessLogRotate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "access.log")
	e := startEbb(t, routeYAML("a", map[string]string{"a": nameOrigin(t, "a")})+
		fmt.Sprintf("telemetry:\n  access_log: { path: %q }\n", path))
	c := &http.Client{}
	one := func(p string) {
		t.Helper()
		if code, _, _ := get(t, c, e.url("public", p)); code != http.StatusOK {
			t.Fatalf("GET %s: %d", p, code)
		}
	}
	one("/before")
	awaitAccessLines(t, path, []string{"/before"})
	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	e.signal(syscall.SIGUSR1)
	awaitLogLine(t, e, "SIGUSR1: access log reopened")
	one("/after")
	awaitAccessLines(t, path, []string{"/after"})
	one("/last")
	c.CloseIdleConnections()
	e.stop() // drains, exits 0 and logged no error
	awaitAccessLines(t, path, []string{"/after", "/last"})
	awaitAccessLines(t, path+".1", []string{"/before"})
}

// awaitAccessLines waits (ebb writes its access log every 100 ms) until
// the JSON access log at path holds one line per path in paths, in that
// order, and fails if it holds other lines.
func awaitAccessLines(t *testing.T, path string, paths []string) {
	t.Helper()
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		b, _ := os.ReadFile(path)
		var got []string
		for _, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
			if line == "" {
				continue
			}
			var rec struct {
				Path   string `json:"path"`
				Status int    `json:"status"`
			}
			if err := json.Unmarshal([]byte(line), &rec); err != nil || rec.Status != http.StatusOK {
				t.Fatalf("%s: line %q: %v (status %d)", path, line, err, rec.Status)
			}
			got = append(got, rec.Path)
		}
		if len(got) > len(paths) || strings.Join(got, " ") != strings.Join(paths[:len(got)], " ") {
			t.Fatalf("%s holds the lines of %q, want %q", path, got, paths)
		}
		if len(got) == len(paths) {
			return
		}
		select {
		case <-tick.C:
		case <-deadline.C:
			t.Fatalf("%s holds the lines of %q after 10 s, want %q", path, got, paths)
		}
	}
}
