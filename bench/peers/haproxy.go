package peers

import "time"

// HAProxy describes an HAProxy in HTTP mode, run in the foreground (-db).
type HAProxy struct {
	// Threads is nbthread (0: one per CPU, HAProxy's default).
	Threads int
	// GlobalMaxConn is the process's connection cap (global maxconn),
	// MaxConn each frontend's (defaults maxconn); 0: HAProxy's default.
	GlobalMaxConn, MaxConn int
	// NoStrictLimits lets HAProxy start, with a warning, when it cannot
	// raise its open-files limit to two descriptors per connection it may
	// hold (client and server side).
	NoStrictLimits bool
	// HardStopAfter bounds a soft stop (SIGUSR1); 0: unbounded.
	HardStopAfter time.Duration

	// KeepAlive says "option http-keep-alive" (HAProxy's default mode
	// since 1.7, said for the reader); ReuseAlways shares idle server
	// connections between client connections (http-reuse always).
	KeepAlive, ReuseAlways bool
	Timeouts               Timeouts

	Frontends []Frontend
	Backends  []Backend
}

// Timeouts are the defaults section's timeouts; 0 leaves one out.
type Timeouts struct {
	Connect, Client, Server, HTTPRequest, HTTPKeepAlive time.Duration
}

// Frontend is a frontend: its listeners and the backend it sends to.
type Frontend struct {
	Name    string
	Binds   []Bind
	Backend string
}

// Bind is one listener: H1 (HAProxy takes h2c by its preface there too),
// H2C only, or TLS with ALPN h2 (Cert: certificate and key in one file).
type Bind struct {
	Addr  string
	Proto Proto
	Cert  string
}

// Backend is a backend and its servers.
type Backend struct {
	Name    string
	Balance string // "roundrobin"; empty: HAProxy's default (roundrobin)
	Servers []BackendServer
}

// BackendServer is one server of a backend; H2 speaks h2c to it (gRPC).
type BackendServer struct {
	Name, Addr string
	H2         bool
	// PoolPurgeDelay is how often HAProxy closes half of the server's idle
	// connections (pool-purge-delay); 0: its default, 5 s. How many it
	// keeps idle is not capped (pool-max-conn's default, -1).
	PoolPurgeDelay time.Duration
}

// Render returns h's configuration file.
func (h HAProxy) Render() ([]byte, error) { return render("haproxy.cfg.tmpl", h) }
