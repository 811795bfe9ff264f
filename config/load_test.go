package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

const minimal = `
listeners:
  - name: public
    address: 127.0.0.1:8080
    routes:
      - match: { path_prefix: "/" }
        cluster: app
clusters:
  - name: app
    discovery: { static: ["127.0.0.1:9000"] }
`

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ebb.yaml")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestLoadDefaults(t *testing.T) {
	cfg, err := Load(writeConfig(t, minimal), Options{})
	if err != nil {
		t.Fatal(err)
	}
	l, c := cfg.Listeners[0], cfg.Clusters[0]
	checks := []struct {
		name      string
		got, want any
	}{
		{"admin.address", cfg.Admin.Address, DefaultAdminAddress},
		{"role", l.Role, RoleInbound},
		{"max_header_bytes", l.Limits.MaxHeaderBytes, Size(32 << 10)},
		{"max_body_bytes", l.Limits.MaxBodyBytes, Size(0)},
		{"min_body_rate", l.Limits.MinBodyRate, Size(1 << 10)},
		{"max_connections", l.Limits.MaxConnections, 20000},
		{"max_in_flight", l.Limits.MaxInFlight, 20000},
		{"cluster max_in_flight", c.MaxInFlight, 0},
		{"http2.max_concurrent_streams", l.HTTP2.MaxConcurrentStreams, 250},
		{"http2.stream_window", l.HTTP2.StreamWindow, Size(256 << 10)},
		{"http2.connection_window", l.HTTP2.ConnectionWindow, Size(1 << 20)},
		{"timeouts.header", l.Timeouts.Header, 10 * time.Second},
		{"timeouts.idle", l.Timeouts.Idle, 120 * time.Second},
		{"timeouts.write", l.Timeouts.Write, 30 * time.Second},
		{"paths.normalize", l.Paths.Normalize, false},
		{"paths.merge_slashes", l.Paths.MergeSlashes, false},
		{"paths.escaped_slashes", l.Paths.EscapedSlashes, EscapedSlashesKeep},
		{"protocol", c.Protocol, ProtocolHTTP1},
		{"balancer", c.Balancer, BalancerLeastRequest},
		{"connect", c.Timeouts.Connect, 2 * time.Second},
		{"response", c.Timeouts.Response, 30 * time.Second},
		{"upstream idle", c.Timeouts.Idle, 4 * time.Second},
		{"max_conns", c.MaxConnsPerEndpoint, 512},
		{"drain.spread", cfg.Drain.Spread, 2 * time.Second},
		{"drain.timeout", cfg.Drain.Timeout, 25 * time.Second},
		{"drain.min_duration", cfg.Drain.EffectiveMinDuration(), 2 * time.Second},
		{"drain.idle_close", cfg.Drain.HTTP1.IdleClose, IdleClose(time.Second)},
		{"drain.signals", strings.Join(cfg.Drain.Signals, ","), "SIGTERM,SIGINT"},
		{"log.format", cfg.Telemetry.Log.Format, "json"},
		{"prometheus", cfg.Telemetry.Metrics.Prometheus, true},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
}

// The example writes every key at its default (the reference,
// docs/CONFIGURATION.md, says what each does): it must load, and must say
// what Default and the element defaults say.
func TestExampleMatchesDefaults(t *testing.T) {
	ex, err := Load("../examples/ebb.yaml", Options{})
	if err != nil {
		t.Fatal(err)
	}
	def, err := Load(writeConfig(t, minimal), Options{})
	if err != nil {
		t.Fatal(err)
	}
	// The example names its own listener and origin; compare the rest.
	ex.Listeners[0].Name, ex.Listeners[0].Address, ex.Listeners[0].Routes = def.Listeners[0].Name, def.Listeners[0].Address, def.Listeners[0].Routes
	ex.Clusters[0].Discovery = def.Clusters[0].Discovery
	ex.Source = def.Source
	if got, want := render(ex), render(def); got != want {
		t.Errorf("examples/ebb.yaml differs from the defaults:\n got %s\nwant %s", got, want)
	}
}

func render(c *Config) string {
	var b strings.Builder
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		switch x := v.(type) {
		case map[string]any:
			for _, k := range sortedKeys(x) {
				walk(prefix+"."+k, x[k])
			}
		case []any:
			for i, e := range x {
				walk(fmt.Sprintf("%s[%d]", prefix, i), e)
			}
		default:
			b.WriteString(prefix)
			b.WriteString("=")
			fmt.Fprintf(&b, "%v\n", v)
		}
	}
	walk("", c.Map())
	return b.String()
}

func TestLoadProblems(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		sets []string
		env  []string
		want []string // each must appear in the error
	}{
		{
			name: "unknown key with suggestion",
			yaml: strings.Replace(minimal, "address:", "adress:", 1),
			want: []string{"ebb.yaml: listeners[0].adress: unknown key (did you mean \"address\"?)", "listeners[0].address: missing"},
		},
		{
			name: "unknown top-level key lists known keys",
			yaml: minimal + "bogus: 1\n",
			want: []string{"bogus: unknown key (known here: admin, listeners, clusters, drain, telemetry, reload, takeover)"},
		},
		{
			name: "bad duration and size",
			yaml: minimal + "drain: { delay: 5x }\n",
			sets: []string{"listeners.0.limits.max_header_bytes=lots"},
			want: []string{
				"ebb.yaml: drain.delay: expected a duration such as 500ms, 2s or 1m, got \"5x\"",
				"flag -set listeners.0.limits.max_header_bytes=lots: listeners[0].limits.max_header_bytes: expected a size",
			},
		},
		{
			name: "bare number is not a duration",
			yaml: minimal + "drain: { timeout: 30 }\n",
			want: []string{"drain.timeout: expected a duration such as 500ms, 2s or 1m, got 30"},
		},
		{
			name: "environment is named as the source",
			yaml: minimal,
			env:  []string{"EBB_DRAIN__QUIET=soon"},
			want: []string{"environment EBB_DRAIN__QUIET: drain.quiet: expected a duration"},
		},
		{
			name: "route to a missing cluster",
			yaml: strings.Replace(minimal, "cluster: app", "cluster: api", 1),
			want: []string{"listeners[0].routes[0].cluster: no cluster is named \"api\""},
		},
		{
			name: "bad address, enum and endpoint",
			yaml: `
listeners:
  - name: a
    address: localhost
    role: sidecar
    routes: [{ cluster: c }]
clusters:
  - name: c
    balancer: random
    discovery: { static: ["127.0.0.1"] }
`,
			want: []string{
				"listeners[0].address: expected host:port, such as 127.0.0.1:8080, got \"localhost\"",
				"listeners[0].role: expected one of inbound, outbound, got \"sidecar\"",
				"clusters[0].balancer: expected one of least_request, ewma, round_robin, p2c, got \"random\"",
				"clusters[0].discovery.static[0]: expected host:port",
			},
		},
		{
			name: "outlier detection out of range",
			yaml: `
listeners:
  - name: a
    address: 127.0.0.1:8080
    routes: [{ cluster: c }]
clusters:
  - name: c
    discovery: { static: ["127.0.0.1:9000"] }
    outlier_detection: { consecutive_5xx: -1, consecutive_gateway_errors: -2, base_ejection_time: 10s, max_ejection_time: 5s, max_ejected_percent: 150 }
`,
			want: []string{
				"clusters[0].outlier_detection.consecutive_5xx: expected a count (0: off), got -1",
				"clusters[0].outlier_detection.consecutive_gateway_errors: expected a count (0: off), got -2",
				"clusters[0].outlier_detection.max_ejection_time: expected at least base_ejection_time (10s), got 5s",
				"clusters[0].outlier_detection.max_ejected_percent: expected a percentage from 0 to 100, got 150",
			},
		},
		{
			name: "duplicate names and addresses",
			yaml: minimal + `  - name: app
    discovery: { static: ["127.0.0.1:9001"] }
`,
			sets: []string{"listeners.1.name=public", "listeners.1.address=127.0.0.1:8080", "listeners.1.routes=[{cluster: app}]"},
			want: []string{
				"clusters[1].name: the name \"app\" is used twice",
				"listeners[1].name: the name \"public\" is used twice",
				"listeners[1].address: 127.0.0.1:8080 overlaps 127.0.0.1:8080, the address of listener \"public\"",
			},
		},
		{
			name: "wildcard address overlaps, route host with port, endpoint listed twice",
			yaml: strings.Replace(minimal, `static: ["127.0.0.1:9000"]`, `static: ["127.0.0.1:9000", "127.0.0.1:9000"]`, 1),
			sets: []string{"listeners.1.name=all", "listeners.1.address=0.0.0.0:8080", "listeners.1.routes=[{cluster: app, match: {host: 'a.example.com:8080'}}]"},
			want: []string{
				"listeners[1].address: 0.0.0.0:8080 overlaps 127.0.0.1:8080",
				"listeners[1].routes[0].match.host: expected a host name without port",
				"clusters[0].discovery.static[1]: 127.0.0.1:9000 is listed twice",
			},
		},
		{
			name: "list element set from the environment names the variable",
			yaml: minimal,
			env:  []string{"EBB_CLUSTERS__0__DISCOVERY__STATIC=origin"},
			want: []string{"environment EBB_CLUSTERS__0__DISCOVERY__STATIC: clusters[0].discovery.static[0]: expected host:port"},
		},
		{
			name: "two discovery sources",
			yaml: strings.Replace(minimal, `discovery: { static: ["127.0.0.1:9000"] }`, `discovery: { static: ["127.0.0.1:9000"], file: eps.yaml }`, 1),
			want: []string{"clusters[0].discovery: name exactly one source; found 2"},
		},
		{
			name: "unknown on_empty",
			yaml: strings.Replace(minimal, `discovery: { static: ["127.0.0.1:9000"] }`, `discovery: { static: ["127.0.0.1:9000"], on_empty: drop }`, 1),
			want: []string{`clusters[0].discovery.on_empty: expected keep or apply, got "drop"`},
		},
		{
			name: "endpoint file in a missing directory",
			yaml: strings.Replace(minimal, `discovery: { static: ["127.0.0.1:9000"] }`, `discovery: { file: nowhere/eps.yaml }`, 1),
			want: []string{"clusters[0].discovery.file: the directory of ", "nowhere/eps.yaml does not exist"},
		},
		{
			name: "DNS source without a name, with a bad port and server",
			yaml: strings.Replace(minimal, `discovery: { static: ["127.0.0.1:9000"] }`, `discovery: { dns: { port: 70000, refresh: 0s, server: nowhere } }`, 1),
			want: []string{
				"clusters[0].discovery.dns.name: missing",
				"clusters[0].discovery.dns.port: expected a port from 1 to 65535",
				"clusters[0].discovery.dns.refresh: expected a duration above zero",
				"clusters[0].discovery.dns.server: expected host:port",
			},
		},
		{
			name: "drain timeout shorter than delay plus spread",
			yaml: minimal + "drain: { delay: 20s, spread: 10s, timeout: 25s }\n",
			want: []string{"drain.timeout: 25s leaves no time to drain"},
		},
		{
			name: "unknown signal and two app watchers",
			yaml: minimal + "drain: { signals: [SIGTERM, SIGKILL], app: { tcp: 127.0.0.1:9000, pid: 12 } }\n",
			want: []string{"drain.signals[1]: expected one of SIGTERM", "drain.app: name at most one of tcp, http, pid and pid_file; found 2"},
		},
		{
			name: "wrong shapes",
			yaml: "listeners: public\nclusters: [{ name: c, discovery: { static: 5 } }]\n",
			want: []string{"listeners: expected a list, got \"public\"", "clusters[0].discovery.static: expected a list, got 5"},
		},
		{
			name: "no listeners",
			yaml: "clusters: []\n",
			want: []string{"listeners: at least one listener is needed"},
		},
		{
			name: "malformed -set",
			yaml: minimal,
			sets: []string{"drain.delay"},
			want: []string{"flag -set drain.delay: expected key=value"},
		},
		{
			name: "index past the end of a list",
			yaml: minimal,
			env:  []string{"EBB_LISTENERS__5__NAME=x"},
			want: []string{"listeners[5].name: no list element 5 (the list has 1)"},
		},
		{
			name: "invalid YAML",
			yaml: "listeners: [\n",
			want: []string{"ebb.yaml: not valid YAML"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load(writeConfig(t, tt.yaml), Options{Sets: tt.sets, Environ: tt.env})
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("err = %v, want a *config.Error", err)
			}
			msg := err.Error()
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error lacks %q; it is:\n%s", w, msg)
				}
			}
		})
	}
}

func TestLoadMissingFile(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "nope.yaml"), Options{})
	if err == nil || !strings.Contains(err.Error(), "nope.yaml: no such file") {
		t.Fatalf("err = %v", err)
	}
}

func TestOverrides(t *testing.T) {
	cfg, err := Load(writeConfig(t, minimal), Options{
		Environ: []string{
			"EBB_DRAIN__DELAY=5s",
			"EBB_LISTENERS__0__LIMITS__MAX_BODY_BYTES=1MiB",
			"EBB_DRAIN__SIGNALS=SIGTERM,SIGHUP",
			"EBB_CLUSTERS__0__DISCOVERY__STATIC=[127.0.0.1:1, 127.0.0.1:2]",
			"HOME=/root", // not ours
		},
		Sets: []string{"drain.delay=7s", "drain.http1.idle_close=never", "drain.min_duration=0s"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Drain.Delay != 7*time.Second {
		t.Errorf("drain.delay = %v, want the flag's 7s over the environment's 5s", cfg.Drain.Delay)
	}
	if cfg.Listeners[0].Limits.MaxBodyBytes != 1<<20 {
		t.Errorf("max_body_bytes = %d", cfg.Listeners[0].Limits.MaxBodyBytes)
	}
	if got := strings.Join(cfg.Drain.Signals, ","); got != "SIGTERM,SIGHUP" {
		t.Errorf("signals = %s", got)
	}
	if got := strings.Join(cfg.Clusters[0].Discovery.Static, ","); got != "127.0.0.1:1,127.0.0.1:2" {
		t.Errorf("static = %s", got)
	}
	if cfg.Drain.HTTP1.IdleClose != Never {
		t.Errorf("idle_close = %v, want never", cfg.Drain.HTTP1.IdleClose)
	}
	if cfg.Drain.EffectiveMinDuration() != 0 {
		t.Errorf("min_duration = %v, want an explicit 0s kept", cfg.Drain.EffectiveMinDuration())
	}
}

func TestParseSize(t *testing.T) {
	tests := []struct {
		in   string
		want Size
		err  bool
	}{
		{"65536", 65536, false},
		{"64KiB", 64 << 10, false},
		{"64kib", 64 << 10, false},
		{"1MiB", 1 << 20, false},
		{"2GiB", 2 << 30, false},
		{"64KB", 64000, false},
		{"1 MB", 1000000, false},
		{"10B", 10, false},
		{"", 0, true},
		{"-1", 0, true},
		{"1.5MiB", 0, true},
		{"lots", 0, true},
		{"99999999999999GiB", 0, true},
	}
	for _, tt := range tests {
		got, err := ParseSize(tt.in)
		if (err != nil) != tt.err || got != tt.want {
			t.Errorf("ParseSize(%q) = %v, %v; want %v, error %v", tt.in, got, err, tt.want, tt.err)
		}
	}
	for _, s := range []Size{0, 10, 1 << 10, 3 << 20, 1 << 30, 1500} {
		back, err := ParseSize(s.String())
		if err != nil || back != s {
			t.Errorf("round trip of %d via %q = %d, %v", s, s.String(), back, err)
		}
	}
}

func TestMapRedactsSecrets(t *testing.T) {
	type withSecret struct {
		Token string `key:"token" secret:"true"`
		Name  string `key:"name"`
	}
	m := encode(reflect.ValueOf(&withSecret{Token: "hunter2", Name: "n"}).Elem()).(map[string]any)
	if m["token"] != "[redacted]" || m["name"] != "n" {
		t.Fatalf("encode = %v", m)
	}
}

// FuzzLoad feeds arbitrary files to the loader: it must return a config or
// an error, never panic.
func FuzzLoad(f *testing.F) {
	f.Add([]byte(minimal))
	f.Add([]byte("listeners: [{name: a, address: ':1', routes: [{cluster: c}]}]\nclusters: [{name: c, discovery: {static: [':2']}}]"))
	f.Add([]byte("drain: { timeout: 1s, http1: { idle_close: never } }"))
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(t.TempDir(), "f.yaml")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err := Load(path, Options{})
		if (cfg == nil) == (err == nil) {
			t.Fatalf("Load returned config %v and error %v", cfg != nil, err)
		}
	})
}

// loadWants loads yaml and checks that it fails with a problem naming
// want, or, if want is empty, that it loads.
func loadWants(t *testing.T, yaml, want string) {
	t.Helper()
	_, err := Load(writeConfig(t, yaml), Options{})
	switch {
	case want == "" && err != nil:
		t.Fatal(err)
	case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
		t.Fatalf("err = %v, want one naming %q", err, want)
	}
}

func TestValidateHTTP2(t *testing.T) {
	for _, tc := range []struct {
		set  string
		want string // a problem; none if empty
	}{
		{set: "http2: { max_concurrent_streams: 100, stream_window: 64KiB, connection_window: 64KiB }"},
		{set: "http2: { max_concurrent_streams: 0 }", want: "listeners[0].http2.max_concurrent_streams: expected a number between 1 and 10000, got 0"},
		{set: "http2: { stream_window: 1KiB }", want: "listeners[0].http2.stream_window: expected a size between 64KiB and 2GiB-1, got 1KiB"},
		{set: "http2: { stream_window: 2GiB }", want: "listeners[0].http2.stream_window: expected a size between 64KiB and 2GiB-1"},
		{set: "http2: { stream_window: 4MiB }", want: "listeners[0].http2.connection_window: expected at least http2.stream_window"},
	} {
		t.Run(tc.set, func(t *testing.T) {
			yaml := strings.Replace(minimal, "    routes:", "    "+tc.set+"\n    routes:", 1)
			loadWants(t, yaml, tc.want)
		})
	}
}

// TestValidateLimits checks the limits, and headers.via, with the file's
// key in each error.
func TestValidateLimits(t *testing.T) {
	for _, tc := range []struct {
		set, where string
		want       string // a problem; none if empty
	}{
		{set: "limits: { max_connections: 0, max_in_flight: 0, min_body_rate: 0 }"},
		{set: "limits: { max_connections: 10, max_in_flight: 5, min_body_rate: 10KiB }"},
		{set: "limits: { max_connections: -1 }", want: "listeners[0].limits.max_connections: expected 0 (no cap) or more, got -1"},
		{set: "limits: { max_in_flight: -5 }", want: "listeners[0].limits.max_in_flight: expected 0 (no cap) or more, got -5"},
		{set: "limits: { min_body_rate: fast }", want: "listeners[0].limits.min_body_rate"},
		{set: "headers: { via: ebb }"},
		{set: "headers: { via: \"edge-1.example.net:8443\" }"},
		{set: "headers: { via: \"my proxy\" }", want: "listeners[0].headers.via: expected a name (a token such as ebb, or host:port), got \"my proxy\""},
		{set: "max_in_flight: 100", where: "cluster"},
		{set: "max_in_flight: -1", where: "cluster", want: "clusters[0].max_in_flight: expected 0 (no cap) or more, got -1"},
	} {
		t.Run(tc.set, func(t *testing.T) {
			yaml := strings.Replace(minimal, "    routes:", "    "+tc.set+"\n    routes:", 1)
			if tc.where == "cluster" {
				yaml = strings.Replace(minimal, `discovery: { static: ["127.0.0.1:9000"] }`, "discovery: { static: [\"127.0.0.1:9000\"] }\n    "+tc.set, 1)
			}
			loadWants(t, yaml, tc.want)
		})
	}
}

// TestValidatePaths checks the listener's paths block, from the file and
// from the environment.
func TestValidatePaths(t *testing.T) {
	for _, tc := range []struct {
		set  string
		env  []string
		want string // a problem; none if empty
	}{
		{set: "paths: { normalize: true, merge_slashes: true, escaped_slashes: decode }"},
		{set: "paths: { escaped_slashes: reject }"},
		{set: "paths: { escaped_slashes: keep }"},
		{set: "paths: { escaped_slashes: unescape }", want: `listeners[0].paths.escaped_slashes: expected one of keep, reject, decode, got "unescape"`},
		{set: "paths: { escaped_slashes: \"\" }", want: `listeners[0].paths.escaped_slashes: expected one of keep, reject, decode, got ""`},
		{set: "paths: { normalize: yes please }", want: "listeners[0].paths.normalize: expected"},
		{set: "paths: { normalise: true }", want: `listeners[0].paths.normalise: unknown key (did you mean "normalize"?)`},
		{env: []string{"EBB_LISTENERS__0__PATHS__ESCAPED_SLASHES=drop"}, want: `environment EBB_LISTENERS__0__PATHS__ESCAPED_SLASHES: listeners[0].paths.escaped_slashes: expected one of keep, reject, decode, got "drop"`},
	} {
		t.Run(tc.set+strings.Join(tc.env, ""), func(t *testing.T) {
			yaml := strings.Replace(minimal, "    routes:", "    "+tc.set+"\n    routes:", 1)
			cfg, err := Load(writeConfig(t, yaml), Options{Environ: tc.env})
			switch {
			case tc.want == "" && err != nil:
				t.Fatal(err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("err = %v, want one naming %q", err, tc.want)
			case tc.want == "" && cfg.Listeners[0].Paths.EscapedSlashes == "":
				t.Fatal("paths.escaped_slashes lost its default")
			}
		})
	}
}

func TestValidateRetries(t *testing.T) {
	for _, tc := range []struct {
		set  string
		want string // a problem; none if empty
	}{
		{set: "retries: { attempts: 1, budget: 0 }"},
		{set: "retries: { attempts: 5, budget: 1 }"},
		{set: "retries: { attempts: 0 }", want: "clusters[0].retries.attempts: expected 1 (no retry) to 5, got 0"},
		{set: "retries: { budget: 1.5 }", want: "clusters[0].retries.budget: expected a fraction from 0 to 1, got 1.5"},
		{set: "retries: { buffer_body: 1MiB }"},
		{set: "retries: { buffer_body: 0 }"},
		{set: "retries: { buffer_body: 32MiB }", want: "clusters[0].retries.buffer_body: expected a size from 0 (off) to 16MiB, got 33554432"},
	} {
		t.Run(tc.set, func(t *testing.T) {
			yaml := strings.Replace(minimal, `discovery: { static: ["127.0.0.1:9000"] }`, "discovery: { static: [\"127.0.0.1:9000\"] }\n    "+tc.set, 1)
			loadWants(t, yaml, tc.want)
		})
	}
}

func TestValidateTakeover(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		socket string
		want   string // a problem; none if empty
	}{
		{socket: ""},
		{socket: dir + "/takeover.sock"},
		{socket: "@ebb", want: `takeover.socket: expected a filesystem path, got the abstract socket "@ebb"`},
		{socket: dir + "/missing/takeover.sock", want: "takeover.socket: expected a path in an existing directory"},
		{socket: "/" + strings.Repeat("x", 120), want: "takeover.socket: expected a path of at most 107 bytes"},
	} {
		t.Run(tc.socket, func(t *testing.T) {
			loadWants(t, minimal+fmt.Sprintf("takeover: { socket: %q }\n", tc.socket), tc.want)
		})
	}
}

// TestDrainReport: drain.report names a file in an existing directory; a
// relative path is relative to the configuration file.
func TestDrainReport(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		report string
		want   string // a problem; none if empty
	}{
		{report: ""},
		{report: dir + "/drain.html"},
		{report: "drain.json"},
		{report: dir + "/missing/drain.html", want: `drain.report: expected a file path in an existing directory, got "` + dir + `/missing/drain.html"`},
		{report: dir, want: "drain.report: expected a file path, got the directory"},
	} {
		t.Run(tc.report, func(t *testing.T) {
			loadWants(t, minimal+fmt.Sprintf("drain: { report: %q }\n", tc.report), tc.want)
		})
	}
	path := writeConfig(t, minimal+"drain: { report: reports/drain.html }\n")
	if err := os.Mkdir(filepath.Join(filepath.Dir(path), "reports"), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg, err := Load(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(filepath.Dir(path), "reports", "drain.html"); cfg.Drain.Report != want {
		t.Errorf("drain.report = %q, want %q", cfg.Drain.Report, want)
	}
}

func TestValidateAdmin(t *testing.T) {
	dir := t.TempDir()
	good, short := dir+"/token", dir+"/short"
	if err := os.WriteFile(good, []byte("  0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(short, []byte("abcde"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		admin string
		want  string // a problem; none if empty
	}{
		{admin: "admin: { address: 127.0.0.1:9901, hosts: [ebb-admin.default.svc] }"},
		{admin: "admin: { address: 127.0.0.1:0 }"},
		{admin: "admin: { address: 127.0.0.1:8080 }", want: `admin.address: 127.0.0.1:8080 overlaps 127.0.0.1:8080, the address of listener "public"`},
		{admin: "admin: { address: 0.0.0.0:8080 }", want: "admin.address: 0.0.0.0:8080 overlaps 127.0.0.1:8080"},
		{admin: "admin: { address: 127.0.0.1:9901, hosts: [\"ebb:9901\"] }", want: `admin.hosts[0]: expected a host name without port, such as ebb-admin.default.svc, got "ebb:9901"`},
		{admin: "admin: { token_file: " + good + " }"},
		{admin: "admin: { probe_address: 0.0.0.0:9902 }"},
		{admin: "admin: { address: 127.0.0.1:9901, probe_address: 127.0.0.1:9901 }", want: "admin.probe_address: 127.0.0.1:9901 overlaps admin.address 127.0.0.1:9901"},
		{admin: "admin: { probe_address: 0.0.0.0:8080 }", want: `admin.probe_address: 0.0.0.0:8080 overlaps 127.0.0.1:8080, the address of listener "public"`},
		{admin: "admin: { probe_address: nowhere }", want: `admin.probe_address: expected host:port`},
		{admin: "admin: { token_file: " + short + " }", want: "admin.token_file: " + short + ": expected a token of at least 16 characters, got 5"},
		{admin: "admin: { token_file: " + dir + "/none }", want: "admin.token_file: open " + dir + "/none: no such file or directory"},
	} {
		t.Run(tc.admin, func(t *testing.T) {
			loadWants(t, minimal+tc.admin+"\n", tc.want)
		})
	}
}

func TestValidateTrustedProxies(t *testing.T) {
	for _, tc := range []struct {
		set  string
		want string // a problem; none if empty
	}{
		{set: `headers: { trusted_proxies: ["10.0.0.0/8", "192.0.2.7", "::1", "fd00::/8"] }`},
		{set: `headers: { trusted_proxies: ["10.0.0.0/33"] }`, want: `listeners[0].headers.trusted_proxies[0]: expected an IP address or CIDR prefix, such as 10.0.0.0/8, got "10.0.0.0/33"`},
		{set: `headers: { trusted_proxies: ["waf.internal"] }`, want: `listeners[0].headers.trusted_proxies[0]: expected an IP address or CIDR prefix`},
	} {
		t.Run(tc.set, func(t *testing.T) {
			loadWants(t, strings.Replace(minimal, "    routes:", "    "+tc.set+"\n    routes:", 1), tc.want)
		})
	}
}

func TestValidateTelemetry(t *testing.T) {
	for _, tc := range []struct {
		set  string // under telemetry:
		want string // a problem; none if empty
	}{
		{set: "access_log: { enabled: false }"},
		{set: "access_log: { format: combined, path: /var/log/ebb/access.log }"},
		{set: "access_log: { format: clf }", want: `telemetry.access_log.format: expected one of json, text, combined, got "clf"`},
		{set: "log: { access: true }", want: "telemetry.log.access: this key is now telemetry.access_log.enabled"},
		{set: "tracing: { enabled: true }"},
		{set: "tracing: { enabled: true, protocol: http/protobuf, endpoint: \"https://collector:4318/v1/traces\", sampling_ratio: 0.01, headers: { api-key: s3cr3t } }"},
		{set: "tracing: { protocol: thrift }", want: `telemetry.tracing.protocol: expected one of grpc, http/protobuf, got "thrift"`},
		{set: "tracing: { endpoint: \"collector:4317\" }", want: `telemetry.tracing.endpoint: expected a URL such as http://127.0.0.1:4317 or https://collector:4318/v1/traces, got "collector:4317"`},
		{set: "tracing: { sampling_ratio: 2 }", want: "telemetry.tracing.sampling_ratio: expected a number from 0 to 1, got 2"},
		{set: "tracing: { timeout: 0s }"},
		{set: "tracing: { timeout: 3s }"},
		{set: "tracing: { timeout: -1s }", want: `telemetry.tracing.timeout: expected a duration such as 500ms, 2s or 1m, got "-1s"`},
		{set: "tracing: { endpoint: \"grpc://collector:4317\" }", want: `telemetry.tracing.endpoint: expected a URL such as http://127.0.0.1:4317 or https://collector:4318/v1/traces, got "grpc://collector:4317"`},
		{set: "tracing: { endpoint: \"http:///v1/traces\" }", want: `telemetry.tracing.endpoint: expected a URL such as http://127.0.0.1:4317 or https://collector:4318/v1/traces, got "http:///v1/traces"`},
		// TLS towards an http:// endpoint, whatever the protocol and
		// whichever tls key: ebb check says so, not ebb run.
		{set: "tracing: { endpoint: \"http://collector:4317\", tls: { insecure_skip_verify: true } }", want: "ebb.yaml: telemetry.tracing.tls: set, but telemetry.tracing.endpoint is http:// (no TLS): use an https:// endpoint or remove tls"},
		{set: "tracing: { protocol: http/protobuf, endpoint: \"HTTP://collector:4318\", tls: { cert_file: c.pem, key_file: k.pem } }", want: "telemetry.tracing.tls: set, but telemetry.tracing.endpoint is http:// (no TLS)"},
		{set: "tracing: { protocol: grpc, endpoint: \"http://collector:4317\", tls: { ca_file: ca.pem } }", want: "telemetry.tracing.tls: set, but telemetry.tracing.endpoint is http:// (no TLS)"},
		{set: "tracing: { protocol: http/protobuf, endpoint: \"https://collector:4318\", tls: { insecure_skip_verify: true } }"},
		{set: "tracing: { tls: { insecure_skip_verify: true } }"}, // the environment's endpoint
		{set: "tracing: { tls: { cert_file: c.pem } }", want: "telemetry.tracing.tls: expected cert_file and key_file together, got only one"},
		{set: "tracing: { enabled: true, tls: { ca_file: /no/such/ca.pem } }", want: "telemetry.tracing.tls.ca_file: cannot read /no/such/ca.pem"},
		{set: "tracing: { headers: [a, b] }", want: "telemetry.tracing.headers: expected a mapping of names to values, got a list"},
		{set: "tracing: { resource_attributes: { deployment.environment: prod, replicas: 3 } }"},
	} {
		t.Run(tc.set, func(t *testing.T) {
			loadWants(t, minimal+"telemetry:\n  "+tc.set+"\n", tc.want)
		})
	}
}

// TestValidateTracingTimeout: a tracing timeout of 0 (the default) is
// left to the environment; a negative one, which the file cannot spell
// but a Config built in code can hold, is refused.
func TestValidateTracingTimeout(t *testing.T) {
	if d := Default().Telemetry.Tracing.Timeout; d != 0 {
		t.Errorf("the default telemetry.tracing.timeout is %s, want 0 (the environment's, else 10s)", d)
	}
	cfg, err := Load(writeConfig(t, minimal), Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{0, ""},
		{time.Second, ""},
		{-time.Second, "telemetry.tracing.timeout: expected 0s (the environment's, else 10s) or more, got -1s"},
	} {
		cfg.Telemetry.Tracing.Timeout = tc.d
		var got []string
		for _, p := range cfg.Validate() {
			got = append(got, p.String())
		}
		if tc.want == "" && len(got) > 0 || tc.want != "" && (len(got) != 1 || got[0] != tc.want) {
			t.Errorf("timeout %s: problems %q, want %q", tc.d, got, tc.want)
		}
	}
}

// TestTracingHeadersRedacted: the exporter's headers (API keys) are not
// shown by /config.
func TestTracingHeadersRedacted(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ebb.yaml")
	yaml := minimal + "telemetry:\n  tracing: { headers: { api-key: s3cr3t }, resource_attributes: { team: edge } }\n"
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := Load(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Telemetry.Tracing.Headers["api-key"] != "s3cr3t" || cfg.Telemetry.Tracing.ResourceAttributes["team"] != "edge" {
		t.Fatalf("decoded %+v", cfg.Telemetry.Tracing)
	}
	tr := cfg.Map()["telemetry"].(map[string]any)["tracing"].(map[string]any)
	if tr["headers"] != "[redacted]" || fmt.Sprint(tr["resource_attributes"]) != "map[team:edge]" {
		t.Errorf("/config shows tracing %v", tr)
	}
}
