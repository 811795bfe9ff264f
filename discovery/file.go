package discovery

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/fsnotify/fsnotify"
	"go.yaml.in/yaml/v3"
)

// filePoll is how often the file source re-reads its file even without a
// change notification: some file systems (network mounts) send none.
const filePoll = 10 * time.Second

// File reads endpoints from a YAML or JSON file and watches it.
//
// The file holds a list of endpoints, each "host:port" or a mapping with an
// address:
//
//   - 10.0.0.1:8080
//   - address: 10.0.0.2:8080
//
// The directory is watched rather than the file, so that editors' atomic
// renames and Kubernetes ConfigMap updates (which swap a "..data" symlink)
// are seen. A file that cannot be read or parsed keeps the last good set,
// and the reason is logged.
type File struct {
	path string
	log  *slog.Logger
}

// NewFile returns a source for the file at path.
func NewFile(path string, log *slog.Logger) *File {
	return &File{path: path, log: log}
}

// Load reads and parses the file once.
func (f *File) Load() (Set, error) {
	data, err := os.ReadFile(f.path)
	if err != nil {
		return Set{}, fmt.Errorf("discovery: reading %s: %w", f.path, err)
	}
	eps, err := parseEndpoints(data)
	if err != nil {
		return Set{}, fmt.Errorf("discovery: %s: %w", f.path, err)
	}
	return Set{Endpoints: eps, Source: "file " + f.path, Updated: time.Now()}, nil
}

// Run delivers the file's set, then a new set each time the content
// changes, until ctx ends.
func (f *File) Run(ctx context.Context, update func(Set)) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("discovery: watching %s: %w", f.path, err)
	}
	defer w.Close()
	if err := w.Add(filepath.Dir(f.path)); err != nil {
		return fmt.Errorf("discovery: watching %s: %w", filepath.Dir(f.path), err)
	}
	var last []byte // content of the last good set
	reload := func() {
		data, err := os.ReadFile(f.path)
		if err == nil && last != nil && bytes.Equal(data, last) {
			return
		}
		if err != nil {
			f.log.Warn("endpoint file unreadable; keeping the last good set", "file", f.path, "err", err)
			return
		}
		eps, err := parseEndpoints(data)
		if err != nil {
			f.log.Warn("endpoint file invalid; keeping the last good set", "file", f.path, "err", err)
			return
		}
		last = data
		update(Set{Endpoints: eps, Source: "file " + f.path, Updated: time.Now()})
	}
	reload()
	poll := time.NewTicker(filePoll)
	defer poll.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case _, ok := <-w.Events:
			if !ok {
				return errors.New("discovery: file watcher closed")
			}
			// Any change in the directory may concern the file (renames,
			// symlink swaps); reload compares contents.
			reload()
		case err, ok := <-w.Errors:
			if !ok {
				return errors.New("discovery: file watcher closed")
			}
			f.log.Warn("watching the endpoint file", "file", f.path, "err", err)
		case <-poll.C:
			reload()
		}
	}
}

// parseEndpoints reads a YAML (or JSON) list of endpoints. An empty file
// is an error, not an empty list: it is what a reader sees in the middle of
// an in-place rewrite. An empty list is written [].
func parseEndpoints(data []byte) ([]Endpoint, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, errors.New("empty file (write [] for no endpoints)")
	}
	var raw []any
	if err := yaml.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("not a YAML or JSON list of endpoints: %w", err)
	}
	eps := make([]Endpoint, 0, len(raw))
	seen := map[string]bool{}
	for i, item := range raw {
		var addr string
		switch x := item.(type) {
		case string:
			addr = x
		case map[string]any:
			for k := range x {
				if k != "address" {
					return nil, fmt.Errorf("entry %d: unknown key %q (expected address)", i, k)
				}
			}
			addr, _ = x["address"].(string)
		}
		if err := checkAddress(addr); err != nil {
			return nil, fmt.Errorf("entry %d: %w", i, err)
		}
		if !seen[addr] {
			seen[addr] = true
			eps = append(eps, Endpoint{Address: addr})
		}
	}
	return eps, nil
}

func checkAddress(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return fmt.Errorf("expected host:port, got %q", addr)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("expected a port from 1 to 65535 in %q", addr)
	}
	return nil
}
