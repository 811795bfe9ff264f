package peers

import (
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from what the templates render")

// shapes are the configurations the callers write, in small: bench's
// origin and proxies (every part's servers: the h2up part's h2c origin
// and HTTP/2 upstreams among them; the idle-up part's, which keep
// many idle HTTP/2 upstream connections), the e2e WAF, the
// rolling-restart example's peers.
var shapes = map[string]interface{ Render() ([]byte, error) }{
	"nginx-origin.conf": Nginx{
		Dir: "/w/origin", TempDir: "/w/origin/tmp", ErrorLog: "/w/origin/error.log", ErrorLevel: "warn",
		WorkerConnections: 4096, KeepaliveTimeout: 120 * time.Second, KeepaliveRequests: 1000000, Sendfile: true,
		Servers: []Server{{Listen: "127.0.0.1:18000", DefaultType: "application/octet-stream", Locations: []Location{
			{Match: "= /", Return: "xxxx"},
			{Match: "= /64k", Root: "/w/origin/html"},
			{Match: "= /slow", BodyThenGet: "http://127.0.0.1:18000/"},
		}}, {Listen: "127.0.0.1:18107", Proto: H2C, DefaultType: "application/octet-stream", Locations: []Location{
			{Match: "= /", Return: "xxxx"},
			{Match: "= /64k", Root: "/w/origin/html"},
		}}},
	},
	"nginx-proxy.conf": Nginx{
		Dir: "/w/nginx", TempDir: "/w/nginx/tmp", ErrorLog: "/w/nginx/error.log", ErrorLevel: "warn",
		WorkerConnections: 4096, KeepaliveTimeout: 120 * time.Second, KeepaliveRequests: 1000000,
		Upstreams: []Upstream{
			{Name: "origin", Servers: []string{"127.0.0.1:18000"}, Keepalive: 256, KeepaliveRequests: 1000000, KeepaliveTimeout: time.Minute},
			{Name: "grpc_origin", Servers: []string{"127.0.0.1:18086"}, Keepalive: 64, KeepaliveRequests: 1000000},
			{Name: "origin_h2c", Servers: []string{"127.0.0.1:18107"}, Keepalive: 256, KeepaliveRequests: 1000000, KeepaliveTimeout: time.Minute},
		},
		Servers: []Server{
			{Listen: "127.0.0.1:18081", Locations: []Location{{Match: "/", Pass: "origin", Stream: true}}},
			{Listen: "127.0.0.1:18084", Proto: H2C, Locations: []Location{{Match: "/", Pass: "origin", Stream: true}}},
			{Listen: "127.0.0.1:18095", Proto: H2C, Locations: []Location{{Match: "/", Pass: "grpc_origin", GRPC: true}}},
			{Listen: "127.0.0.1:18093", Proto: TLS, Cert: "/w/tls/cert.pem", Key: "/w/tls/key.pem",
				Locations: []Location{{Match: "/", Pass: "origin", Stream: true}}},
			{Listen: "127.0.0.1:18108", Proto: H2C, Locations: []Location{{Match: "/", Pass: "origin_h2c", GRPC: true}}},
		},
	},
	"nginx-idleup.conf": Nginx{
		Dir: "/w/nginx", TempDir: "/w/nginx/tmp", ErrorLog: "/w/nginx/error.log", ErrorLevel: "warn",
		WorkerConnections: 4096, KeepaliveTimeout: 120 * time.Second, KeepaliveRequests: 1000000,
		Upstreams: []Upstream{{Name: "origin_idle", Servers: []string{"127.0.0.1:18110"},
			Keepalive: 1000, KeepaliveRequests: 1000000, KeepaliveTimeout: 5 * time.Minute}},
		Servers: []Server{{Listen: "127.0.0.1:18108", Proto: H2C,
			Locations: []Location{{Match: "/", Pass: "origin_idle", GRPC: true}}}},
	},
	"nginx-waf.conf": Nginx{
		Dir: "/t", TempDir: "/t", ErrorLog: "/t/error.log", ErrorLevel: "notice", User: "root", WorkerConnections: 1024,
		KeepaliveTimeout: time.Minute, KeepaliveRequests: 1000000, BodyBuffer: 64 << 10,
		Upstreams: []Upstream{{Name: "replicas", Servers: []string{"127.0.0.1:1", "127.0.0.1:2"}, Keepalive: 16, KeepaliveRequests: 1000000}},
		Servers:   []Server{{Listen: "127.0.0.1:3", Locations: []Location{{Match: "/", Pass: "replicas"}}}},
	},
	"nginx-websockets.conf": Nginx{
		Dir: "/p", TempDir: "/p", ErrorLog: "stderr", ErrorLevel: "notice", WorkerConnections: 1024,
		WorkerShutdownTimeout: 3 * time.Second,
		Upstreams:             []Upstream{{Name: "origins", Servers: []string{"127.0.0.1:1"}, Keepalive: 32}},
		Servers: []Server{
			{Listen: "127.0.0.1:2", Locations: []Location{{Match: "/", Pass: "origins", WebSocket: true}}},
			{Listen: "127.0.0.1:3", Proto: H2C, Locations: []Location{{Match: "/", Pass: "origins", WebSocket: true}}},
		},
	},
	"haproxy-proxy.cfg": HAProxy{
		Threads: 1, GlobalMaxConn: 11024, MaxConn: 11024, NoStrictLimits: true, KeepAlive: true, ReuseAlways: true,
		Timeouts: Timeouts{Connect: 2 * time.Second, Client: time.Minute, Server: 30 * time.Second,
			HTTPRequest: 10 * time.Second, HTTPKeepAlive: 2 * time.Minute},
		Frontends: []Frontend{
			{Name: "bench", Binds: []Bind{{Addr: "127.0.0.1:18082"}}, Backend: "origin"},
			{Name: "bench_grpc", Binds: []Bind{{Addr: "127.0.0.1:18096", Proto: H2C}}, Backend: "grpc_origin"},
			{Name: "bench_h2tls", Binds: []Bind{{Addr: "127.0.0.1:18094", Proto: TLS, Cert: "/w/tls/haproxy.pem"}}, Backend: "origin"},
			{Name: "bench_h2up", Binds: []Bind{{Addr: "127.0.0.1:18109", Proto: H2C}}, Backend: "origin_h2c"},
		},
		Backends: []Backend{
			{Name: "origin", Servers: []BackendServer{{Name: "origin", Addr: "127.0.0.1:18000"}}},
			{Name: "grpc_origin", Servers: []BackendServer{{Name: "grpc", Addr: "127.0.0.1:18086", H2: true}}},
			{Name: "origin_h2c", Servers: []BackendServer{{Name: "origin", Addr: "127.0.0.1:18107", H2: true}}},
		},
	},
	"haproxy-idleup.cfg": HAProxy{
		Threads: 1, GlobalMaxConn: 4096, MaxConn: 4096, KeepAlive: true, ReuseAlways: true,
		Timeouts: Timeouts{Connect: 2 * time.Second, Client: time.Minute, Server: 30 * time.Second,
			HTTPRequest: 10 * time.Second, HTTPKeepAlive: 2 * time.Minute},
		Frontends: []Frontend{{Name: "bench_idleup", Binds: []Bind{{Addr: "127.0.0.1:18109", Proto: H2C}}, Backend: "origin_idle"}},
		Backends: []Backend{{Name: "origin_idle",
			Servers: []BackendServer{{Name: "origin", Addr: "127.0.0.1:18110", H2: true, PoolPurgeDelay: 5 * time.Minute}}}},
	},
	"haproxy-replica.cfg": HAProxy{
		GlobalMaxConn: 4096, HardStopAfter: 3500 * time.Millisecond, ReuseAlways: true,
		Timeouts:  Timeouts{Connect: 2 * time.Second, Client: 30 * time.Second, Server: 30 * time.Second, HTTPKeepAlive: 30 * time.Second},
		Frontends: []Frontend{{Name: "fe", Binds: []Bind{{Addr: "127.0.0.1:1"}, {Addr: "127.0.0.1:2", Proto: H2C}}, Backend: "origins"}},
		Backends: []Backend{{Name: "origins", Balance: "roundrobin",
			Servers: []BackendServer{{Name: "o0", Addr: "127.0.0.1:3"}, {Name: "o1", Addr: "127.0.0.1:4"}}}},
	},
}

// TestRender checks each shape's text against testdata/NAME.golden: a
// change to a template shows in the diff of what every caller gets.
func TestRender(t *testing.T) {
	for name, conf := range shapes {
		got, err := conf.Render()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		golden := filepath.Join("testdata", name+".golden")
		if *update {
			if err := os.WriteFile(golden, got, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(golden)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Errorf("%s renders\n%s\nwant (%s)\n%s", name, got, golden, want)
		}
	}
}

// TestPeersAccept has nginx and HAProxy check the syntax of each shape
// (nginx -t, haproxy -c), where they are installed. The TLS listeners'
// files do not exist here, so those shapes are checked without them.
func TestPeersAccept(t *testing.T) {
	if testing.Short() {
		t.Skip("needs nginx and haproxy")
	}
	for name, conf := range shapes {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			var args []string
			switch c := conf.(type) {
			case Nginx:
				c.Dir, c.TempDir, c.User = dir, dir, ""
				if c.ErrorLog != "stderr" {
					c.ErrorLog = filepath.Join(dir, "error.log")
				}
				c.Servers = forCheck(c.Servers, dir)
				conf = c
				args = []string{"nginx", "-t", "-p", dir, "-e", filepath.Join(dir, "error.log"), "-c", filepath.Join(dir, "conf")}
			case HAProxy:
				var fronts []Frontend
				for _, f := range c.Frontends {
					if f.Binds[0].Proto != TLS {
						fronts = append(fronts, f)
					}
				}
				c.Frontends = fronts
				conf = c
				args = []string{"haproxy", "-c", "-f", filepath.Join(dir, "conf")}
			}
			bin, err := exec.LookPath(args[0])
			if err != nil {
				if bin, err = exec.LookPath("/usr/sbin/" + args[0]); err != nil {
					t.Fatalf("%s is not installed", args[0])
				}
			}
			text, err := conf.Render()
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "conf"), text, 0o644); err != nil {
				t.Fatal(err)
			}
			if out, err := exec.Command(bin, args[1:]...).CombinedOutput(); err != nil {
				t.Errorf("%s rejects\n%s\n%v: %s", args[0], text, err, out)
			}
		})
	}
}

// forCheck returns a copy of servers without the TLS ones, static files
// served from dir.
func forCheck(servers []Server, dir string) []Server {
	var out []Server
	for _, s := range servers {
		if s.Proto == TLS {
			continue
		}
		s.Locations = slices.Clone(s.Locations)
		for i := range s.Locations {
			if s.Locations[i].Root != "" {
				s.Locations[i].Root = dir
			}
		}
		out = append(out, s)
	}
	return out
}
