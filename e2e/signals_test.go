package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// nameOrigin answers every request with its name.
func nameOrigin(t *testing.T, name string) string {
	t.Helper()
	return hostPort(newOrigin(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, name)
	})))
}

// routeYAML is a configuration whose one route goes to cluster to.
func routeYAML(to string, clusters map[string]string) string {
	y := fmt.Sprintf(`admin: { address: 127.0.0.1:0 }
listeners:
  - name: public
    address: 127.0.0.1:0
    routes:
      - match: { path_prefix: "/" }
        cluster: %s
clusters:
`, to)
	for _, name := range []string{"a", "b"} {
		if addr, ok := clusters[name]; ok {
			y += fmt.Sprintf("  - name: %s\n    discovery: { static: [%q] }\n", name, addr)
		}
	}
	return y
}

// TestReload changes the configuration file of a running ebb (whose
// reload.watch is off) and has it reloaded by each trigger, with one keep-alive client throughout: SIGHUP
// (twice: it never drains nor stops ebb whose drain.signals is the
// default), POST /reload and `ebb reload`. Each good file is in force for
// the client's next request on the same connection; each bad one (a YAML
// syntax error, a route to an unknown cluster, an invalid value, a file
// that cannot be read, a file gone) is rejected by
// every trigger with its problems, and the running configuration keeps
// serving. /config shows the generation; SIGTERM then drains as usual.
func TestReload(t *testing.T) {
	t.Parallel()
	origins := map[string]string{"a": nameOrigin(t, "A"), "b": nameOrigin(t, "B")}
	// The triggers, one at a time: no watching of the file here (see
	// TestReloadWatch).
	path := writeConfig(t, routeYAML("a", origins))
	e := startEbbArgs(t, path, append([]string{"run", "-config", path, "-set", "reload.watch=false"}, quickDrain...)...)
	// The listener binds :0: later files name the port it got, so that
	// they do not ask for a listener change.
	port := e.addr("public")[strings.LastIndexByte(e.addr("public"), ':')+1:]
	fileFor := func(to string, clusters map[string]string) string {
		return strings.Replace(routeYAML(to, clusters), "127.0.0.1:0\n    routes", "127.0.0.1:"+port+"\n    routes", 1)
	}
	adminAddr := strings.TrimPrefix(e.adminURL(""), "http://")
	fileFor = func(f func(string, map[string]string) string) func(string, map[string]string) string {
		return func(to string, c map[string]string) string {
			return strings.Replace(f(to, c), "admin: { address: 127.0.0.1:0 }", "admin: { address: "+adminAddr+" }", 1)
		}
	}(fileFor)
	write := func(content string) {
		t.Helper()
		if err := os.WriteFile(e.config, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	client := newClient(t)
	get := func(want string) { t.Helper(); expectBody(t, client, e.url("public", "/"), want) }
	postReload := func() (int, map[string]any) {
		t.Helper()
		resp, err := http.Post(e.adminURL("/reload"), "", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var res map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&res); err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, res
	}
	ebbReload := func() (int, string) {
		t.Helper()
		var out bytes.Buffer
		cmd := exec.Command(ebbBin, "reload", "-admin", adminAddr)
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return code, out.String()
	}
	get("A")

	// SIGHUP, twice: applied each time, never a drain.
	write(fileFor("b", origins))
	e.signal(syscall.SIGHUP)
	awaitLogLines(t, e, "configuration reloaded", 1)
	get("B")
	write(fileFor("a", origins))
	e.signal(syscall.SIGHUP)
	awaitLogLines(t, e, "configuration reloaded", 2)
	get("A")

	// Bad files, each rejected by all three triggers.
	const unreadable = "(a directory)"
	bad := []struct{ name, content, problem string }{
		{"YAML syntax error", "listeners: [\n", "yaml"},
		{"route to an unknown cluster", fileFor("c", origins), `no cluster is named "c"`},
		{"invalid value", fileFor("b", origins) + "    timeouts: { connect: soon }\n", "timeouts.connect"},
		{"unreadable file", unreadable, "is a directory"},
		{"file gone", "", "no such file"},
	}
	rejected := 0
	for _, tc := range bad {
		switch tc.content {
		case "", unreadable:
			if err := os.Remove(e.config); err != nil {
				t.Fatal(err)
			}
			if tc.content == unreadable {
				// Root reads any file whatever its mode: a directory
				// in its place is unreadable to everyone.
				if err := os.Mkdir(e.config, 0o755); err != nil {
					t.Fatal(err)
				}
			}
		default:
			write(tc.content)
		}
		e.signal(syscall.SIGHUP)
		rejected++
		recs := awaitLogLines(t, e, "configuration reload rejected; the running configuration stays", rejected)
		if p := fmt.Sprint(recs[len(recs)-1]["problems"]); !strings.Contains(p, tc.problem) {
			t.Errorf("%s: SIGHUP's rejection names %q, want it to mention %q", tc.name, p, tc.problem)
		}
		status, res := postReload()
		rejected++
		if status != http.StatusUnprocessableEntity || res["applied"] != false || !strings.Contains(fmt.Sprint(res["errors"]), tc.problem) {
			t.Errorf("%s: POST /reload answered %d %v, want 422, not applied, errors mentioning %q", tc.name, status, res, tc.problem)
		}
		code, out := ebbReload()
		rejected++
		if code != 1 || !strings.Contains(out, "kept its running configuration") || !strings.Contains(out, tc.problem) {
			t.Errorf("%s: ebb reload exited %d with %q, want 1 and the problem %q", tc.name, code, out, tc.problem)
		}
		get("A")
	}

	// Fixed: ebb reload applies it, and /config shows the generation.
	write(fileFor("b", origins))
	if code, out := ebbReload(); code != 0 || !strings.Contains(out, "configuration reloaded (generation 3)") {
		t.Fatalf("ebb reload exited %d with %q, want 0 and generation 3", code, out)
	}
	get("B")
	status, body, _ := do(t, newClient(t), mustGet(t, e.adminURL("/config")))
	var cfg struct {
		Reload struct {
			Generation int `json:"generation"`
		} `json:"reload"`
	}
	if err := json.Unmarshal(body, &cfg); status != 200 || err != nil || cfg.Reload.Generation != 3 {
		t.Fatalf("/config: %d, reload generation %d (%v), want 3", status, cfg.Reload.Generation, err)
	}
	samples := scrape(t, e)
	for result, want := range map[string]float64{"applied": 3, "rejected": float64(rejected)} {
		if v, ok := metricValue(samples, "ebb_config_reloads_total", map[string]string{"result": result}); !ok || v != want {
			t.Errorf("ebb_config_reloads_total{result=%q}: %v (present %v), want %v", result, v, ok, want)
		}
	}
	if recs := e.logRecords("drain started"); len(recs) != 0 {
		t.Fatalf("a reload started a drain: %v", recs)
	}
	// The rejected reloads were logged as errors, on purpose: the clean
	// exit is checked here instead of by stop.
	e.stopped = true
	if code, err := e.terminate(); err != nil || code != 0 {
		t.Fatalf("SIGTERM after the reloads: exit %d, %v; want 0. Log:\n%s", code, err, e.logs())
	}
}

func mustGet(t *testing.T, url string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// TestReloadDuringDrain asks a draining ebb to reload: refused, so that
// the drain runs to its end on the configuration it started with.
func TestReloadDuringDrain(t *testing.T) {
	t.Parallel()
	origin := nameOrigin(t, "A")
	path := writeConfig(t, routeYAML("a", map[string]string{"a": origin}))
	// A drain that lasts 2 s at least, so that the reload comes within it.
	e := startEbbArgs(t, path, append([]string{"run", "-config", path}, append(quickDrain, "-set", "drain.min_duration=2s")...)...)
	resp, err := http.Post(e.adminURL("/drain"), "", nil)
	if err != nil || resp.StatusCode != http.StatusAccepted {
		t.Fatalf("POST /drain: %v %v", resp, err)
	}
	resp.Body.Close()
	awaitLogLines(t, e, "drain started", 1)
	resp, err = http.Post(e.adminURL("/reload"), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(string(body), "ebb is draining") {
		t.Fatalf("POST /reload during the drain: %d %s, want 422 and the drain named", resp.StatusCode, body)
	}
	e.stopped = true // the refusal is logged as an error, on purpose
	if code, err := e.wait(stopTimeout); err != nil || code != 0 {
		t.Fatalf("the drain's exit: %d, %v; want 0. Log:\n%s", code, err, e.logs())
	}
}

// TestReloadWatch replaces the configuration file of a running ebb the
// two ways it is replaced in practice, with reload.watch at its default
// (on): an atomic rename (what editors and config tools do), and a
// Kubernetes ConfigMap update (the file is a symlink through "..data",
// itself a symlink swapped to a new directory). Each is in force for the
// client's next request; a broken file written meanwhile changes nothing.
func TestReloadWatch(t *testing.T) {
	t.Parallel()
	origins := map[string]string{"a": nameOrigin(t, "A"), "b": nameOrigin(t, "B")}
	dir := t.TempDir()
	// The ConfigMap layout: ebb.yaml -> ..data/ebb.yaml, ..data -> ..v1.
	version := func(name, content string) {
		t.Helper()
		if err := os.Mkdir(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name, "ebb.yaml"), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	swap := func(name string) {
		t.Helper()
		tmp := filepath.Join(dir, "..data_tmp")
		if err := os.Symlink(name, tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	version("..v1", routeYAML("a", origins))
	swap("..v1")
	path := filepath.Join(dir, "ebb.yaml")
	if err := os.Symlink(filepath.Join("..data", "ebb.yaml"), path); err != nil {
		t.Fatal(err)
	}
	e := startEbbArgs(t, path, append([]string{"run", "-config", path}, quickDrain...)...)
	port := e.addr("public")[strings.LastIndexByte(e.addr("public"), ':')+1:]
	adminAddr := strings.TrimPrefix(e.adminURL(""), "http://")
	fixed := func(to string) string {
		y := strings.Replace(routeYAML(to, origins), "127.0.0.1:0\n    routes", "127.0.0.1:"+port+"\n    routes", 1)
		return strings.Replace(y, "admin: { address: 127.0.0.1:0 }", "admin: { address: "+adminAddr+" }", 1)
	}
	client := newClient(t)
	get := func(want string) { t.Helper(); expectBody(t, client, e.url("public", "/"), want) }
	get("A")

	// A ConfigMap update.
	version("..v2", fixed("b"))
	swap("..v2")
	awaitLogLines(t, e, "configuration reloaded", 1)
	get("B")

	// A broken file, then a good one, each by atomic rename over the
	// version's file.
	replace := func(content string) {
		t.Helper()
		tmp := filepath.Join(dir, "..v2", "ebb.yaml.tmp")
		if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "..v2", "ebb.yaml")); err != nil {
			t.Fatal(err)
		}
	}
	replace("listeners: [\n")
	swap("..v2") // kubelet-like: an event in the watched directory
	awaitLogLines(t, e, "configuration reload rejected; the running configuration stays", 1)
	get("B")
	replace(fixed("a"))
	swap("..v2")
	awaitLogLines(t, e, "configuration reloaded", 2)
	get("A")
	e.stopped = true // the rejected file was logged as an error, on purpose
	if code, err := e.terminate(); err != nil || code != 0 {
		t.Fatalf("SIGTERM: exit %d, %v; want 0. Log:\n%s", code, err, e.logs())
	}
}

// expectBody GETs url and fails the test unless the answer is 200 with
// body want.
func expectBody(t *testing.T, client *http.Client, url, want string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if status, body, _ := do(t, client, req); status != 200 || string(body) != want {
		t.Fatalf("GET %s: %d %q, want 200 %q", url, status, body, want)
	}
}
