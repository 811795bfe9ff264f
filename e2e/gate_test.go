package e2e

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// gate holds an origin's requests until it opens. wait tells arrived
// that a request arrived (one at a time: the next one waits until that
// was received), then waits for the gate to open or the request to end.
type gate struct {
	arrived chan struct{}
	opened  chan struct{}
	once    sync.Once
}

func newGate() *gate {
	return &gate{arrived: make(chan struct{}, 1), opened: make(chan struct{})}
}

// wait reports whether the gate opened before ctx ended.
func (g *gate) wait(ctx context.Context) bool {
	g.arrived <- struct{}{}
	select {
	case <-g.opened:
		return true
	case <-ctx.Done():
		return false
	}
}

// open opens the gate; safe to call more than once.
func (g *gate) open() { g.once.Do(func() { close(g.opened) }) }

// gatedOrigin starts an origin (newOrigin) whose requests for path, or
// all of them if path is "", wait at a gate; answer then answers each
// request, told whether the gate opened before the request ended (true
// for other paths). The gate opens at cleanup, before the origin closes:
// httptest's Close waits for the handlers.
func gatedOrigin(t *testing.T, path string, answer func(w http.ResponseWriter, r *http.Request, opened bool)) (*httptest.Server, *gate) {
	t.Helper()
	g := newGate()
	srv := newOrigin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		opened := true
		if path == "" || r.URL.Path == path {
			opened = g.wait(r.Context())
		}
		answer(w, r, opened)
	}))
	t.Cleanup(g.open)
	return srv, g
}
