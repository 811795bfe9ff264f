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

// Route sends matching requests to a cluster. Routes are tried in order and
// the first match wins; a request no route matches gets 404.
type Route struct {
	Match Match `key:"match"`
	// Cluster names the cluster the route sends to.
	Cluster string `key:"cluster"`
}

// Match is what a request must have for a route to apply. Empty fields match
// anything: an empty match matches every request.
type Match struct {
	// Host is compared case-insensitively with the request's Host (or
	// :authority), without port: exact (api.example.com), or with a
	// leading "*." any subdomain (*.example.com).
	Host string `key:"host"`
	// PathPrefix is compared with the start of the request path, byte for
	// byte: the path as sent, or as the listener's paths block rewrote it.
	PathPrefix string `key:"path_prefix"`
}

// Upstream protocols.
const (
	ProtocolHTTP1 = "http1"
	ProtocolH2C   = "h2c"
	ProtocolH2    = "h2"
	ProtocolAuto  = "auto"
)

// Balancers.
const (
	BalancerP2C        = "p2c"
	BalancerRoundRobin = "round_robin"
)

// Cluster is a set of interchangeable upstream endpoints.
type Cluster struct {
	// Name is the cluster's unique name, which routes refer to.
	Name string `key:"name"`
	// Protocol is how ebb talks to the endpoints, whatever the client
	// speaks: http1 is HTTP/1.1 in cleartext; h2c HTTP/2 in cleartext, by
	// prior knowledge (gRPC servers without TLS); h2 HTTP/2 over TLS;
	// auto TLS, and HTTP/2 or HTTP/1.1 as ALPN decides.
	Protocol string `key:"protocol"`
	// Balancer picks an endpoint for each request: p2c, the less loaded
	// of two random endpoints; round_robin, each endpoint in turn.
	Balancer  string          `key:"balancer"`
	Discovery Discovery       `key:"discovery"`
	Timeouts  ClusterTimeouts `key:"timeouts"`
	// MaxConnsPerEndpoint caps the connections to each endpoint. When all
	// are busy a request waits up to timeouts.connect for one, then gets
	// 503 (HTTP/2 upstreams multiplex requests on few connections and
	// open more when streams run out).
	MaxConnsPerEndpoint int `key:"max_conns_per_endpoint"`
	// MaxInFlight caps the requests sent to the cluster at once, from
	// every listener, as a circuit breaker (0: no cap); more get 503 with
	// Retry-After: 1 at once, so that a cluster that slows down cannot
	// take every request ebb can hold from the others. A request counts
	// until its response header has been relayed (an HTTP/2 client's,
	// until its response ends).
	MaxInFlight int `key:"max_in_flight"`
	// TLS applies to protocols h2 and auto, which speak TLS upstream; it
	// is an error with the others.
	TLS     UpstreamTLS `key:"tls"`
	Retries Retries     `key:"retries"`
}

// Retries bounds sending a request again. A request the upstream did not
// receive (a failed connect, a full connection pool, an HTTP/2 stream
// refused) is retried whatever its method; one whose connection or
// stream ended before a response header, only when its method is
// idempotent or (to an HTTP/1 upstream) the upstream's TCP stack
// acknowledged none of it. Its body must have been buffered, or not read
// at all. A partial response or a timeout is never retried
// (docs/REQUESTS.md, retries).
type Retries struct {
	// Attempts is the most tries a request gets, the first included, from
	// 1 to 5; 1 turns retries off.
	Attempts int `key:"attempts"`
	// Budget is the fraction of the cluster's requests over the last 10s
	// that may be retries (plus 10), from 0 to 1, so that a failing
	// upstream is not stormed. ebb_upstream_retries_total counts them.
	Budget float64 `key:"budget"`
	// BufferBody is the largest request body (by its Content-Length) read
	// whole before the request is sent, so that it can be sent again,
	// from 0 to 16MiB; 0 streams every body. Larger bodies, and those of
	// unknown length (chunked, most gRPC), stream and are retried only
	// when nothing of them was read.
	BufferBody Size `key:"buffer_body"`
}

// Discovery names exactly one source of a cluster's endpoints: static,
// file, dns or kubernetes.
type Discovery struct {
	// Static is a list of host:port endpoints.
	Static []string `key:"static"`
	// File is a watched YAML or JSON file listing host:port (or {address:
	// host:port}): atomic renames and Kubernetes ConfigMap symlink swaps
	// are followed, and a broken file keeps the last good set. A relative
	// path is relative to the configuration file's directory.
	File       string         `key:"file"`
	DNS        *DNSSource     `key:"dns"`
	Kubernetes *KubernetesSrc `key:"kubernetes"`
	// OnEmpty says what an empty set from a source that has listed
	// endpoints before (a file rewritten as [], a Service scaled to zero
	// or its selector changed) does: keep keeps the last set, apply
	// applies it (requests get 503). Either way it is logged and counted
	// in ebb_discovery_empty_updates_total. For DNS, an empty answer is
	// a failed lookup, which keeps the last set.
	OnEmpty string `key:"on_empty"`
}

// Discovery.OnEmpty values.
const (
	// OnEmptyKeep keeps the last set, the default: an empty answer is
	// more often a source's accident (a file truncated, a selector
	// mistyped) than a wish to serve nothing.
	OnEmptyKeep = "keep"
	// OnEmptyApply applies it: requests get 503.
	OnEmptyApply = "apply"
)

// DNSSource resolves a name to endpoints: A/AAAA records with Port, SRV
// records (hosts and ports) without. A failed lookup keeps the last good
// set.
type DNSSource struct {
	// Name is the name to resolve (without port, an SRV name such as
	// _http._tcp.app.internal).
	Name string `key:"name"`
	// Port is the port of every address of the A/AAAA records; without
	// it, the SRV records give hosts and ports.
	Port int `key:"port"`
	// Refresh is how often the name is resolved again.
	Refresh time.Duration `key:"refresh"`
	// Server is the DNS server to ask (host:port); the system's when empty.
	Server string `key:"server"`
}

// KubernetesSrc watches the EndpointSlices of a Service (a client-go
// informer; in-cluster credentials, or kubeconfig). Ready endpoints take
// requests; terminating ones that still serve take them only while none is
// ready. It needs RBAC list and watch on endpointslices.discovery.k8s.io.
type KubernetesSrc struct {
	// Namespace is the Service's namespace.
	Namespace string `key:"namespace"`
	// Service is the Service's name.
	Service string `key:"service"`
	// Port is the Service port's name or number; optional when the
	// Service has one port.
	Port string `key:"port"`
	// Kubeconfig is a kubeconfig file to use instead of the in-cluster
	// credentials.
	Kubeconfig string `key:"kubeconfig"`
}

// ClusterTimeouts bound upstream work.
type ClusterTimeouts struct {
	// Connect bounds establishing a TCP connection to an endpoint; a
	// failed connect is a 502.
	Connect time.Duration `key:"connect"`
	// Response bounds the wait for the response headers, then (HTTP/1
	// upstreams) each read of the response body, and each write of the
	// request; exceeded, 504 (if nothing was sent to the client yet).
	// With h2c, h2 and auto it bounds the wait for the response headers
	// only: an HTTP/2 stream may rightly idle (a gRPC stream waiting for
	// its next message); a dead connection is found by PINGs instead
	// (sent after 15s without frames, 15s to answer).
	Response time.Duration `key:"response"`
	// Idle is how long a pooled upstream connection is kept unused. Keep it
	// below the upstream's own keep-alive timeout, so that ebb, not the
	// upstream, closes an idle connection (the upstream closing one as a
	// request goes out is the stale-connection race). The default is
	// below the common servers' (Node.js and Apache 5s, nginx 75s, Go's
	// net/http unlimited); gunicorn's 2s needs less.
	Idle time.Duration `key:"idle"`
}

// Accept-until settings of the drain.
const (
	AcceptUntilExit        = "exit"
	AcceptUntilAfterDelay  = "after_delay"
	AcceptUntilImmediately = "immediately"
)

// Drain configures the shutdown timeline docs/DRAIN.md specifies: what
// ebb does between "stop" (a signal, POST /drain, ebb drain, the watched
// application gone) and its exit. The defaults keep the promise for a
// Kubernetes pod with the default 30s grace period. Needs a restart to
// change.
type Drain struct {
	// Delay is the announce window after the trigger: /ready answers 503,
	// all else is unchanged, while the endpoint's removal propagates.
	Delay time.Duration `key:"delay"`
	// Spread is the window, after delay, over which connections get their
	// close signal, each at its own moment.
	Spread time.Duration `key:"spread"`
	// MinDuration is the least time after the trigger before ebb exits
	// drained; at most timeout. Unset (nil), it is delay + spread.
	MinDuration *time.Duration `key:"min_duration"`
	// Quiet is how long no new connection must have come before ebb
	// exits drained.
	Quiet time.Duration `key:"quiet"`
	// Timeout is the deadline, counted from the trigger: what is left is
	// closed and ebb exits with status 3. Longer than delay + spread;
	// keep it under Kubernetes' grace period (30s by default).
	Timeout time.Duration `key:"timeout"`
	// AcceptUntil is when inbound listeners stop accepting: at the exit
	// (exit), at the end of delay (after_delay), or at the trigger
	// (immediately).
	AcceptUntil string         `key:"accept_until"`
	HTTP1       DrainHTTP1     `key:"http1"`
	HTTP2       DrainHTTP2     `key:"http2"`
	WebSocket   DrainWebSocket `key:"websocket"`
	// EventStreams says which text/event-stream responses the drain ends
	// after a complete event: resumable, those that have sent an event
	// with an id field (which a client resumes with Last-Event-ID); all,
	// every one; off, none.
	EventStreams string `key:"event_streams"`
	// Signals are the signals that trigger the drain; a second one closes
	// everything at once.
	Signals []string `key:"signals"`
	App     App      `key:"app"`
	// Report, if set, is the file the drain's timeline is written to at
	// exit, for postmortems: JSON when it ends in .json, else the HTML
	// page of /drain/report. A relative path is relative to the
	// configuration file's directory, and the directory must exist. The
	// file is written whole (a temporary file renamed); a failure is
	// logged and does not change the exit status.
	Report string `key:"report"`
}

// EffectiveMinDuration is MinDuration, or Delay + Spread when unset.
func (d Drain) EffectiveMinDuration() time.Duration {
	if d.MinDuration != nil {
		return *d.MinDuration
	}
	return d.Delay + d.Spread
}

// DrainHTTP1 holds the HTTP/1 specifics of the drain.
type DrainHTTP1 struct {
	// IdleClose is the idle time past its moment before an HTTP/1
	// connection is closed, and before an HTTP/2 connection that has
	// opened no stream gets its GOAWAY; never keeps idle connections until
	// the deadline.
	IdleClose IdleClose `key:"idle_close"`
}

// DrainHTTP2 holds the HTTP/2 specifics of the drain.
type DrainHTTP2 struct {
	// GoawayGrace is the longest wait for the PING's acknowledgement
	// between the two GOAWAYs.
	GoawayGrace time.Duration `key:"goaway_grace"`
}

// DrainWebSocket holds the WebSocket specifics of the drain.
type DrainWebSocket struct {
	// Close is when a tunnelled WebSocket is told to go away (a close
	// frame with status 1001): at_signal, at its connection's moment in
	// the signal phase; at_deadline, as late as the deadline allows,
	// spread over spread ending 2×grace before timeout.
	Close string `key:"close"`
	// Grace bounds each side's answer to the close frame ebb sends it
	// (and the wait for the frame in flight to end before it); at most a
	// quarter of the drain's timeout is used.
	Grace time.Duration `key:"grace"`
}

// DefaultWebSocketGrace is drain.websocket.grace's default.
const DefaultWebSocketGrace = 2 * time.Second

// When the drain closes WebSockets.
const (
	// WebSocketAtSignal: at the connection's moment in the signal phase,
	// spread with the keep-alive closes.
	WebSocketAtSignal = "at_signal"
	// WebSocketAtDeadline: as late as the deadline allows, spread over
	// drain.spread ending 2×grace before drain.timeout.
	WebSocketAtDeadline = "at_deadline"
)

// Which event streams the drain ends.
const (
	// EventStreamsResumable: those that have sent an event with an id
	// field, which a client resumes with Last-Event-ID.
	EventStreamsResumable = "resumable"
	// EventStreamsAll: every text/event-stream response.
	EventStreamsAll = "all"
	// EventStreamsOff: none; they last until they end or the deadline.
	EventStreamsOff = "off"
)

// App names the application whose exit triggers ebb's drain and ends it
// once no request is in flight: at most one of tcp, http, pid and
// pid_file. It must have been seen alive first (an explicit pid
// excepted).
type App struct {
	// TCP is a host:port that stops accepting when the application is
	// gone.
	TCP string `key:"tcp"`
	// HTTP is a URL that stops answering when the application is gone
	// (any HTTP status is an answer).
	HTTP string `key:"http"`
	// PID is the application's process id.
	PID int `key:"pid"`
	// PIDFile is a file holding the application's process id.
	PIDFile string `key:"pid_file"`
	// Interval is how often the application is checked.
	Interval time.Duration `key:"interval"`
}

// Telemetry configures logs, traces and metrics (docs/OBSERVABILITY.md).
type Telemetry struct {
	Log       Log       `key:"log"`
	AccessLog AccessLog `key:"access_log"`
	Tracing   Tracing   `key:"tracing"`
	Metrics   Metrics   `key:"metrics"`
}

// Tracing configures OpenTelemetry traces, exported over OTLP: a server
// span per request and a client span per upstream attempt. What is left
// empty here comes from the standard OTEL_EXPORTER_OTLP_* (and
// OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES) environment variables, and
// failing those from OTLP's defaults (docs/OBSERVABILITY.md, tracing).
// Every change needs a restart.
type Tracing struct {
	// Enabled exports traces; off, the request path makes no tracing call.
	Enabled bool `key:"enabled"`
	// Protocol is grpc or http/protobuf; empty, the environment's
	// (OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, OTEL_EXPORTER_OTLP_PROTOCOL),
	// else grpc. With tracing on, ebb check fails on another value in the
	// environment.
	Protocol string `key:"protocol"`
	// Endpoint is the collector's URL, with a host: http://host:4317
	// (gRPC), or https://host:4318/v1/traces (HTTP; a URL without a path
	// is posted to /v1/traces, one with a path to that path); http:// is
	// without TLS, and cannot have tls set. Empty, the environment's
	// (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, OTEL_EXPORTER_OTLP_ENDPOINT),
	// else localhost:4317 (HTTP: localhost:4318/v1/traces), over TLS.
	Endpoint string `key:"endpoint"`
	// Headers are sent with every export (an API key, say), in place of
	// OTEL_EXPORTER_OTLP_HEADERS; [redacted] in /config.
	Headers map[string]string `key:"headers" secret:"true"`
	// TLS configures the connection to an https:// endpoint; any tls key
	// with an http:// endpoint is an error. Read by ebb check when
	// tracing is on.
	TLS TracingTLS `key:"tls"`
	// Timeout bounds each export, 0 or more (0: OTEL_EXPORTER_OTLP_TRACES_TIMEOUT
	// or OTEL_EXPORTER_OTLP_TIMEOUT, else the exporter's 10s).
	Timeout time.Duration `key:"timeout"`
	// SamplingRatio is the share of traces sampled that start at ebb
	// (0 to 1); a request that comes with a sampled or unsampled parent
	// follows its parent's choice.
	SamplingRatio float64 `key:"sampling_ratio"`
	// ServiceName is the service.name of ebb's spans (empty:
	// OTEL_SERVICE_NAME, else ebb).
	ServiceName string `key:"service_name"`
	// ResourceAttributes are string attributes added to the resource of
	// ebb's spans (over OTEL_RESOURCE_ATTRIBUTES's).
	ResourceAttributes map[string]string `key:"resource_attributes"`
}

// TracingTLS is the TLS client configuration of the OTLP exporter.
type TracingTLS struct {
	// CAFile holds the PEM certificates the collector's is checked
	// against (empty: the system's).
	CAFile string `key:"ca_file"`
	// CertFile is a client certificate, for mutual TLS, with key_file
	// (both or neither).
	CertFile string `key:"cert_file"`
	// KeyFile is the client certificate's private key, with cert_file.
	KeyFile string `key:"key_file"`
	// InsecureSkipVerify accepts any certificate (tests only).
	InsecureSkipVerify bool `key:"insecure_skip_verify"`
}

// The values of telemetry.tracing.protocol.
const (
	TracingGRPC = "grpc"
	TracingHTTP = "http/protobuf"
)

// Log configures the process log (on stderr).
type Log struct {
	// Format is how each line is written.
	Format string `key:"format"`
	// Level is the least severe level logged.
	Level string `key:"level"`
}

// AccessLog configures the access log: one line per request, written
// when its response has been relayed (a WebSocket's when it closes;
// docs/OBSERVABILITY.md, access log).
type AccessLog struct {
	// Enabled writes it; applied live on reload, as Format is. Turn it
	// off when another layer logs every request already.
	Enabled bool `key:"enabled"`
	// Format is json, text (key=value pairs) or combined (the combined
	// log format of Apache and nginx).
	Format string `key:"format"`
	// Path is the file lines are appended to; "" or "-" is standard
	// output. The file is reopened on SIGUSR1 (after logrotate moved
	// it); changing the path needs a restart.
	Path string `key:"path"`
}

// Metrics configures metric export.
type Metrics struct {
	// Prometheus serves the metrics at the admin server's /metrics.
	Prometheus bool `key:"prometheus"`
}
