package admin

import (
	"context"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"strings"
	"sync"
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

// calls records the causes passed to Drain or Shutdown.
type calls struct {
	mu     sync.Mutex
	causes []string
}

func (c *calls) record(cause string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.causes = append(c.causes, cause)
}

func (c *calls) take() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.causes
	c.causes = nil
	return out
}

func TestDrainAndShutdown(t *testing.T) {
	var drains, shutdowns calls
	s, err := Start(Options{
		Address:   "127.0.0.1:0",
		Readiness: &flag{},
		Config:    func() any { return nil },
		Drain:     drains.record,
		Shutdown:  shutdowns.record,
		Log:       slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	base := "http://" + s.Addr().String()
	tests := []struct {
		method, path string
		header       http.Header
		status       int
		body         string
		drain, stop  string // cause prefix expected, "" for no call
	}{
		{method: "POST", path: "/drain", status: 202, body: "draining\n", drain: "admin /drain from 127.0.0.1:"},
		// Again: the controller ignores later triggers; the answer is the same.
		{method: "POST", path: "/drain", status: 202, body: "draining\n", drain: "admin /drain from 127.0.0.1:"},
		{method: "GET", path: "/drain", status: 405},
		{method: "PUT", path: "/drain", status: 405},
		{method: "POST", path: "/shutdown", status: 400, body: "requires ?now; for a graceful stop, POST /drain"},
		{method: "POST", path: "/shutdown?later", status: 400, body: "requires ?now"},
		{method: "GET", path: "/shutdown?now", status: 405},
		{method: "POST", path: "/shutdown?now", status: 202, body: "closing now\n", stop: "admin /shutdown?now from 127.0.0.1:"},
		{method: "POST", path: "/shutdown?now=1", status: 202, stop: "admin /shutdown?now from "},
		// A web page must not drain the proxy through a browser.
		{method: "POST", path: "/drain", header: http.Header{"Sec-Fetch-Site": {"cross-site"}}, status: 403},
		{method: "POST", path: "/shutdown?now", header: http.Header{"Origin": {"https://evil.example"}}, status: 403},
		{method: "GET", path: "/live", header: http.Header{"Sec-Fetch-Site": {"cross-site"}}, status: 200, body: "live\n"},
	}
	for _, tt := range tests {
		req, _ := http.NewRequest(tt.method, base+tt.path, nil)
		maps.Copy(req.Header, tt.header)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		name := tt.method + " " + tt.path
		if resp.StatusCode != tt.status || !strings.Contains(string(b), tt.body) {
			t.Errorf("%s = %d %q, want %d with %q", name, resp.StatusCode, b, tt.status, tt.body)
		}
		for _, c := range []struct {
			calls *calls
			want  string
		}{{&drains, tt.drain}, {&shutdowns, tt.stop}} {
			got := c.calls.take()
			switch {
			case c.want == "" && len(got) > 0:
				t.Errorf("%s: unexpected call %q", name, got)
			case c.want != "" && (len(got) != 1 || !strings.HasPrefix(got[0], c.want)):
				t.Errorf("%s: calls %q, want one starting with %q", name, got, c.want)
			}
		}
	}
}

func TestNoDrainCallbacks(t *testing.T) {
	s, err := Start(Options{Address: "127.0.0.1:0", Readiness: &flag{}, Config: func() any { return nil },
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, path := range []string{"/drain", "/shutdown?now"} {
		resp, err := http.Post("http://"+s.Addr().String()+path, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 404 {
			t.Errorf("POST %s without a callback = %d, want 404", path, resp.StatusCode)
		}
	}
}

// TestHostChecked: a request naming a host that is not the admin server's
// (a DNS name rebound to its address) gets 403 on every endpoint; IP
// addresses, localhost, the admin address's host and admin.hosts pass.
func TestHostChecked(t *testing.T) {
	s, err := Start(Options{
		Address:   "127.0.0.1:0",
		Hosts:     []string{"ebb-admin.default.svc"},
		Readiness: &flag{},
		Config:    func() any { return map[string]any{} },
		Drain:     func(string) {},
		Log:       slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, tc := range []struct {
		method, path, host string
		want               int
	}{
		{"GET", "/config", "127.0.0.1", 200},
		{"GET", "/config", s.Addr().String(), 200},
		{"GET", "/config", "[::1]:9901", 200},
		{"GET", "/config", "localhost:9901", 200},
		{"GET", "/config", "LOCALHOST", 200},
		{"GET", "/config", "ebb-admin.default.svc:9901", 200},
		{"GET", "/config", "ebb-admin.default.svc.", 200},
		{"GET", "/config", "rebound.attacker.example", 403},
		{"GET", "/live", "rebound.attacker.example:9901", 403},
		{"POST", "/drain", "rebound.attacker.example", 403},
	} {
		req, _ := http.NewRequest(tc.method, "http://"+s.Addr().String()+tc.path, nil)
		req.Host = tc.host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s %s with Host %q: %d %q, want %d", tc.method, tc.path, tc.host, resp.StatusCode, body, tc.want)
		}
		if tc.want == 403 && !strings.Contains(string(body), "admin.hosts") {
			t.Errorf("the refusal %q does not say what to do", body)
		}
	}
}

// TestPprofOnlyWhenEnabled: Go's profiles are served only with
// admin.pprof.
func TestPprofOnlyWhenEnabled(t *testing.T) {
	for _, on := range []bool{false, true} {
		s, err := Start(Options{Address: "127.0.0.1:0", Readiness: &flag{}, Config: func() any { return nil },
			Pprof: on, Log: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		want := http.StatusNotFound
		if on {
			want = http.StatusOK
		}
		if code, _ := get(t, "http://"+s.Addr().String()+"/debug/pprof/goroutine?debug=1"); code != want {
			t.Errorf("pprof %v: /debug/pprof/goroutine answered %d, want %d", on, code, want)
		}
		s.Close()
	}
}

// TestToken: with a token, every POST, /config, /endpoints and pprof
// need it; the probes and /metrics do not.
func TestToken(t *testing.T) {
	const token = "0123456789abcdef"
	s, err := Start(Options{
		Address:   "127.0.0.1:0",
		Readiness: &flag{},
		Metrics:   http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ebb_up 1\n") }),
		Config:    func() any { return map[string]any{} },
		Endpoints: func() any { return []string{} },
		Drain:     func(string) {},
		Pprof:     true,
		Token:     token,
		Log:       slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, tc := range []struct {
		method, path string
		guarded      bool
		ok           int
	}{
		{"GET", "/live", false, 200},
		{"GET", "/ready", false, 503},
		{"GET", "/metrics", false, 200},
		{"GET", "/config", true, 200},
		{"GET", "/endpoints", true, 200},
		{"GET", "/debug/pprof/goroutine", true, 200},
		{"POST", "/drain", true, 202},
		{"POST", "/shutdown?now", true, 404}, // no Shutdown option: the mux's answer
	} {
		for _, auth := range []string{"", "Bearer wrong", "Bearer " + token} {
			req, _ := http.NewRequest(tc.method, "http://"+s.Addr().String()+tc.path, nil)
			if auth != "" {
				req.Header.Set("Authorization", auth)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			want := tc.ok
			if tc.guarded && auth != "Bearer "+token {
				want = http.StatusUnauthorized
			}
			if resp.StatusCode != want {
				t.Errorf("%s %s with %q: %d, want %d", tc.method, tc.path, auth, resp.StatusCode, want)
			}
			if want == http.StatusUnauthorized && resp.Header.Get("WWW-Authenticate") == "" {
				t.Errorf("%s %s: 401 without WWW-Authenticate", tc.method, tc.path)
			}
		}
	}
}

// TestProbeAddress: the probe server answers /live and /ready, and
// nothing else, whatever the token; StopAccepting and Shutdown stop both.
func TestProbeAddress(t *testing.T) {
	r := &flag{}
	r.ready.Store(true)
	s, err := Start(Options{
		Address:      "127.0.0.1:0",
		ProbeAddress: "127.0.0.1:0",
		Readiness:    r,
		Config:       func() any { return map[string]any{} },
		Drain:        func(string) {},
		Token:        "0123456789abcdef",
		Log:          slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	probe := "http://" + s.ProbeAddr().String()
	if probe == "http://"+s.Addr().String() {
		t.Fatal("the probe server shares the admin's address")
	}
	for path, want := range map[string]int{"/live": 200, "/ready": 200, "/config": 404, "/metrics": 404} {
		if code, _ := get(t, probe+path); code != want {
			t.Errorf("probe GET %s = %d, want %d", path, code, want)
		}
	}
	resp, err := http.Post(probe+"/drain", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound && resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("probe POST /drain = %d, want it refused", resp.StatusCode)
	}
	r.ready.Store(false)
	if code, _ := get(t, probe+"/ready"); code != 503 {
		t.Errorf("probe /ready while draining = %d, want 503", code)
	}
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := http.Get(probe + "/live"); err == nil {
		t.Fatal("the probe server still answers after Shutdown")
	}
}
