package discovery

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// watch runs a file source and returns its updates. The source stops with
// the test.
func watch(t *testing.T, path string) (<-chan Set, *chanLog) {
	t.Helper()
	logs := &chanLog{msgs: make(chan string, 64)}
	src := NewFile(path, slog.New(logs))
	ctx, cancel := context.WithCancel(context.Background())
	sets := make(chan Set, 16)
	done := make(chan error)
	go func() { done <- src.Run(ctx, func(s Set) { sets <- s }) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return sets, logs
}

// next waits for the next set; the timeout only bounds a broken watcher.
func next(t *testing.T, sets <-chan Set) []string {
	t.Helper()
	timer := time.NewTimer(5 * time.Second)
	defer timer.Stop()
	select {
	case s := <-sets:
		return s.Addresses()
	case <-timer.C:
		t.Fatal("no update from the file source")
		return nil
	}
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestFileSourceUpdates(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "eps.yaml")
	write(t, path, "- 10.0.0.1:80\n- address: 10.0.0.2:80\n")
	sets, _ := watch(t, path)
	if got := next(t, sets); !slices.Equal(got, []string{"10.0.0.1:80", "10.0.0.2:80"}) {
		t.Fatalf("first set %v", got)
	}

	// An editor's atomic save: write a temporary file, rename it over.
	tmp := filepath.Join(dir, ".eps.yaml.tmp")
	write(t, tmp, `["10.0.0.3:80"]`) // JSON works too
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	if got := next(t, sets); !slices.Equal(got, []string{"10.0.0.3:80"}) {
		t.Fatalf("after rename %v", got)
	}

	// In-place rewrite.
	write(t, path, "- 10.0.0.4:80\n")
	if got := next(t, sets); !slices.Equal(got, []string{"10.0.0.4:80"}) {
		t.Fatalf("after rewrite %v", got)
	}
}

// A Kubernetes ConfigMap volume: eps.yaml -> ..data/eps.yaml, ..data ->
// ..2026_1; an update writes ..2026_2 and swaps the ..data symlink.
func TestFileSourceConfigMapSwap(t *testing.T) {
	dir := t.TempDir()
	for v, content := range map[string]string{"..v1": "- 10.0.1.1:80\n", "..v2": "- 10.0.2.1:80\n- 10.0.2.2:80\n"} {
		os.Mkdir(filepath.Join(dir, v), 0o755)
		write(t, filepath.Join(dir, v, "eps.yaml"), content)
	}
	if err := os.Symlink("..v1", filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("..data/eps.yaml", filepath.Join(dir, "eps.yaml")); err != nil {
		t.Fatal(err)
	}
	sets, _ := watch(t, filepath.Join(dir, "eps.yaml"))
	if got := next(t, sets); !slices.Equal(got, []string{"10.0.1.1:80"}) {
		t.Fatalf("first set %v", got)
	}
	// The kubelet's swap: a new symlink renamed over ..data.
	if err := os.Symlink("..v2", filepath.Join(dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if got := next(t, sets); !slices.Equal(got, []string{"10.0.2.1:80", "10.0.2.2:80"}) {
		t.Fatalf("after the swap %v", got)
	}
}

func TestFileSourceKeepsLastGoodSet(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "eps.yaml")
	write(t, path, "- 10.0.0.1:80\n")
	sets, logs := watch(t, path)
	next(t, sets)
	// Each broken version is logged and delivers nothing; the test waits
	// for each warning before making the next change.
	for _, step := range []struct {
		change func()
		warns  string
	}{
		{func() { write(t, path, "- 10.0.0.1:80\n- not an address\n") }, "endpoint file invalid; keeping the last good set"},
		{func() { write(t, path, "- {address: 10.0.0.9:80, weight: 3}\n") }, "endpoint file invalid; keeping the last good set"},
		{func() { os.Remove(path) }, "endpoint file unreadable; keeping the last good set"},
	} {
		step.change()
		logs.await(t, step.warns)
		select {
		case s := <-sets:
			t.Fatalf("a broken file delivered %v", s.Addresses())
		default:
		}
	}
	write(t, path, "- 10.0.0.5:80\n")
	if got := next(t, sets); !slices.Equal(got, []string{"10.0.0.5:80"}) {
		t.Fatalf("after broken versions %v", got)
	}
}

func TestParseEndpoints(t *testing.T) {
	tests := []struct {
		in   string
		want []string
		err  string
	}{
		{in: "- a:1\n- a:1\n- b:2\n", want: []string{"a:1", "b:2"}},
		{in: "[]", want: []string{}},
		{in: "- \"[::1]:80\"\n", want: []string{"[::1]:80"}},
		{in: "  \n", err: "empty file"},
		{in: "- a\n", err: `entry 0: expected host:port, got "a"`},
		{in: "- a:0\n", err: "expected a port from 1 to 65535"},
		{in: "- {addr: a:1}\n", err: `entry 0: unknown key "addr"`},
		{in: "a: 1\n", err: "not a YAML or JSON list"},
		{in: "- 5\n", err: `entry 0: expected host:port, got ""`},
	}
	for _, tt := range tests {
		eps, err := parseEndpoints([]byte(tt.in))
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("parse %q: err %v, want %q", tt.in, err, tt.err)
			}
			continue
		}
		got := Set{Endpoints: eps}.Addresses()
		if err != nil || !slices.Equal(got, tt.want) {
			t.Errorf("parse %q = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
}

// chanLog is a slog handler that hands each message to the test.
type chanLog struct{ msgs chan string }

func (c *chanLog) Enabled(context.Context, slog.Level) bool { return true }
func (c *chanLog) Handle(_ context.Context, r slog.Record) error {
	select {
	case c.msgs <- r.Message:
	default: // the test is not listening for this one
	}
	return nil
}
func (c *chanLog) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c *chanLog) WithGroup(string) slog.Handler      { return c }

// await waits for a message; the timeout only bounds a broken source.
func (c *chanLog) await(t *testing.T, msg string) {
	t.Helper()
	timer := time.NewTimer(5 * time.Second)
	defer timer.Stop()
	for {
		select {
		case m := <-c.msgs:
			if m == msg {
				return
			}
		case <-timer.C:
			t.Fatalf("no log %q", msg)
		}
	}
}
