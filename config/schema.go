package config

import (
	"time"
)

// Config is the whole configuration as loaded from one file plus overrides.
type Config struct {
	Admin Admin `key:"admin"`
	// Listeners are the ports ebb serves clients on, each with its own
	// routes.
	Listeners []Listener `key:"listeners"`
	// Clusters are the sets of endpoints routes send requests to.
	Clusters  []Cluster `key:"clusters"`
	Drain     Drain     `key:"drain"`
	Telemetry Telemetry `key:"telemetry"`
	Reload    Reload    `key:"reload"`
	Takeover  Takeover  `key:"takeover"`

	// Source names where the configuration came from (the file path), for
	// messages. It is not a key of the file.
	Source string `key:"-"`
	// Ignored lists the EBB_ environment variables that are not
	// configuration keys and were left alone (Kubernetes service links
	// are not listed), for a warning: one may be a misspelt key.
	Ignored []Problem `key:"-"`
}

// Reload says how the configuration file is reloaded besides SIGHUP,
// POST /reload and ebb reload (docs/RELOAD.md).
type Reload struct {
	// Watch reloads the file when its content changes on disk (edits,
	// atomic renames, Kubernetes ConfigMap symlink swaps). On by default:
	// a file caught half-written fails validation and changes nothing,
	// and a ConfigMap update then needs no signal. Routes and clusters
	// change live; the rest is reported as needing a restart.
	Watch bool `key:"watch"`
}

// Takeover is the hitless restart: how a new ebb process on the same host
// takes over the listening sockets of the running one (ebb run -takeover,
// or SIGUSR2), so that no connection is refused while the old one drains
// (docs/RESTART.md).
type Takeover struct {
	// Socket is the path of the Unix socket on which the running ebb hands
	// its listening sockets to a successor started with -takeover. Empty
	// (the default): no takeover. It must be a filesystem path (not an
	// abstract socket) in a directory only ebb's user can write, such as
	// /run/ebb/takeover.sock: whoever connects gets the sockets and drains
	// the running ebb (ebb also checks that the peer runs as its own user
	// or root). A change needs a restart.
	Socket string `key:"socket"`
}

// Admin is the admin HTTP server (/live, /ready, /metrics, /config,
// the drain's triggers and timeline: docs/OBSERVABILITY.md).
type Admin struct {
	// Address is host:port; loopback by default because the admin server
	// reveals the configuration and can drain and stop ebb. A port of its
	// own, not one a listener uses.
	Address string `key:"address"`
	// ProbeAddress, when set, is a second host:port that serves /live and
	// /ready only, read-only and unauthenticated, so that the full admin
	// can stay on loopback while probes (a kubelet's, on the pod IP)
	// reach readiness: for example 0.0.0.0:9902.
	ProbeAddress string `key:"probe_address"`
	// Hosts are names the admin server answers to in the Host header,
	// besides IP addresses, localhost and the host of address (a Service
	// name, for example). Requests naming any other host get 403: a web
	// page whose DNS name was rebound to the admin's address cannot read
	// or change it through a browser.
	Hosts []string `key:"hosts"`
	// Pprof serves Go's profiles under /debug/pprof/. Off by default:
	// a heap profile shows what is in memory, and a CPU profile or trace
	// costs CPU while it runs.
	Pprof bool `key:"pprof"`
	// TokenFile names a file holding the admin token (at least 16
	// characters; surrounding white space is ignored). When set, every
	// POST (drain, reload, shutdown), /config, /endpoints and
	// /debug/pprof/ need "Authorization: Bearer TOKEN"; ebb drain and ebb
	// reload send it. /live, /ready and /metrics stay open.
	TokenFile string `key:"token_file"`
}

// Listener roles.
const (
	RoleInbound  = "inbound"  // drained when the drain is triggered
	RoleOutbound = "outbound" // the local app's egress: kept until the app is gone
)

// Listener is one downstream port. Every listener serves HTTP/1.1 and
// HTTP/2 on it: in cleartext, a connection opening with the HTTP/2
// preface is h2c (prior knowledge); with tls, ALPN offers h2 and http/1.1.
type Listener struct {
	// Name is the listener's unique name, used in metrics and logs.
	Name string `key:"name"`
	// Address is host:port (0.0.0.0:8080 for every interface; :0 picks a
	// free port).
	Address string `key:"address"`
	// Role is inbound (drained when the drain is triggered) or outbound
	// (the local application's egress in a sidecar: never drained, kept
	// until the application is gone).
	Role string `key:"role"`
	// TLS makes the listener serve TLS; without it, cleartext.
	TLS      *TLS              `key:"tls"`
	Limits   Limits            `key:"limits"`
	HTTP2    ListenerHTTP2     `key:"http2"`
	Timeouts ListenerTimeouts  `key:"timeouts"`
	Routes   []Route           `key:"routes"`
	Headers  ForwardingHeaders `key:"headers"`
	Paths    Paths             `key:"paths"`
}

// TLS names the certificate and key files of a listener: TLS 1.2 or
// later, ALPN h2 and http/1.1. The files are PEM; the certificate file
// may hold the chain after the leaf. Both are watched and reloaded when
// they change on disk (a Kubernetes secret rotation), without dropping
// connections; a pair that does not load keeps the previous one serving.
// Relative paths are relative to the configuration file's directory.
type TLS struct {
	// Cert is the PEM certificate (chain) file.
	Cert string `key:"cert"`
	// Key is the PEM private key file.
	Key string `key:"key"`
}

// UpstreamTLS says how ebb verifies a cluster's endpoints over TLS
// (protocols h2 and auto).
type UpstreamTLS struct {
	// CAFile is a PEM bundle of the authorities to trust; the system's
	// when empty. A relative path is relative to the configuration
	// file's directory.
	CAFile string `key:"ca_file"`
	// ServerName is sent as SNI and checked against the certificate; by
	// default the endpoint's host.
	ServerName string `key:"server_name"`
	// InsecureSkipVerify accepts any certificate. For tests only.
	InsecureSkipVerify bool `key:"insecure_skip_verify"`
}

// Limits bound what a client may send.
type Limits struct {
	// MaxHeaderBytes bounds the request line plus headers, from 1KiB to
	// 1MiB; more is a 431 (414 when the request line alone is longer).
	// Each connection holds a read buffer of this size while it is
	// served. Needs a restart to change.
	MaxHeaderBytes Size `key:"max_header_bytes"`
	// MaxBodyBytes bounds a request body; more is a 413, at once when
	// Content-Length says so, or as soon as a chunked body passes it. 0
	// means unlimited (bodies are streamed, never held whole in memory).
	// Applied live on reload.
	MaxBodyBytes Size `key:"max_body_bytes"`
	// MinBodyRate is the rate, in bytes per second, a request body must
	// keep up, on average, while ebb waits for it before the upstream
	// answers. A body may fall behind by timeouts.header (and send
	// nothing for that long); past that it is cut with 408 and its
	// upstream request ends, so that a client trickling a body cannot
	// hold an upstream connection. Only the time ebb waits for the client
	// counts, not a slow upstream's; once the response has begun (a
	// bidirectional stream), the upstream decides. gRPC requests to
	// HTTP/2 clusters are held to silence only: their messages may
	// rightly be sparse. A 2G link manages 5KiB a second. 0: only a
	// silence of timeouts.header is bounded. On HTTP/1 the first 8KiB of
	// a body with a Content-Length are read with the headers, within
	// timeouts.header. Both engines.
	MinBodyRate Size `key:"min_body_rate"`
	// MaxConnections caps the listener's open connections (0: no cap, the
	// open-files limit is the only one). At the cap ebb accepts nothing
	// until one closes: new clients wait in the kernel's accept queue
	// (then retransmit their SYN), as with HAProxy's maxconn, rather than
	// being accepted only to be turned away; a warning is logged (at most
	// every 10s). An idle keep-alive connection holds its place until
	// timeouts.idle, and costs about a read buffer (max_header_bytes).
	MaxConnections int `key:"max_connections"`
	// MaxInFlight caps the requests the listener serves at once, over all
	// its connections and HTTP/2 streams (a gRPC stream counts for as
	// long as it lasts; 0: no cap); more get 503 with Retry-After: 1 at
	// once, without reaching an upstream. Applied live on reload.
	MaxInFlight int `key:"max_in_flight"`
}

// ListenerHTTP2 holds what a listener's HTTP/2 connections are granted.
// Needs a restart to change.
type ListenerHTTP2 struct {
	// MaxConcurrentStreams is advertised and enforced per connection,
	// from 1 to 10000; more streams are refused (REFUSED_STREAM, which
	// clients retry).
	MaxConcurrentStreams int `key:"max_concurrent_streams"`
	// StreamWindow is the flow-control window for one request body, from
	// 64KiB to 2GiB-1. A stream's window is credited back only as the
	// upstream takes the body, so this is what ebb holds at most per
	// stream when the upstream is slower than the client. Larger windows
	// speed up uploads over long links.
	StreamWindow Size `key:"stream_window"`
	// ConnectionWindow is the flow-control window for all request bodies of
	// one connection, from 64KiB to 2GiB-1 and at least stream_window.
	ConnectionWindow Size `key:"connection_window"`
}

// ListenerTimeouts bound how long a client may take. Each connection's
// timeouts (header, idle) fall later than set by a random skew under a
// twentieth of header (500ms at 10s), never earlier: connections opened
// together, as an attack's are, are then not all cut in the same instant,
// which stalled other clients (bench/README.md, slowloris). Needs a
// restart to change.
type ListenerTimeouts struct {
	// Header is the time a client has to send a request's headers (an
	// HTTP/2 header block split in frames too), from its first byte (or,
	// on a new connection, from the accept); then 408. Also, until the
	// upstream answers, the longest stall between two reads of a request
	// body (or how far it may fall behind limits.min_body_rate). Once the
	// response has begun, the rest of the body is the upstream's to wait
	// for (bidirectional streams idle).
	Header time.Duration `key:"header"`
	// Idle is how long a keep-alive connection may wait for its next
	// request. Longer than clients' own idle timeouts (Go: 90s, most load
	// balancers 60s), so that the client, not ebb, closes an idle
	// connection: a server closing one races with a request the client
	// is sending.
	Idle time.Duration `key:"idle"`
	// Write is the longest one write to the client may block (a client
	// that stops reading; at least half of this, at most all of it); the
	// connection is then closed, and its upstream freed. On HTTP/2 also
	// the longest a response may wait for the client to open its
	// flow-control window; the stream is then reset (CANCEL).
	Write time.Duration `key:"write"`
}

// ForwardingHeaders says how X-Forwarded-* headers are treated
// (docs/REQUESTS.md, headers). Applied live on reload.
type ForwardingHeaders struct {
	// TrustForwarded trusts every peer's forwarding headers, as if
	// trusted_proxies listed every address (behind a proxy such as a WAF
	// that is the only way in); prefer trusted_proxies.
	TrustForwarded bool `key:"trust_forwarded"`
	// TrustedProxies are the peers (IP addresses or CIDR prefixes) whose
	// forwarding headers ebb builds on: from them, X-Forwarded-For is
	// appended to and X-Forwarded-Proto, X-Forwarded-Host, Forwarded and
	// X-Real-IP are kept. From any other peer (the default: none is
	// trusted, right for an edge) X-Forwarded-For is replaced by the
	// peer's address and the others by what ebb knows (X-Real-IP and
	// Forwarded are dropped). Trust nobody at the edge; behind a WAF or a
	// load balancer, list its addresses (["10.0.0.0/8"], or ["127.0.0.1"]
	// for a WAF on the same host). trust_forwarded: true trusts every
	// peer.
	TrustedProxies []string `key:"trusted_proxies"`
	// Via, if set, is the name ebb adds to the Via field of requests
	// going upstream and of responses going to the client (RFC 9110
	// §7.6.3), after the protocol version it received the message with:
	// "Via: 1.1 ebb", "Via: 2 ebb", appended to what is there. A token,
	// or host:port. It lets an origin or a client see the path (and loops
	// be found); off by default: Via tells the world which proxy it goes
	// through.
	Via string `key:"via"`
	// RequestID says what becomes of X-Request-Id: trusted keeps the
	// id a trusted proxy sent and gives every other request a new one (a
	// random UUID); any keeps any client's; off leaves the field as it
	// comes. An id is kept only if it is one line of 1 to 128 visible
	// ASCII characters without '"' or '\'. The id goes upstream and into
	// the access log.
	RequestID string `key:"request_id"`
}

// The values of headers.request_id.
const (
	RequestIDTrusted = "trusted"
	RequestIDAny     = "any"
	RequestIDOff     = "off"
)

// Paths says whether ebb rewrites a request's path before routing it,
// and then sends the rewritten path upstream (with the query as sent), so
// that the routes and the origin see one path: a route on /admin is then
// not skipped by /public/../admin, which the origin reads as /admin. The
// steps run in this order, Envoy's: escaped_slashes, normalize,
// merge_slashes. A path ebb refuses gets 400 before routing. The access
// log keeps the path as the client sent it.
//
// All off by default: an origin may give "..", "//" or %2F a meaning of
// its own (a key in an object store, an encoded name), and rewriting what
// a client sent changes what it asked for. Turn them on when the routes
// decide who may reach what (a path prefix sent to another cluster, or to
// none): with /admin routed elsewhere (or nowhere), a path prefix
// /public would otherwise take /public/../admin, which the origin reads
// as /admin (docs/INTEGRITY.md, paths). Applied live on reload.
type Paths struct {
	// Normalize decodes the percent-encoded unreserved characters
	// (letters, digits, "-._~": %2e%2e is ".."), upper-cases the hex
	// digits of the other percent-encodings, reads a backslash as a
	// slash (as Envoy and browsers do), and removes the dot segments
	// (RFC 3986 §5.2.4; ".." never climbs above the root). An invalid
	// percent-encoding (%zz) is refused.
	Normalize bool `key:"normalize"`
	// MergeSlashes makes one slash of each run of them ("/a//b" is
	// "/a/b").
	MergeSlashes bool `key:"merge_slashes"`
	// EscapedSlashes is what becomes of an encoded slash or backslash
	// (%2F, %5C, either case): keep leaves them (they are no separators
	// to the routes), reject refuses the request (400), decode makes them
	// "/" and "\" (then, with normalize, "/").
	EscapedSlashes string `key:"escaped_slashes"`
}

// The values of paths.escaped_slashes.
const (
	EscapedSlashesKeep   = "keep"
	EscapedSlashesReject = "reject"
	EscapedSlashesDecode = "decode"
)
