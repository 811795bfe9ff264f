// The schema's routes and clusters: where requests go, and how endpoints are found and used.

package config

import "time"

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
	BalancerLeastRequest = "least_request"
	BalancerEWMA         = "ewma"
	BalancerRoundRobin   = "round_robin"
	// BalancerP2C is least_request's former name, still accepted.
	BalancerP2C = "p2c"
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
	// Balancer picks an endpoint for each request: least_request, the
	// one with fewer requests in flight of two picked at random; ewma,
	// the lower of two random endpoints' peak-EWMA latency (to a response
	// head, a failure counting as slow) times their requests in flight
	// plus one, which sends less to a slow endpoint; round_robin, each
	// endpoint in turn. p2c is least_request's former name.
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
	// OutlierDetection takes an endpoint that fails out of the balancer's
	// choice for a while (passive health, docs/REQUESTS.md).
	OutlierDetection OutlierDetection `key:"outlier_detection"`
}

// OutlierDetection is passive health: an endpoint whose requests fail is
// ejected (picked by no balancer) for base_ejection_time, doubled with
// each ejection in a row up to max_ejection_time; a success ends the
// streak. A failed connect ejects at once. Whatever the share, the last
// endpoint that is not ejected never is.
type OutlierDetection struct {
	// Consecutive5xx ejects after that many 5xx answers in a row (501,
	// Not Implemented, excepted); 0 turns it off.
	Consecutive5xx int `key:"consecutive_5xx"`
	// ConsecutiveGatewayErrors ejects after that many gateway errors in a
	// row: connections reset or answers that broke off, timeouts, invalid
	// answers, and 502, 503 and 504; 0 turns it off.
	ConsecutiveGatewayErrors int `key:"consecutive_gateway_errors"`
	// BaseEjectionTime is the first ejection's length.
	BaseEjectionTime time.Duration `key:"base_ejection_time"`
	// MaxEjectionTime bounds an ejection's length.
	MaxEjectionTime time.Duration `key:"max_ejection_time"`
	// MaxEjectedPercent is the largest share of the cluster's endpoints
	// ejected at once, from 0 (no ejection at all) to 100; one may always
	// be, unless it is the last one left.
	MaxEjectedPercent int `key:"max_ejected_percent"`
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
	// upstreams, auto endpoints that speak HTTP/1.1 included) each read
	// of the response body, and each write of the request; exceeded, 504
	// (if nothing was sent to the client yet). Over HTTP/2 (h2c, h2, and
	// auto endpoints that negotiate h2) it bounds the wait for the
	// response headers only: an HTTP/2 stream may rightly idle (a gRPC
	// stream waiting for its next message); a dead connection is found by
	// PINGs instead (sent after 15s without frames, 15s to answer).
	Response time.Duration `key:"response"`
	// Idle is how long a pooled upstream connection is kept unused. Keep it
	// below the upstream's own keep-alive timeout, so that ebb, not the
	// upstream, closes an idle connection (the upstream closing one as a
	// request goes out is the stale-connection race). The default is
	// below the common servers' (Node.js and Apache 5s, nginx 75s, Go's
	// net/http unlimited); gunicorn's 2s needs less.
	Idle time.Duration `key:"idle"`
}
