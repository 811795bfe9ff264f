// Package config holds ebb's configuration schema, loads it from a YAML file,
// the environment and flags (in that order, later wins), and validates it.
//
// The schema is split in two by how a change takes effect: Static settings
// (listener addresses, admin, drain, telemetry) need a restart; Dynamic
// settings (routes and clusters) can be swapped into a running proxy.
// Every key is snake_case so that EBB_DRAIN__MIN_DURATION maps to
// drain.min_duration. Defaults live in the Default* functions and are
// documented, with every key, in examples/ebb.yaml.
package config

import (
	"time"
)

// Config is the whole configuration as loaded from one file plus overrides.
type Config struct {
	Admin     Admin      `key:"admin"`
	Listeners []Listener `key:"listeners"`
	Clusters  []Cluster  `key:"clusters"`
	Drain     Drain      `key:"drain"`
	Telemetry Telemetry  `key:"telemetry"`
	Reload    Reload     `key:"reload"`
	Takeover  Takeover   `key:"takeover"`

	// Source names where the configuration came from (the file path), for
	// messages. It is not a key of the file.
	Source string `key:"-"`
	// Ignored lists the EBB_ environment variables that are not
	// configuration keys and were left alone (Kubernetes service links
	// are not listed), for a warning: one may be a misspelt key.
	Ignored []Problem `key:"-"`
}

// Reload says how the configuration file is reloaded besides SIGHUP,
// POST /reload and ebb reload.
type Reload struct {
	// Watch reloads the file when its content changes on disk (edits,
	// atomic renames, Kubernetes ConfigMap symlink swaps). On by default:
	// a file caught half-written fails validation and changes nothing,
	// and a ConfigMap update then needs no signal.
	Watch bool `key:"watch"`
}

// Takeover is the hitless restart: how a new ebb process on the same host
// takes over the listening sockets of the running one (ebb run -takeover,
// or SIGUSR2), so that no connection is refused while the old one drains.
type Takeover struct {
	// Socket is the path of the Unix socket on which the running ebb hands
	// its listening sockets to a successor started with -takeover. Empty
	// (the default): no takeover. It must be a filesystem path (not an
	// abstract socket) in a directory only ebb's user can write, such as
	// /run/ebb/takeover.sock: whoever connects gets the sockets and drains
	// the running ebb (ebb also checks that the peer runs as its own user
	// or root).
	Socket string `key:"socket"`
}

// Admin is the admin HTTP server (/live, /ready, /metrics, /config).
type Admin struct {
	// Address is host:port; loopback by default because the admin server
	// can drain and stop ebb.
	Address string `key:"address"`
	// ProbeAddress, when set, is a second host:port that serves /live and
	// /ready only, read-only and unauthenticated, so that the full admin
	// can stay on loopback while probes (a kubelet's, on the pod IP)
	// reach readiness: for example 0.0.0.0:9902.
	ProbeAddress string `key:"probe_address"`
	// Hosts are names the admin server answers to in the Host header,
	// besides IP addresses, localhost and the host of Address (a Service
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

// Listener is one downstream port.
type Listener struct {
	Name     string            `key:"name"`
	Address  string            `key:"address"`
	Role     string            `key:"role"`
	TLS      *TLS              `key:"tls"`
	Limits   Limits            `key:"limits"`
	HTTP2    ListenerHTTP2     `key:"http2"`
	Timeouts ListenerTimeouts  `key:"timeouts"`
	Routes   []Route           `key:"routes"`
	Headers  ForwardingHeaders `key:"headers"`
	Paths    Paths             `key:"paths"`
}

// TLS names the certificate and key files of a listener. The files are
// PEM; the certificate file may hold the chain after the leaf. Both are
// watched and reloaded when they change on disk (a Kubernetes secret
// rotation), without dropping connections.
type TLS struct {
	Cert string `key:"cert"`
	Key  string `key:"key"`
}

// UpstreamTLS says how ebb verifies a cluster's endpoints over TLS
// (protocols h2 and auto).
type UpstreamTLS struct {
	// CAFile is a PEM bundle of the authorities to trust; the system's
	// when empty.
	CAFile string `key:"ca_file"`
	// ServerName is sent as SNI and checked against the certificate; by
	// default the endpoint's host.
	ServerName string `key:"server_name"`
	// InsecureSkipVerify accepts any certificate. For tests only.
	InsecureSkipVerify bool `key:"insecure_skip_verify"`
}

// Limits bound what a client may send.
type Limits struct {
	// MaxHeaderBytes bounds the request line plus headers; more is a 431.
	MaxHeaderBytes Size `key:"max_header_bytes"`
	// MaxBodyBytes bounds a request body; more is a 413. 0 means unlimited
	// (bodies are streamed, never held whole in memory).
	MaxBodyBytes Size `key:"max_body_bytes"`
	// MinBodyRate is the rate, in bytes per second, a request body must
	// keep up while ebb waits for it before the upstream answers; a
	// body that falls behind by more than timeouts.header is cut with
	// 408 (0: only a silence of timeouts.header is). Both engines.
	MinBodyRate Size `key:"min_body_rate"`
	// MaxConnections caps the listener's open connections (0: no cap). At
	// the cap ebb accepts nothing until one closes: new connections wait
	// in the kernel's accept queue.
	MaxConnections int `key:"max_connections"`
	// MaxInFlight caps the requests the listener serves at once, over all
	// its connections and streams (0: no cap); more get 503 with
	// Retry-After.
	MaxInFlight int `key:"max_in_flight"`
}

// ListenerHTTP2 holds what a listener's HTTP/2 connections are granted.
type ListenerHTTP2 struct {
	// MaxConcurrentStreams is advertised and enforced per connection;
	// more streams are refused (REFUSED_STREAM, which clients retry).
	MaxConcurrentStreams int `key:"max_concurrent_streams"`
	// StreamWindow is the flow-control window for one request body: what
	// ebb holds at most per stream when the upstream is slower than the
	// client.
	StreamWindow Size `key:"stream_window"`
	// ConnectionWindow is the flow-control window for all request bodies of
	// one connection.
	ConnectionWindow Size `key:"connection_window"`
}

// ListenerTimeouts bound how long a client may take.
type ListenerTimeouts struct {
	// Header is the time a client has to send a request's headers, from its
	// first byte (or, on a new connection, from the accept).
	Header time.Duration `key:"header"`
	// Idle is how long a keep-alive connection may wait for its next request.
	Idle time.Duration `key:"idle"`
	// Write is the longest one write to the client may block (a client
	// that stops reading); the connection is then closed.
	Write time.Duration `key:"write"`
}

// ForwardingHeaders says how X-Forwarded-* headers are treated.
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
	// Forwarded are dropped). trust_forwarded: true trusts every peer.
	TrustedProxies []string `key:"trusted_proxies"`
	// Via, if set, is the name ebb adds to the Via field of requests
	// going upstream and of responses going to the client (RFC 9110
	// §7.6.3), after the protocol version it received the message with:
	// "Via: 1.1 ebb", "Via: 2 ebb". A token, or host:port. Off by default:
	// Via tells the world which proxy it goes through.
	Via string `key:"via"`
	// RequestID says what becomes of X-Request-Id: "trusted" keeps the
	// id a trusted proxy sent and gives every other request a new one (a
	// random UUID); "any" keeps any client's; "off" leaves the field as
	// it comes. An id is kept only if it is one line of 1 to 128 visible
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
// none). Applied live on reload.
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
	// (%2F, %5C, either case): "keep" leaves them (they are no
	// separators to the routes), "reject" refuses the request, "decode"
	// makes them "/" and "\" (then, with normalize, "/").
	EscapedSlashes string `key:"escaped_slashes"`
}

// The values of paths.escaped_slashes.
const (
	EscapedSlashesKeep   = "keep"
	EscapedSlashesReject = "reject"
	EscapedSlashesDecode = "decode"
)

// Route sends matching requests to a cluster. Routes are tried in order and
// the first match wins.
type Route struct {
	Match   Match  `key:"match"`
	Cluster string `key:"cluster"`
}

// Match is what a request must have for a route to apply. Empty fields match
// anything.
type Match struct {
	// Host is compared case-insensitively with the request's Host, without
	// port. A leading "*." matches any subdomain.
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
	Name                string          `key:"name"`
	Protocol            string          `key:"protocol"`
	Balancer            string          `key:"balancer"`
	Discovery           Discovery       `key:"discovery"`
	Timeouts            ClusterTimeouts `key:"timeouts"`
	MaxConnsPerEndpoint int             `key:"max_conns_per_endpoint"`
	// MaxInFlight caps the requests sent to the cluster at once, from
	// every listener (0: no cap); more get 503 with Retry-After, so that
	// a slow cluster cannot take every request ebb can hold.
	MaxInFlight int `key:"max_in_flight"`
	// TLS applies to protocols h2 and auto, which speak TLS upstream.
	TLS UpstreamTLS `key:"tls"`
	// Retries says when a failed request is sent to another endpoint.
	Retries Retries `key:"retries"`
}

// Retries bounds sending a request again. A request the upstream did not
// receive (a failed connect, a full connection pool, an HTTP/2 stream
// refused) is retried whatever its method; one whose connection or
// stream ended before a response header, only when its method is
// idempotent or (to an HTTP/1 upstream) the upstream's TCP stack
// acknowledged none of it. Its body must have been buffered, or not read
// at all. A partial response or a timeout is never retried.
type Retries struct {
	// Attempts is the most tries a request gets, the first included; 1
	// turns retries off.
	Attempts int `key:"attempts"`
	// Budget is the fraction of the cluster's recent requests that may be
	// retries (plus a floor of a few per window), so that a failing
	// upstream is not stormed.
	Budget float64 `key:"budget"`
	// BufferBody is the largest request body (by its Content-Length) read
	// whole before the request is sent, so that it can be sent again; 0
	// streams every body. Larger bodies, and those of unknown length,
	// stream and are retried only when nothing of them was read.
	BufferBody Size `key:"buffer_body"`
}

// Discovery names exactly one source of a cluster's endpoints.
type Discovery struct {
	Static     []string       `key:"static"`
	File       string         `key:"file"`
	DNS        *DNSSource     `key:"dns"`
	Kubernetes *KubernetesSrc `key:"kubernetes"`
	// OnEmpty says what an empty set from a source that has listed
	// endpoints before does: OnEmptyKeep or OnEmptyApply.
	OnEmpty string `key:"on_empty"`
}

// Discovery.OnEmpty values.
const (
	// OnEmptyKeep keeps the last set: an empty answer is more often a
	// source's accident (a file truncated, a selector mistyped) than a
	// wish to serve nothing.
	OnEmptyKeep = "keep"
	// OnEmptyApply applies it: requests get 503.
	OnEmptyApply = "apply"
)

// DNSSource resolves a name to endpoints: A/AAAA records with Port, SRV
// records (hosts and ports) without.
type DNSSource struct {
	Name    string        `key:"name"`
	Port    int           `key:"port"`
	Refresh time.Duration `key:"refresh"`
	// Server is the DNS server to ask (host:port); the system's when empty.
	Server string `key:"server"`
}

// KubernetesSrc watches the EndpointSlices of a Service.
type KubernetesSrc struct {
	Namespace  string `key:"namespace"`
	Service    string `key:"service"`
	Port       string `key:"port"`
	Kubeconfig string `key:"kubeconfig"`
}

// ClusterTimeouts bound upstream work.
type ClusterTimeouts struct {
	// Connect bounds establishing a TCP connection to an endpoint.
	Connect time.Duration `key:"connect"`
	// Response bounds the wait for the response headers, then each read of
	// the response body, and each write of the request.
	Response time.Duration `key:"response"`
	// Idle is how long a pooled upstream connection is kept unused. Keep it
	// below the upstream's own keep-alive timeout.
	Idle time.Duration `key:"idle"`
}

// Accept-until settings of the drain.
const (
	AcceptUntilExit        = "exit"
	AcceptUntilAfterDelay  = "after_delay"
	AcceptUntilImmediately = "immediately"
)

// Drain configures the shutdown timeline described in DRAIN.md.
type Drain struct {
	Delay  time.Duration `key:"delay"`
	Spread time.Duration `key:"spread"`
	// MinDuration is nil when unset; it then defaults to Delay + Spread.
	MinDuration *time.Duration `key:"min_duration"`
	Quiet       time.Duration  `key:"quiet"`
	Timeout     time.Duration  `key:"timeout"`
	AcceptUntil string         `key:"accept_until"`
	HTTP1       DrainHTTP1     `key:"http1"`
	HTTP2       DrainHTTP2     `key:"http2"`
	WebSocket   DrainWebSocket `key:"websocket"`
	// EventStreams says which text/event-stream responses the drain ends
	// after a complete event: EventStreamsResumable, EventStreamsAll or
	// EventStreamsOff.
	EventStreams string   `key:"event_streams"`
	Signals      []string `key:"signals"`
	App          App      `key:"app"`
	// Report, if set, is the file the drain's timeline is written to at
	// exit: JSON when it ends in .json, else the HTML page.
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
	IdleClose IdleClose `key:"idle_close"`
}

// DrainHTTP2 holds the HTTP/2 specifics of the drain.
type DrainHTTP2 struct {
	GoawayGrace time.Duration `key:"goaway_grace"`
}

// DrainWebSocket holds the WebSocket specifics of the drain.
type DrainWebSocket struct {
	// Close is when a tunnelled WebSocket is told to go away (a close
	// frame with status 1001): WebSocketAtSignal or WebSocketAtDeadline.
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

// App names the application whose exit ends ebb's drain.
type App struct {
	TCP      string        `key:"tcp"`
	HTTP     string        `key:"http"`
	PID      int           `key:"pid"`
	PIDFile  string        `key:"pid_file"`
	Interval time.Duration `key:"interval"`
}

// Telemetry configures logs, traces and metrics.
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
// failing those from OTLP's defaults.
type Tracing struct {
	Enabled bool `key:"enabled"`
	// Protocol is grpc or http/protobuf.
	Protocol string `key:"protocol"`
	// Endpoint is the collector's URL: http://host:4317 (gRPC), or
	// https://host:4318/v1/traces (HTTP; without a path, /v1/traces);
	// http:// is without TLS, and cannot have TLS set.
	Endpoint string `key:"endpoint"`
	// Headers are sent with every export (an API key, say).
	Headers map[string]string `key:"headers" secret:"true"`
	// TLS configures the connection to an https:// endpoint.
	TLS TracingTLS `key:"tls"`
	// Timeout bounds each export (0: OTEL_EXPORTER_OTLP_TRACES_TIMEOUT
	// or OTEL_EXPORTER_OTLP_TIMEOUT, else the exporter's 10s).
	Timeout time.Duration `key:"timeout"`
	// SamplingRatio is the share of traces sampled that start at ebb
	// (0 to 1); a request that comes with a sampled or unsampled parent
	// follows its parent's choice.
	SamplingRatio float64 `key:"sampling_ratio"`
	// ServiceName is the service.name of ebb's spans (empty:
	// OTEL_SERVICE_NAME, else ebb).
	ServiceName string `key:"service_name"`
	// ResourceAttributes are added to the resource of ebb's spans.
	ResourceAttributes map[string]string `key:"resource_attributes"`
}

// TracingTLS is the TLS client configuration of the OTLP exporter.
type TracingTLS struct {
	// CAFile holds the PEM certificates the collector's is checked
	// against (empty: the system's).
	CAFile string `key:"ca_file"`
	// CertFile and KeyFile are a client certificate, for mutual TLS.
	CertFile string `key:"cert_file"`
	KeyFile  string `key:"key_file"`
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
	Format string `key:"format"` // json | text
	Level  string `key:"level"`  // debug | info | warn | error
}

// AccessLog configures the access log: one line per request, written
// when its response has been relayed.
type AccessLog struct {
	// Enabled writes it; applied live on reload, as Format is.
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
	Prometheus bool `key:"prometheus"`
}
