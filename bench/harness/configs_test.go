package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ebb-proxy/ebb/config"
)

// setRunEnv sets what run.sh exports for bench/harness configs, for a
// run of parts, with the work directory dir.
func setRunEnv(t *testing.T, dir, parts string, idleUpConns string) {
	t.Helper()
	vars := map[string]string{
		"WORK": dir, "PARTS_RUN": parts, "BASE_ACCESS_LOG": "1", "SMALL_BYTES": "64",
		"IDLE_H1_CONNS": "10000", "IDLE_UP_CONNS": idleUpConns,
		"ORIGIN_PORT": "18000", "ORIGIN_H2C_PORT": "18107", "ORIGIN_IDLEUP_PORT": "18110", "GRPC_PORT": "18086", "OTLP_PORT": "18105",
		"EBB_PORT": "18080", "EBB_ADMIN_PORT": "18089", "EBB_TLS_PORT": "18092", "EBB_GRPC_PORT": "18087",
		"BASE_PORT": "18090", "BASE_ADMIN_PORT": "18091", "EBB_LOG_PORT": "18097", "EBB_LOG_ADMIN_PORT": "18098",
		"EBB_TRACE100_PORT": "18101", "EBB_TRACE100_ADMIN_PORT": "18102", "EBB_TRACE1_PORT": "18103", "EBB_TRACE1_ADMIN_PORT": "18104",
		"NGINX_PORT": "18081", "NGINX_H2C_PORT": "18084", "NGINX_TLS_PORT": "18093", "NGINX_GRPC_PORT": "18095", "NGINX_H2UP_PORT": "18108",
		"HAPROXY_PORT": "18082", "HAPROXY_H2C_PORT": "18085", "HAPROXY_TLS_PORT": "18094", "HAPROXY_GRPC_PORT": "18096", "HAPROXY_H2UP_PORT": "18109",
	}
	for k, v := range vars {
		t.Setenv(k, v)
	}
}

// TestEbbConfigsLoad has ebb's own loader read every configuration the
// harness writes for ebb: a key the template gets wrong fails here, not
// at the start of a run.
func TestEbbConfigsLoad(t *testing.T) {
	dir := t.TempDir()
	setRunEnv(t, dir, "h1, h2c, idle, idle-h1, idle-up, grpc, h2up", "1000")
	if err := writeConfigs(); err != nil {
		t.Fatal(err)
	}
	for path := range ebbConfs() {
		if _, err := config.Load(path, config.Options{}); err != nil {
			t.Errorf("%s: %v", filepath.Base(path), err)
		}
	}
}

// TestIdleUpConfigs checks what the idle-up part starts each proxy with:
// room for IDLE_UP_CONNS connections to bench/idle-h2's origin, all kept
// idle far longer than the part takes.
func TestIdleUpConfigs(t *testing.T) {
	dir := t.TempDir()
	setRunEnv(t, dir, "idle-up", "2000")
	if err := writeConfigs(); err != nil {
		t.Fatal(err)
	}
	read := func(elem ...string) string {
		b, err := os.ReadFile(filepath.Join(append([]string{dir}, elem...)...))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	wantEbb := `admin: { address: 127.0.0.1:18089 }
listeners:
  - name: bench
    address: 127.0.0.1:18080
    routes:
      - match: { path_prefix: "/" }
        cluster: origin
clusters:
  - name: origin
    protocol: h2c
    discovery: { static: ["127.0.0.1:18110"] }
    max_conns_per_endpoint: 2000
    timeouts: { idle: 300s }
telemetry:
  log: { level: warn }
  access_log: { enabled: false }
`
	if got := read("ebb", "ebb-idleup.yaml"); got != wantEbb {
		t.Errorf("ebb-idleup.yaml:\n%s\nwant:\n%s", got, wantEbb)
	}
	if got := read("base", "ebb-idleup.yaml"); !strings.Contains(got, "127.0.0.1:18090") || !strings.Contains(got, "max_conns_per_endpoint: 2000") {
		t.Errorf("base's ebb-idleup.yaml:\n%s", got)
	}
	// nginx: every connection kept, worker_connections above them all
	// (the default 4096 holds 2000 and the client's).
	nginx := read("nginx", "nginx-idleup.conf")
	for _, want := range []string{"worker_connections 4096;", "server 127.0.0.1:18110;", "keepalive 2000;", "keepalive_timeout 300s;",
		"listen 127.0.0.1:18108 http2;", "grpc_pass grpc://origin_idle;"} {
		if !strings.Contains(nginx, want) {
			t.Errorf("nginx-idleup.conf has no %q:\n%s", want, nginx)
		}
	}
	// HAProxy: maxconn three times the connections, the pool purged
	// every 300 s only.
	haproxy := read("haproxy", "haproxy-idleup.cfg")
	for _, want := range []string{"    maxconn 6000\n", "bind 127.0.0.1:18109 proto h2", "http-reuse always",
		"server origin 127.0.0.1:18110 proto h2 pool-purge-delay 300s"} {
		if !strings.Contains(haproxy, want) {
			t.Errorf("haproxy-idleup.cfg has no %q:\n%s", want, haproxy)
		}
	}
}
