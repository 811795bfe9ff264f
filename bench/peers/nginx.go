package peers

import "time"

// Nginx describes an nginx that runs in the foreground (daemon off), one
// worker under its master, with no access log.
type Nginx struct {
	// Dir holds the pid file; TempDir the temporary files (request bodies,
	// proxied responses).
	Dir, TempDir string
	// ErrorLog is a path or "stderr"; ErrorLevel its level (warn, notice).
	ErrorLog, ErrorLevel string
	// User, if set, is the workers' user (root, when the master runs as
	// root and the workers must read a directory only root may enter).
	User              string
	WorkerConnections int
	// WorkerShutdownTimeout bounds a graceful stop (SIGQUIT); 0: unbounded.
	WorkerShutdownTimeout time.Duration

	// Client side: keep-alive (0: nginx's defaults, 75 s and 1000
	// requests, the latter also a cap on requests per HTTP/2 connection),
	// bodies kept in memory up to BodyBuffer bytes (0: nginx's 16 KiB), and
	// sendfile for static files.
	KeepaliveTimeout  time.Duration
	KeepaliveRequests int
	BodyBuffer        int
	Sendfile          bool

	Upstreams []Upstream
	Servers   []Server
}

// Upstream is an upstream group and its pool of idle connections.
type Upstream struct {
	Name    string
	Servers []string // host:port
	// Keepalive is how many idle connections the worker keeps (0: none:
	// a connection per request); KeepaliveRequests and KeepaliveTimeout
	// bound each (0: nginx's defaults, 1000 requests and 60 s).
	Keepalive         int
	KeepaliveRequests int
	KeepaliveTimeout  time.Duration
}

// Server is a server block: one listener and what it serves.
type Server struct {
	Listen string // host:port
	Proto  Proto  // H1, H2C or TLS (Cert and Key then)
	// Cert and Key are the TLS listener's certificate and key files.
	Cert, Key string
	// DefaultType is the Content-Type of static files (no mime.types is
	// loaded); empty: nginx's text/plain.
	DefaultType string
	Locations   []Location
}

// Location is a location block. It does one thing: passes the request to
// an upstream group (Pass), answers it (Return, Root), or reads its body
// and then answers with a GET of another URL (BodyThenGet).
type Location struct {
	Match string // "/", "= /64k"

	// Pass names the upstream group requests go to, over HTTP/1.1 with
	// keep-alive (proxy_pass), or over HTTP/2 when GRPC (grpc_pass: made
	// for gRPC, it carries plain requests as well).
	Pass string
	GRPC bool
	// WebSocket passes Upgrade and Connection on (a map of $http_upgrade),
	// where a plain pass clears Connection so that the upstream connection
	// stays pooled.
	WebSocket bool
	// Stream has responses that overflow the proxy buffers streamed to
	// the client instead of spooled to a temporary file.
	Stream bool

	// Return answers 200 with this body.
	Return string
	// Root serves static files from this directory.
	Root string
	// BodyThenGet is a URL: the request body is read whole (nginx buffers
	// it before proxying), then the answer is that of a GET of the URL
	// without the body, as an application that reads a body first would.
	BodyThenGet string
}

// WebSockets reports whether a location passes WebSockets on (the http
// block then maps $http_upgrade to $connection_upgrade).
func (n Nginx) WebSockets() bool {
	for _, s := range n.Servers {
		for _, l := range s.Locations {
			if l.WebSocket {
				return true
			}
		}
	}
	return false
}

// Render returns n's configuration file.
func (n Nginx) Render() ([]byte, error) { return render("nginx.conf.tmpl", n) }
