package e2e

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// TestDashboardAndAlerts checks what deploy/ ships for Prometheus and
// Grafana against a running ebb: the alert rules pass promtool's checks
// and their unit tests; every metric the dashboard and the rules query is
// in ebb's /metrics once it has served a little of everything (HTTP/1,
// h2c, TLS, a failed handshake, a stream the client reset, a 502); and a
// real Prometheus scraping that ebb evaluates every dashboard query to
// data, and every rule without error.
func TestDashboardAndAlerts(t *testing.T) {
	promtool, prometheus := tool(t, "promtool"), tool(t, "prometheus")
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	rulesDir := filepath.Join(root, "deploy", "prometheus")
	for _, args := range [][]string{{"check", "rules", "alerts.yaml"}, {"test", "rules", "alerts_test.yaml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = rulesDir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	dashboard, annotations := dashboardQueries(t, filepath.Join(root, "deploy", "grafana", "ebb.json"))
	rules := ruleQueries(t, filepath.Join(rulesDir, "alerts.yaml"))

	e := startObservedEbb(t)
	names := map[string]bool{}
	for _, s := range scrape(t, e) {
		names[s.name] = true
	}
	metricName := regexp.MustCompile(`\b(?:ebb|process|go)_[a-z0-9_]+`)
	for _, q := range slices.Concat(dashboard, annotations, rules) {
		for _, name := range metricName.FindAllString(q, -1) {
			if !names[name] {
				t.Errorf("%s, queried by %q, is not in /metrics", name, q)
			}
		}
	}
	if t.Failed() {
		return
	}

	prom := startPrometheus(t, prometheus, e, filepath.Join(rulesDir, "alerts.yaml"))
	// Each query as Grafana sends it with the dashboard's variables set:
	// every panel shows data. A query ending in "> 0" shows only what
	// happened lately; without that filter it has data all the same.
	vars := strings.NewReplacer(`$job`, "ebb", `$instance`, ".*", `$__rate_interval`, "30s")
	for _, q := range dashboard {
		q = strings.TrimSuffix(vars.Replace(q), " > 0")
		if n := prom.query(t, q); n == 0 {
			t.Errorf("the dashboard's %q has no data", q)
		}
	}
	for _, q := range annotations { // data only while ebb drains
		prom.query(t, vars.Replace(q))
	}
	prom.rulesHealthy(t, len(rules))
}

// startObservedEbb starts ebb with a cleartext and a TLS listener, and
// has it serve a little of everything its metrics count. An idle
// keep-alive connection stays open (the connections gauge).
func startObservedEbb(t *testing.T) *ebbProc {
	t.Helper()
	held := make(chan struct{}, 1)
	origin := hostPort(newOrigin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			held <- struct{}{}
			<-r.Context().Done()
			return
		}
		io.WriteString(w, "ok")
	})))
	cert, key, pool := writeTestCert(t, t.TempDir())
	e := startEbb(t, fmt.Sprintf(`admin: { address: 127.0.0.1:0 }
listeners:
  - name: public
    address: 127.0.0.1:0
    routes:
      - { match: { path_prefix: /broken }, cluster: gone }
      - { cluster: app }
  - name: secure
    address: 127.0.0.1:0
    tls: { cert: %q, key: %q }
    routes: [{ cluster: app }]
clusters:
  - { name: app, discovery: { static: [%q] } }
  - { name: gone, discovery: { static: [%q] } }
`, cert, key, origin, closedPort(t)))

	keepAlive := newClient(t)
	for _, path := range []string{"/", "/broken"} {
		get(t, keepAlive, e.url("public", path))
	}
	tlsClient := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}}
	t.Cleanup(tlsClient.CloseIdleConnections)
	if code, _, resp := get(t, tlsClient, "https://"+e.addr("secure")+"/"); code != http.StatusOK || resp.ProtoMajor != 2 {
		t.Fatalf("GET over TLS: %d, HTTP/%d", code, resp.ProtoMajor)
	}
	// A failed handshake: not TLS at all.
	c, err := net.Dial("tcp", e.addr("secure"))
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	io.Copy(io.Discard, c)
	c.Close()
	// An h2c stream reset by the client while its request is upstream.
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	h2c := &http.Transport{Protocols: &protos}
	t.Cleanup(h2c.CloseIdleConnections)
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.url("public", "/hold"), nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if resp, err := h2c.RoundTrip(req); err == nil {
			resp.Body.Close()
		}
	}()
	recv(t, held, "the held request at the origin")
	cancel()
	<-done
	return e
}

// dashboardQueries returns every PromQL query of the Grafana dashboard at
// path: its panels' targets and its variables', then its annotations'.
func dashboardQueries(t *testing.T, path string) (queries, annotations []string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
		Templating struct {
			List []struct {
				Type  string
				Query json.RawMessage
			}
		}
		Annotations struct {
			List []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var out []string
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			out = append(out, tg.Expr)
		}
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct{ Query string }
		if err := json.Unmarshal(v.Query, &q); err != nil || !strings.HasPrefix(q.Query, "label_values(") {
			t.Fatalf("%s: variable query %s: want label_values(...)", path, v.Query)
		}
		// label_values(selector, label): the selector is the query.
		sel := strings.TrimPrefix(q.Query, "label_values(")
		out = append(out, strings.TrimSpace(sel[:strings.LastIndexByte(sel, ',')]))
	}
	for _, a := range d.Annotations.List {
		annotations = append(annotations, a.Expr)
	}
	if len(out) < 20 || len(annotations) == 0 {
		t.Fatalf("%s: only %d queries and %d annotations found", path, len(out), len(annotations))
	}
	return out, annotations
}

// ruleQueries returns the expr of every rule in the rule file at path.
func ruleQueries(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []struct {
			Rules []struct{ Expr string }
		}
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var out []string
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			out = append(out, r.Expr)
		}
	}
	return out
}

// promServer is a Prometheus started by the test.
type promServer struct{ base string }

// startPrometheus starts Prometheus scraping e's /metrics every second
// with the rules of ruleFile evaluated every second, and returns once it
// has scraped three times.
func startPrometheus(t *testing.T, bin string, e *ebbProc, ruleFile string) *promServer {
	t.Helper()
	dir := t.TempDir()
	admin, err := url.Parse(e.adminURL("/"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`global: { scrape_interval: 1s, evaluation_interval: 1s }
rule_files: [%q]
scrape_configs:
  - job_name: ebb
    static_configs: [{ targets: [%q] }]
`, ruleFile, admin.Host)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := freePort(t)
	cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+addr)
	var logs strings.Builder
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("prometheus:\n%s", logs.String())
		}
	})
	p := &promServer{base: "http://" + addr}
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(60 * time.Second)
	for {
		select {
		case <-exited:
			t.Fatalf("prometheus exited:\n%s", logs.String())
		case <-deadline:
			t.Fatalf("prometheus did not scrape ebb three times in 60 s:\n%s", logs.String())
		case <-tick.C:
		}
		if v, ok := p.scalar(`count_over_time(up{job="ebb"}[1m])`); ok && v >= 3 {
			return p
		}
	}
}

// freePort returns a 127.0.0.1 address free a moment ago, for a program
// that binds its own.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// promResult is the answer of Prometheus' query API.
type promResult struct {
	Status string
	Error  string
	Data   struct {
		Result []struct {
			Value [2]any
		}
	}
}

func (p *promServer) get(path string, params url.Values) (promResult, error) {
	var r promResult
	resp, err := http.Get(p.base + path + "?" + params.Encode())
	if err != nil {
		return r, err
	}
	defer resp.Body.Close()
	return r, json.NewDecoder(resp.Body).Decode(&r)
}

// scalar returns the value of q's first series, if it has one (for
// polling: errors are no value yet).
func (p *promServer) scalar(q string) (float64, bool) {
	r, err := p.get("/api/v1/query", url.Values{"query": {q}})
	if err != nil || r.Status != "success" || len(r.Data.Result) == 0 {
		return 0, false
	}
	var v float64
	s, _ := r.Data.Result[0].Value[1].(string)
	_, err = fmt.Sscan(s, &v)
	return v, err == nil
}

// query evaluates q, failing the test if Prometheus rejects it, and
// returns how many series it has.
func (p *promServer) query(t *testing.T, q string) int {
	t.Helper()
	r, err := p.get("/api/v1/query", url.Values{"query": {q}})
	if err != nil {
		t.Fatalf("query %q: %v", q, err)
	}
	if r.Status != "success" {
		t.Errorf("query %q: %s", q, r.Error)
	}
	return len(r.Data.Result)
}

// rulesHealthy checks that Prometheus loaded n rules and evaluated each
// without error.
func (p *promServer) rulesHealthy(t *testing.T, n int) {
	t.Helper()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(30 * time.Second)
	for {
		resp, err := http.Get(p.base + "/api/v1/rules")
		if err != nil {
			t.Fatal(err)
		}
		var r struct {
			Data struct {
				Groups []struct {
					Rules []struct {
						Name, Health, LastError string
					}
				}
			}
		}
		err = json.NewDecoder(resp.Body).Decode(&r)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		var seen, ok int
		var bad []string
		for _, g := range r.Data.Groups {
			for _, rule := range g.Rules {
				seen++
				switch rule.Health {
				case "ok":
					ok++
				case "err":
					bad = append(bad, rule.Name+": "+rule.LastError)
				}
			}
		}
		if len(bad) > 0 {
			t.Fatalf("rules failing to evaluate: %v", bad)
		}
		if seen == n && ok == n {
			return
		}
		select {
		case <-deadline:
			t.Fatalf("%d of %d rules loaded, %d evaluated", seen, n, ok)
		case <-tick.C:
		}
	}
}
