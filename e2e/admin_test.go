package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestAdmin checks the admin server: /live, /ready, /config (the effective
// configuration as JSON, defaults filled in) and /metrics (request counts
// by listener, cluster and status class, the duration histogram, upstream
// connects and the downstream connections gauge) after known traffic.
func TestAdmin(t *testing.T) {
	t.Parallel()
	origin := newOrigin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}))
	e := startEbb(t, fmt.Sprintf(`
admin: { address: 127.0.0.1:0 }
listeners:
  - name: public
    address: 127.0.0.1:0
    routes:
      - { match: { host: app.example }, cluster: app }
clusters:
  - name: app
    discovery: { static: [%q] }
`, hostPort(origin)))
	client := newClient(t)

	t.Run("live and ready", func(t *testing.T) {
		for _, c := range []struct{ path, body string }{{"/live", "live\n"}, {"/ready", "ready\n"}} {
			status, body, resp := get(t, client, e.adminURL(c.path))
			if status != 200 || string(body) != c.body {
				t.Errorf("%s: status %d, body %q; want 200 %q", c.path, status, body, c.body)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "text/plain; charset=utf-8" {
				t.Errorf("%s: Content-Type %q", c.path, ct)
			}
		}
	})

	t.Run("config", func(t *testing.T) {
		status, body, resp := get(t, client, e.adminURL("/config"))
		if status != 200 || resp.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("status %d, Content-Type %q", status, resp.Header.Get("Content-Type"))
		}
		var cfg struct {
			Listeners []struct {
				Name    string `json:"name"`
				Address string `json:"address"`
				Role    string `json:"role"`
				Limits  struct {
					MaxHeaderBytes string `json:"max_header_bytes"`
				} `json:"limits"`
			} `json:"listeners"`
			Clusters []struct {
				Name     string `json:"name"`
				Timeouts struct {
					Response string `json:"response"`
				} `json:"timeouts"`
			} `json:"clusters"`
		}
		if err := json.Unmarshal(body, &cfg); err != nil {
			t.Fatalf("/config is not JSON: %v\n%s", err, body)
		}
		if len(cfg.Listeners) != 1 || cfg.Listeners[0].Name != "public" || cfg.Listeners[0].Address != "127.0.0.1:0" {
			t.Errorf("listeners %+v, want the one named public at 127.0.0.1:0", cfg.Listeners)
		}
		if len(cfg.Listeners) == 1 && (cfg.Listeners[0].Role != "inbound" || cfg.Listeners[0].Limits.MaxHeaderBytes != "32KiB") {
			t.Errorf("listener defaults: role %q, max_header_bytes %q; want inbound, 32KiB (as documented)", cfg.Listeners[0].Role, cfg.Listeners[0].Limits.MaxHeaderBytes)
		}
		if len(cfg.Clusters) != 1 || cfg.Clusters[0].Name != "app" || cfg.Clusters[0].Timeouts.Response != "30s" {
			t.Errorf("clusters %+v, want app with the default response timeout 30s", cfg.Clusters)
		}
	})

	t.Run("metrics", func(t *testing.T) {
		for range 3 {
			req, _ := http.NewRequest(http.MethodGet, e.url("public", "/"), nil)
			req.Host = "app.example"
			if status, body, _ := do(t, client, req); status != 200 || string(body) != "ok" {
				t.Fatalf("status %d, body %q", status, body)
			}
		}
		req, _ := http.NewRequest(http.MethodGet, e.url("public", "/"), nil)
		req.Host = "other.example"
		if status, _, _ := do(t, client, req); status != 404 {
			t.Fatalf("status %d for an unrouted host, want 404", status)
		}
		m := scrape(t, e)
		for _, c := range []struct {
			name   string
			labels map[string]string
			want   float64
		}{
			{"ebb_requests_total", map[string]string{"listener": "public", "cluster": "app", "protocol": "http1", "status_class": "2xx"}, 3},
			{"ebb_requests_total", map[string]string{"listener": "public", "cluster": "", "protocol": "http1", "status_class": "4xx"}, 1},
			{"ebb_request_duration_seconds_count", map[string]string{"listener": "public", "cluster": "app", "protocol": "http1"}, 3},
			{"ebb_request_duration_seconds_bucket", map[string]string{"listener": "public", "cluster": "app", "protocol": "http1", "le": "+Inf"}, 3},
			// Sequential requests share one pooled upstream connection.
			{"ebb_upstream_connects_total", map[string]string{"cluster": "app"}, 1},
		} {
			if v, ok := metricValue(m, c.name, c.labels); !ok || v != c.want {
				t.Errorf("%s%v = %v (present %v), want %v", c.name, c.labels, v, ok, c.want)
			}
		}
		// The client's one keep-alive connection is open (idle or, for a
		// moment after its response, still active).
		var open float64
		for _, s := range m {
			if s.name == "ebb_downstream_connections" && s.labels["listener"] == "public" && s.labels["protocol"] == "http1" {
				open += s.value
			}
		}
		if open != 1 {
			t.Errorf("ebb_downstream_connections for public sums to %v, want 1 (the client's connection)", open)
		}
	})

	t.Run("unknown path", func(t *testing.T) {
		if status, _, _ := get(t, client, e.adminURL("/nope")); status != 404 {
			t.Errorf("status %d, want 404", status)
		}
	})
}

// TestStopIdle starts ebb as "ebb -config FILE" and sends SIGTERM with no
// traffic: it exits with status 0 promptly and logs why.
func TestStopIdle(t *testing.T) {
	t.Parallel()
	path := writeConfig(t, singleClusterYAML("127.0.0.1:9"))
	e := startEbbArgs(t, path, "-config", path)
	start := time.Now()
	e.signal(syscall.SIGTERM)
	code := e.exit()
	took := time.Since(start)
	if code != 0 {
		t.Fatalf("exit status %d, want 0; log:\n%s", code, e.logs())
	}
	if took > 3*time.Second {
		t.Errorf("ebb took %s to stop with nothing to drain", took)
	}
	recs := e.logRecords("ebb exiting")
	if len(recs) != 1 || recs[0]["reason"] != "drained" || recs[0]["forced_closes"] != float64(0) {
		t.Errorf("exit log lines %v, want one with reason drained and forced_closes 0", recs)
	}
	if errs := e.logsAt("ERROR"); len(errs) > 0 {
		t.Errorf("errors logged:\n%s", strings.Join(errs, "\n"))
	}
}

// TestStopClosesIdleConnections keeps a client connection idle after a
// request and sends SIGTERM: ebb closes the connection and exits 0.
func TestStopClosesIdleConnections(t *testing.T) {
	t.Parallel()
	origin := newOrigin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}))
	e := startEbb(t, singleClusterYAML(hostPort(origin)))
	c := rawConn(t, e.addr("public"))
	br := bufio.NewReader(c)
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: app\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(resp.Body); resp.StatusCode != 200 || string(b) != "ok" {
		t.Fatalf("status %d, body %q", resp.StatusCode, b)
	}
	e.signal(syscall.SIGTERM)
	if _, err := br.ReadByte(); err != io.EOF {
		t.Errorf("idle connection after SIGTERM: read %v, want EOF (closed by ebb)", err)
	}
	if code := e.exit(); code != 0 {
		t.Fatalf("exit status %d, want 0; log:\n%s", code, e.logs())
	}
}

// TestDrainInFlight holds a request at the origin and sends SIGTERM:
// /ready turns 503 at once, the request in flight still completes (with
// Connection: close), and ebb then exits 0. A second signal instead closes
// what is left at once, with exit status 3.
func TestDrainInFlight(t *testing.T) {
	t.Parallel()
	for _, second := range []bool{false, true} {
		name := "graceful"
		if second {
			name = "second signal forces"
		}
		t.Run(name, func(t *testing.T) {
			origin, held := gatedOrigin(t, "", func(w http.ResponseWriter, _ *http.Request, opened bool) {
				if opened {
					io.WriteString(w, "finished\n")
				}
			})
			// spread: 0s signals every connection at the trigger, all
			// before the wait phase begins, so that the test knows when
			// the in-flight connection has had its close signal.
			e := startEbb(t, singleClusterYAML(hostPort(origin))+"drain: { spread: 0s }\n")

			done := getHeld(t, newClient(t), e.url("public", "/slow"), 0)
			recv(t, held.arrived, "the request to reach the origin")

			e.signal(syscall.SIGTERM)
			status, body := pollReady(t, e)
			if status != 503 || !strings.HasPrefix(body, "draining: ") {
				t.Errorf("/ready during the drain: %d %q, want 503 \"draining: ...\"", status, body)
			}

			if second {
				e.signal(syscall.SIGTERM)
				if code := e.exit(); code != 3 {
					t.Errorf("exit status %d after a second signal, want 3", code)
				}
				if r := recv(t, done, "the request in flight to end"); r.err == nil {
					t.Errorf("the request in flight got %d %q; the forced stop should have cut it", r.status, r.body)
				}
				return
			}
			// Release the origin only once the close signal is given (the
			// wait phase begins after it): a response that ends before the
			// connection's moment rightly carries no Connection: close.
			for !strings.Contains(body, "phase wait") {
				if status, body = pollReady(t, e); status != 503 {
					t.Fatalf("/ready during the drain: %d %q, want 503", status, body)
				}
			}
			held.open()
			r := recv(t, done, "the request in flight to complete")
			if r.err != nil || r.status != 200 || r.body != "finished\n" {
				t.Fatalf("request in flight: %d %q %v; want 200 \"finished\\n\"", r.status, r.body, r.err)
			}
			if !r.close {
				t.Errorf("the response finished during the drain does not carry Connection: close")
			}
			if code := e.exit(); code != 0 {
				t.Fatalf("exit status %d, want 0; log:\n%s", code, e.logs())
			}
			recs := e.logRecords("ebb exiting")
			if len(recs) != 1 || recs[0]["reason"] != "drained" {
				t.Errorf("exit log lines %v, want one with reason drained", recs)
			}
		})
	}
}

// pollReady polls /ready until it stops answering 200 (bounded by
// waitTimeout) and returns the answer.
func pollReady(t *testing.T, e *ebbProc) (int, string) {
	t.Helper()
	timeout, stop := after(waitTimeout)
	defer stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		resp, err := adminClient.Get(e.adminURL("/ready"))
		if err != nil {
			t.Fatalf("/ready: %v", err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return resp.StatusCode, string(b)
		}
		select {
		case <-tick.C:
		case <-timeout:
			t.Fatalf("/ready still answers 200 %q %s after the signal", b, waitTimeout)
		}
	}
}
