package admin

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
)

type flag struct{ ready atomic.Bool }

func (f *flag) Ready() (bool, string) {
	if f.ready.Load() {
		return true, "ready"
	}
	return false, "draining: 3s left before the deadline"
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestEndpoints(t *testing.T) {
	r := &flag{}
	r.ready.Store(true)
	s, err := Start(Options{
		Address:   "127.0.0.1:0",
		Readiness: r,
		Metrics: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			io.WriteString(w, "ebb_up 1\n")
		}),
		Config:    func() any { return map[string]any{"admin": map[string]any{"address": "x"}} },
		Endpoints: func() any { return []string{"app"} },
		Log:       slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + s.Addr().String()
	tests := []struct {
		path   string
		status int
		body   string
	}{
		{"/live", 200, "live\n"},
		{"/ready", 200, "ready\n"},
		{"/metrics", 200, "ebb_up 1\n"},
		{"/config", 200, "\"address\": \"x\""},
		{"/endpoints", 200, "\"app\""},
		{"/nope", 404, ""},
	}
	for _, tt := range tests {
		code, body := get(t, base+tt.path)
		if code != tt.status || !strings.Contains(body, tt.body) {
			t.Errorf("GET %s = %d %q, want %d with %q", tt.path, code, body, tt.status, tt.body)
		}
	}
	r.ready.Store(false)
	if code, body := get(t, base+"/ready"); code != 503 || !strings.HasPrefix(body, "draining") {
		t.Errorf("/ready while draining = %d %q", code, body)
	}
	if code, _ := get(t, base+"/live"); code != 200 {
		t.Errorf("/live while draining = %d", code)
	}
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := http.Get(base + "/live"); err == nil {
		t.Fatal("admin still answers after Shutdown")
	}
}

func TestStartBusyAddress(t *testing.T) {
	s, err := Start(Options{Address: "127.0.0.1:0", Readiness: &flag{}, Config: func() any { return nil },
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, err = Start(Options{Address: s.Addr().String(), Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err == nil || !strings.Contains(err.Error(), "admin: listening on "+s.Addr().String()) {
		t.Fatalf("err = %v", err)
	}
}
