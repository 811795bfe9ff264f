package main

import (
	"bytes"
	"embed"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/template"
	"time"

	"github.com/ebb-proxy/ebb/bench/peers"
)

//go:embed ebb.yaml.tmpl
var ebbFiles embed.FS

var ebbTemplate = template.Must(template.ParseFS(ebbFiles, "ebb.yaml.tmpl"))

// ebbConf is one ebb configuration of the run (ebb.yaml.tmpl): listeners
// routing everything to one static cluster.
type ebbConf struct {
	Admin     string // admin server's address
	Listeners []ebbListener
	Cluster   string // its name
	Protocol  string // to the upstream; empty: HTTP/1.1, the default
	Upstream  string // host:port
	// AccessLog is nil for a configuration that says nothing of it (the
	// grpc one, a base from before telemetry.access_log existed).
	AccessLog *accessLog
	Tracing   *tracing
	// Pool, if set, sizes the cluster's pool (the idle-up part's).
	Pool *pool
}

// Render returns the configuration's text.
func (c ebbConf) Render() ([]byte, error) {
	var b bytes.Buffer
	if err := ebbTemplate.Execute(&b, c); err != nil {
		return nil, fmt.Errorf("rendering ebb.yaml.tmpl: %w", err)
	}
	return b.Bytes(), nil
}

type ebbListener struct {
	Name, Addr string
	Cert, Key  string // TLS, if set
}

type accessLog struct {
	Path string // JSON lines to this file; empty: off
}

// tracing exports spans over OTLP/gRPC, sampling Ratio of the traces.
type tracing struct {
	Endpoint, Ratio string
}

// pool is a cluster's max_conns_per_endpoint and timeouts.idle (a
// duration as ebb reads it, "300s").
type pool struct {
	MaxConns int
	Idle     string
}

// idleUpHold is how long each proxy of the idle-up part keeps an idle
// upstream connection: far longer than the part needs between the
// answers and the reading of the proxy's memory (a second, and the
// origin's count), so that none is closed for idleness before.
const idleUpHold = 300 * time.Second

// writeConfigs writes every configuration run.sh may start a process
// with: the origin's, ebb's (each kind's and the base's), nginx's and
// HAProxy's (and their copies sized for idle-h1, and those of idle-up).
func writeConfigs() error {
	type renderer interface{ Render() ([]byte, error) }
	// The idle-h1 part holds more connections than the others allow:
	// nginx and HAProxy get a copy of their configuration sized for them
	// (used only there: nginx allocates its worker_connections up front,
	// which would inflate its peak RSS in the other parts).
	wide := envInt("IDLE_H1_CONNS") + 1024
	confs := map[string]renderer{
		work("origin", "nginx.conf"):          originNginx(),
		work("nginx", "nginx.conf"):           proxyNginx(4096),
		work("nginx", "nginx-wide.conf"):      proxyNginx(wide),
		work("haproxy", "haproxy.cfg"):        proxyHAProxy(4096, false),
		work("haproxy", "haproxy-wide.cfg"):   proxyHAProxy(wide, true),
		work("nginx", "nginx-idleup.conf"):    idleUpNginx(),
		work("haproxy", "haproxy-idleup.cfg"): idleUpHAProxy(),
	}
	for path, c := range ebbConfs() {
		confs[path] = c
	}
	for path, c := range confs {
		b, err := c.Render()
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// originNginx is the origin: one worker, keep-alive without a request
// cap (it never closes the proxies' pooled connections), no access log,
// a SMALL_BYTES body on /, a 64 KiB static file on /64k, and /slow for the
// slowloris part's POSTs: an application reads the whole body before it
// answers, where "return" would answer at once. For the h2up part a second
// listener serves / and /64k over h2c (prior knowledge).
func originNginx() peers.Nginx {
	dir := work("origin")
	origin := loopback("ORIGIN_PORT")
	bodies := []peers.Location{
		{Match: "= /", Return: strings.Repeat("x", envInt("SMALL_BYTES"))},
		{Match: "= /64k", Root: filepath.Join(dir, "html")},
	}
	servers := []peers.Server{{
		Listen:      origin,
		DefaultType: "application/octet-stream",
		Locations:   append(bodies, peers.Location{Match: "= /slow", BodyThenGet: "http://" + origin + "/"}),
	}}
	if parts()["h2up"] {
		// The h2up part's upstream: the same bodies over h2c.
		servers = append(servers, peers.Server{Listen: loopback("ORIGIN_H2C_PORT"), Proto: peers.H2C,
			DefaultType: "application/octet-stream", Locations: bodies})
	}
	return peers.Nginx{
		Dir: dir, TempDir: filepath.Join(dir, "tmp"),
		ErrorLog: filepath.Join(dir, "error.log"), ErrorLevel: "warn",
		WorkerConnections: 4096,
		KeepaliveTimeout:  120 * time.Second, KeepaliveRequests: 1000000,
		Sendfile: true,
		Servers:  servers,
	}
}

// proxyNginx is nginx as a reverse proxy with room for conns connections:
// one worker, pooled keep-alive upstream connections (more idle ones kept
// than the most in flight, 8 x 16 for h2c), no access log.
// keepalive_requests is raised on both sides so that nginx, like ebb and
// HAProxy, never closes a busy connection after 1000 requests (it also
// caps requests per HTTP/2 connection). Responses that overflow the proxy
// buffers (64 KiB) are streamed, not spooled to disk. The h2c, gRPC,
// TLS and h2up servers are there only when their parts run. nginx's only
// HTTP/2 upstream is grpc_pass: meant for gRPC, it passes any request
// (and answer) over HTTP/2, one stream per upstream connection, so the
// h2up pool keeps as many idle connections as the h2c one.
func proxyNginx(conns int) peers.Nginx {
	dir := work("nginx")
	pass := []peers.Location{{Match: "/", Pass: "origin", Stream: true}}
	servers := []peers.Server{{Listen: loopback("NGINX_PORT"), Locations: pass}}
	upstreams := []peers.Upstream{
		{Name: "origin", Servers: []string{loopback("ORIGIN_PORT")},
			Keepalive: 256, KeepaliveRequests: 1000000, KeepaliveTimeout: 60 * time.Second},
		{Name: "grpc_origin", Servers: []string{loopback("GRPC_PORT")},
			Keepalive: 64, KeepaliveRequests: 1000000},
	}
	run := parts()
	if run["h2c"] || run["idle"] || run["openloop"] {
		servers = append(servers, peers.Server{Listen: loopback("NGINX_H2C_PORT"), Proto: peers.H2C, Locations: pass})
	}
	if run["grpc"] {
		servers = append(servers, peers.Server{Listen: loopback("NGINX_GRPC_PORT"), Proto: peers.H2C,
			Locations: []peers.Location{{Match: "/", Pass: "grpc_origin", GRPC: true}}})
	}
	if run["h2tls"] {
		servers = append(servers, peers.Server{Listen: loopback("NGINX_TLS_PORT"), Proto: peers.TLS,
			Cert: work("tls", "cert.pem"), Key: work("tls", "key.pem"), Locations: pass})
	}
	if run["h2up"] {
		upstreams = append(upstreams, peers.Upstream{Name: "origin_h2c", Servers: []string{loopback("ORIGIN_H2C_PORT")},
			Keepalive: 256, KeepaliveRequests: 1000000, KeepaliveTimeout: 60 * time.Second})
		servers = append(servers, peers.Server{Listen: loopback("NGINX_H2UP_PORT"), Proto: peers.H2C,
			Locations: []peers.Location{{Match: "/", Pass: "origin_h2c", GRPC: true}}})
	}
	return peers.Nginx{
		Dir: dir, TempDir: filepath.Join(dir, "tmp"),
		ErrorLog: filepath.Join(dir, "error.log"), ErrorLevel: "warn",
		WorkerConnections: conns,
		KeepaliveTimeout:  120 * time.Second, KeepaliveRequests: 1000000,
		Upstreams: upstreams,
		Servers:   servers,
	}
}

// proxyHAProxy is HAProxy as a reverse proxy with room for conns
// connections: one thread, HTTP mode, server connections reused across
// requests, no logging; for h2up, h2c to the origin's h2c listener. The
// wide copy, for idle-h1, also says "no
// strict-limits": idle client connections hold no server connection, so
// one descriptor each is enough where HAProxy would want two.
func proxyHAProxy(conns int, wide bool) peers.HAProxy {
	origin := "origin"
	fronts := []peers.Frontend{{Name: "bench", Binds: []peers.Bind{{Addr: loopback("HAPROXY_PORT")}}, Backend: origin}}
	backs := []peers.Backend{{Name: origin, Servers: []peers.BackendServer{{Name: "origin", Addr: loopback("ORIGIN_PORT")}}}}
	run := parts()
	if run["h2c"] || run["idle"] || run["openloop"] {
		fronts = append(fronts, peers.Frontend{Name: "bench_h2c",
			Binds: []peers.Bind{{Addr: loopback("HAPROXY_H2C_PORT"), Proto: peers.H2C}}, Backend: origin})
	}
	if run["grpc"] {
		fronts = append(fronts, peers.Frontend{Name: "bench_grpc",
			Binds: []peers.Bind{{Addr: loopback("HAPROXY_GRPC_PORT"), Proto: peers.H2C}}, Backend: "grpc_origin"})
		backs = append(backs, peers.Backend{Name: "grpc_origin",
			Servers: []peers.BackendServer{{Name: "grpc", Addr: loopback("GRPC_PORT"), H2: true}}})
	}
	if run["h2tls"] {
		fronts = append(fronts, peers.Frontend{Name: "bench_h2tls",
			Binds: []peers.Bind{{Addr: loopback("HAPROXY_TLS_PORT"), Proto: peers.TLS, Cert: work("tls", "haproxy.pem")}}, Backend: origin})
	}
	if run["h2up"] {
		fronts = append(fronts, peers.Frontend{Name: "bench_h2up",
			Binds: []peers.Bind{{Addr: loopback("HAPROXY_H2UP_PORT"), Proto: peers.H2C}}, Backend: "origin_h2c"})
		backs = append(backs, peers.Backend{Name: "origin_h2c",
			Servers: []peers.BackendServer{{Name: "origin", Addr: loopback("ORIGIN_H2C_PORT"), H2: true}}})
	}
	return peers.HAProxy{
		Threads: 1, GlobalMaxConn: conns, MaxConn: conns, NoStrictLimits: wide,
		KeepAlive: true, ReuseAlways: true,
		Timeouts: peers.Timeouts{Connect: 2 * time.Second, Client: 60 * time.Second, Server: 30 * time.Second,
			HTTPRequest: 10 * time.Second, HTTPKeepAlive: 120 * time.Second},
		Frontends: fronts,
		Backends:  backs,
	}
}

// idleUpNginx is nginx for the idle-up part, and nothing else: an h2c
// listener (on the h2up part's port) passing everything with grpc_pass,
// one stream per upstream connection, to bench/idle-h2's origin; room for
// IDLE_UP_CONNS upstream connections and the client's, all of them kept
// idle (keepalive) for idleUpHold.
func idleUpNginx() peers.Nginx {
	dir := work("nginx")
	n := envInt("IDLE_UP_CONNS")
	return peers.Nginx{
		Dir: dir, TempDir: filepath.Join(dir, "tmp"),
		ErrorLog: filepath.Join(dir, "error.log"), ErrorLevel: "warn",
		WorkerConnections: max(4096, n+1024),
		KeepaliveTimeout:  120 * time.Second, KeepaliveRequests: 1000000,
		Upstreams: []peers.Upstream{{Name: "origin_idle", Servers: []string{loopback("ORIGIN_IDLEUP_PORT")},
			Keepalive: n, KeepaliveRequests: 1000000, KeepaliveTimeout: idleUpHold}},
		Servers: []peers.Server{{Listen: loopback("NGINX_H2UP_PORT"), Proto: peers.H2C,
			Locations: []peers.Location{{Match: "/", Pass: "origin_idle", GRPC: true}}}},
	}
}

// idleUpHAProxy is HAProxy for the idle-up part, and nothing else: an h2c
// frontend (on the h2up part's port) to bench/idle-h2's origin over h2c,
// server connections shared (http-reuse always) and purged every
// idleUpHold only. HAProxy stops putting connections in the idle pool
// once a fifth of its file descriptors are in use
// (tune.pool-low-fd-ratio) and takes about two per maxconn: maxconn is
// sized so that IDLE_UP_CONNS are well under that.
func idleUpHAProxy() peers.HAProxy {
	conns := max(4096, 3*envInt("IDLE_UP_CONNS"))
	return peers.HAProxy{
		Threads: 1, GlobalMaxConn: conns, MaxConn: conns,
		KeepAlive: true, ReuseAlways: true,
		Timeouts: peers.Timeouts{Connect: 2 * time.Second, Client: 60 * time.Second, Server: 30 * time.Second,
			HTTPRequest: 10 * time.Second, HTTPKeepAlive: 120 * time.Second},
		Frontends: []peers.Frontend{{Name: "bench_idleup",
			Binds: []peers.Bind{{Addr: loopback("HAPROXY_H2UP_PORT"), Proto: peers.H2C}}, Backend: "origin_idle"}},
		Backends: []peers.Backend{{Name: "origin_idle", Servers: []peers.BackendServer{{Name: "origin",
			Addr: loopback("ORIGIN_IDLEUP_PORT"), H2: true, PoolPurgeDelay: idleUpHold}}}},
	}
}

// ebbConfs returns ebb's configurations by path. One listener serves
// HTTP/1.1 and h2c (sniffed); the cluster speaks HTTP/1.1 to the origin.
// No access log, as nginx and HAProxy have none here: ebb-log measures
// one; ebb-trace100 and ebb-trace1 measure tracing (every trace starts at
// ebb: wrk and h2load send no traceparent; the batch span processor's
// defaults hold, dropping what its queue has no room for, as in
// production), each exporting to a bench/otlp-sink of its own. The base
// build gets the plain configuration on its own ports. For h2up, ebb and
// the base serve the same listener with a cluster of protocol h2c to the
// origin's h2c listener (ebb-h2up.yaml); for idle-up, to bench/idle-h2's
// origin, with room for IDLE_UP_CONNS connections kept idle for
// idleUpHold (ebb-idleup.yaml).
func ebbConfs() map[string]ebbConf {
	origin := loopback("ORIGIN_PORT")
	plain := func(admin, listen string) ebbConf {
		return ebbConf{Admin: loopback(admin), Listeners: []ebbListener{{Name: "bench", Addr: loopback(listen)}},
			Cluster: "origin", Upstream: origin, AccessLog: &accessLog{}}
	}
	ebb := plain("EBB_ADMIN_PORT", "EBB_PORT")
	if parts()["h2tls"] {
		// A second listener with TLS (not in the others: they run no TLS
		// variant).
		ebb.Listeners = append([]ebbListener{{Name: "bench-tls", Addr: loopback("EBB_TLS_PORT"),
			Cert: work("tls", "cert.pem"), Key: work("tls", "key.pem")}}, ebb.Listeners...)
	}
	base := plain("BASE_ADMIN_PORT", "BASE_PORT")
	if env("BASE_ACCESS_LOG") != "1" {
		base.AccessLog = nil
	}
	h2up := func(c ebbConf) ebbConf {
		c.Protocol, c.Upstream = "h2c", loopback("ORIGIN_H2C_PORT")
		return c
	}
	idleUp := func(c ebbConf) ebbConf {
		c.Protocol, c.Upstream = "h2c", loopback("ORIGIN_IDLEUP_PORT")
		c.Pool = &pool{MaxConns: envInt("IDLE_UP_CONNS"), Idle: strconv.Itoa(int(idleUpHold.Seconds())) + "s"}
		return c
	}
	log := plain("EBB_LOG_ADMIN_PORT", "EBB_LOG_PORT")
	log.AccessLog = &accessLog{Path: work("ebb-log", "access.log")}
	trace100 := plain("EBB_TRACE100_ADMIN_PORT", "EBB_TRACE100_PORT")
	trace100.Tracing = &tracing{Endpoint: "http://" + loopback("OTLP_PORT"), Ratio: "1"}
	trace1 := plain("EBB_TRACE1_ADMIN_PORT", "EBB_TRACE1_PORT")
	trace1.Tracing = &tracing{Endpoint: "http://127.0.0.1:" + strconv.Itoa(envInt("OTLP_PORT")+1), Ratio: "0.01"}
	return map[string]ebbConf{
		work("ebb", "ebb.yaml"): ebb,
		// The grpc part: ebb in front of the gRPC server over h2c.
		work("ebb", "ebb-grpc.yaml"): {Admin: loopback("EBB_ADMIN_PORT"),
			Listeners: []ebbListener{{Name: "grpc", Addr: loopback("EBB_GRPC_PORT")}},
			Cluster:   "grpc", Protocol: "h2c", Upstream: loopback("GRPC_PORT")},
		work("ebb", "ebb-h2up.yaml"):     h2up(plain("EBB_ADMIN_PORT", "EBB_PORT")),
		work("base", "ebb.yaml"):         base,
		work("ebb", "ebb-idleup.yaml"):   idleUp(plain("EBB_ADMIN_PORT", "EBB_PORT")),
		work("base", "ebb-h2up.yaml"):    h2up(base),
		work("base", "ebb-idleup.yaml"):  idleUp(base),
		work("ebb-log", "ebb.yaml"):      log,
		work("ebb-trace100", "ebb.yaml"): trace100,
		work("ebb-trace1", "ebb.yaml"):   trace1,
	}
}
