package config

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Signals that may trigger the drain.
var knownSignals = []string{"SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2"}

// Validate checks the meaning of a decoded configuration and returns every
// problem found, each naming its key. Sources are filled in by Load.
func (c *Config) Validate() []Problem {
	v := &validator{}
	adminOK := v.hostPort("admin.address", c.Admin.Address) && !strings.HasSuffix(c.Admin.Address, ":0")
	probeOK := false
	if c.Admin.ProbeAddress != "" {
		probeOK = v.hostPort("admin.probe_address", c.Admin.ProbeAddress) && !strings.HasSuffix(c.Admin.ProbeAddress, ":0")
		if probeOK && adminOK && addressesOverlap(c.Admin.ProbeAddress, c.Admin.Address) {
			v.add("admin.probe_address", "%s overlaps admin.address %s: the probes need a port of their own", c.Admin.ProbeAddress, c.Admin.Address)
		}
	}
	if c.Admin.TokenFile != "" {
		if _, err := ReadAdminToken(c.Admin.TokenFile); err != nil {
			v.add("admin.token_file", "%v", err)
		}
	}
	for i, h := range c.Admin.Hosts {
		if h == "" || strings.ContainsAny(h, " /:@") {
			v.add(fmt.Sprintf("admin.hosts[%d]", i), "expected a host name without port, such as ebb-admin.default.svc, got %q", h)
		}
	}

	clusters := map[string]bool{}
	for i, cl := range c.Clusters {
		v.cluster(fmt.Sprintf("clusters[%d]", i), cl, clusters)
	}
	if len(c.Listeners) == 0 {
		v.add("listeners", "at least one listener is needed")
	}
	names := map[string]bool{}
	var bound []Listener // listeners with a valid, fixed address
	for i, l := range c.Listeners {
		key := fmt.Sprintf("listeners[%d]", i)
		v.name(key+".name", l.Name, names)
		fixed := v.hostPort(key+".address", l.Address) && !strings.HasSuffix(l.Address, ":0")
		if fixed {
			for _, other := range bound {
				if addressesOverlap(l.Address, other.Address) {
					v.add(key+".address", "%s overlaps %s, the address of listener %q", l.Address, other.Address, other.Name)
					break
				}
			}
			bound = append(bound, l)
		}
		if adminOK && fixed && addressesOverlap(l.Address, c.Admin.Address) {
			v.add("admin.address", "%s overlaps %s, the address of listener %q: the admin server needs a port of its own", c.Admin.Address, l.Address, l.Name)
		}
		if probeOK && fixed && addressesOverlap(l.Address, c.Admin.ProbeAddress) {
			v.add("admin.probe_address", "%s overlaps %s, the address of listener %q: the probes need a port of their own", c.Admin.ProbeAddress, l.Address, l.Name)
		}
		v.oneOf(key+".role", l.Role, RoleInbound, RoleOutbound)
		for j, p := range l.Headers.TrustedProxies {
			if _, err := netip.ParsePrefix(p); err != nil {
				if _, err := netip.ParseAddr(p); err != nil {
					v.add(fmt.Sprintf("%s.headers.trusted_proxies[%d]", key, j), "expected an IP address or CIDR prefix, such as 10.0.0.0/8, got %q", p)
				}
			}
		}
		if l.TLS != nil {
			v.file(key+".tls.cert", l.TLS.Cert, "the PEM certificate (chain) file")
			v.file(key+".tls.key", l.TLS.Key, "the PEM private key file")
		}
		if l.Limits.MaxHeaderBytes < 1<<10 || l.Limits.MaxHeaderBytes > 1<<20 {
			v.add(key+".limits.max_header_bytes", "expected a size between 1KiB and 1MiB, got %s", l.Limits.MaxHeaderBytes)
		}
		if via := l.Headers.Via; via != "" && !validVia(via) {
			v.add(key+".headers.via", "expected a name (a token such as ebb, or host:port), got %q", via)
		}
		v.oneOf(key+".headers.request_id", l.Headers.RequestID, RequestIDTrusted, RequestIDAny, RequestIDOff)
		v.oneOf(key+".paths.escaped_slashes", l.Paths.EscapedSlashes, EscapedSlashesKeep, EscapedSlashesReject, EscapedSlashesDecode)
		if n := l.Limits.MaxConnections; n < 0 {
			v.add(key+".limits.max_connections", "expected 0 (no cap) or more, got %d", n)
		}
		if n := l.Limits.MaxInFlight; n < 0 {
			v.add(key+".limits.max_in_flight", "expected 0 (no cap) or more, got %d", n)
		}
		if n := l.HTTP2.MaxConcurrentStreams; n < 1 || n > 10000 {
			v.add(key+".http2.max_concurrent_streams", "expected a number between 1 and 10000, got %d", n)
		}
		const maxWindow = 1<<31 - 1 // RFC 9113 §6.9.1
		if w := l.HTTP2.StreamWindow; w < 64<<10 || w > maxWindow {
			v.add(key+".http2.stream_window", "expected a size between 64KiB and 2GiB-1, got %s", w)
		}
		if w := l.HTTP2.ConnectionWindow; w < 64<<10 || w > maxWindow {
			v.add(key+".http2.connection_window", "expected a size between 64KiB and 2GiB-1, got %s", w)
		} else if w < l.HTTP2.StreamWindow {
			v.add(key+".http2.connection_window", "expected at least http2.stream_window (%s), got %s", l.HTTP2.StreamWindow, w)
		}
		v.positive(key+".timeouts.header", l.Timeouts.Header)
		v.positive(key+".timeouts.idle", l.Timeouts.Idle)
		v.positive(key+".timeouts.write", l.Timeouts.Write)
		if len(l.Routes) == 0 {
			v.add(key+".routes", "at least one route is needed")
		}
		for j, r := range l.Routes {
			rk := fmt.Sprintf("%s.routes[%d]", key, j)
			switch {
			case r.Cluster == "":
				v.add(rk+".cluster", "missing: name the cluster this route sends to")
			case !clusters[r.Cluster]:
				v.add(rk+".cluster", "no cluster is named %q", r.Cluster)
			}
			if p := r.Match.PathPrefix; p != "" && !strings.HasPrefix(p, "/") {
				v.add(rk+".match.path_prefix", "expected a path starting with /, got %q", p)
			}
			if h := r.Match.Host; strings.ContainsAny(h, " /\t:") || strings.HasSuffix(h, ".") || strings.Contains(strings.TrimPrefix(h, "*."), "*") {
				v.add(rk+".match.host", "expected a host name without port or trailing dot, such as api.example.com or *.example.com, got %q", h)
			}
		}
	}
	v.drain(c.Drain)
	v.takeover(c.Takeover)
	v.oneOf("telemetry.log.format", c.Telemetry.Log.Format, "json", "text")
	v.oneOf("telemetry.log.level", c.Telemetry.Log.Level, "debug", "info", "warn", "error")
	v.oneOf("telemetry.access_log.format", c.Telemetry.AccessLog.Format, "json", "text", "combined")
	v.tracing(c.Telemetry.Tracing)
	return v.problems
}

// tracing checks telemetry.tracing.
func (v *validator) tracing(t Tracing) {
	const key = "telemetry.tracing"
	if t.Protocol != "" {
		v.oneOf(key+".protocol", t.Protocol, TracingGRPC, TracingHTTP)
	}
	if e := t.Endpoint; e != "" {
		u, err := url.Parse(e)
		switch {
		case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
			v.add(key+".endpoint", "expected a URL such as http://127.0.0.1:4317 or https://collector:4318/v1/traces, got %q", e)
		case u.Scheme == "http" && t.TLS != (TracingTLS{}):
			// The exporters disagree on this (HTTP refuses to start,
			// gRPC speaks TLS to an http:// endpoint): neither is what
			// the file says.
			v.add(key+".tls", "set, but %s.endpoint is http:// (no TLS): use an https:// endpoint or remove tls", key)
		}
	}
	if r := t.SamplingRatio; r < 0 || r > 1 {
		v.add(key+".sampling_ratio", "expected a number from 0 to 1, got %v", r)
	}
	if t.Timeout < 0 {
		v.add(key+".timeout", "expected 0s (the environment's, else 10s) or more, got %s", t.Timeout)
	}
	if (t.TLS.CertFile == "") != (t.TLS.KeyFile == "") {
		v.add(key+".tls", "expected cert_file and key_file together, got only one")
	}
	for _, f := range []struct{ key, path, what string }{
		{"ca_file", t.TLS.CAFile, "the PEM certificates of the collector's CA"},
		{"cert_file", t.TLS.CertFile, "the PEM client certificate"},
		{"key_file", t.TLS.KeyFile, "the PEM private key"},
	} {
		if t.Enabled && f.path != "" {
			v.file(key+".tls."+f.key, f.path, f.what)
		}
	}
}

// addressesOverlap reports whether two listening addresses would conflict:
// the same port on the same host, or on a wildcard host (0.0.0.0, ::, or
// empty), which binds every address.
func addressesOverlap(a, b string) bool {
	ha, pa, _ := net.SplitHostPort(a)
	hb, pb, _ := net.SplitHostPort(b)
	if pa != pb {
		return false
	}
	wild := func(h string) bool { return h == "" || h == "0.0.0.0" || h == "::" }
	return ha == hb || wild(ha) || wild(hb)
}

type validator struct {
	problems []Problem
}

func (v *validator) add(key, format string, args ...any) {
	v.problems = append(v.problems, Problem{Key: key, Msg: fmt.Sprintf(format, args...)})
}

func (v *validator) name(key, name string, seen map[string]bool) {
	switch {
	case name == "":
		v.add(key, "missing: every entry needs a unique name")
	case seen[name]:
		v.add(key, "the name %q is used twice", name)
	case strings.ContainsAny(name, " \t\"'"):
		v.add(key, "expected a name without spaces or quotes, got %q", name)
	}
	seen[name] = true
}

// hostPort reports whether s is a usable host:port.
func (v *validator) hostPort(key, s string) bool {
	if s == "" {
		v.add(key, "missing: expected host:port, such as 127.0.0.1:8080")
		return false
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		v.add(key, "expected host:port, such as 127.0.0.1:8080, got %q", s)
		return false
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		v.add(key, "expected a port number from 0 to 65535, got %q", port)
		return false
	}
	if strings.ContainsAny(host, " /") {
		v.add(key, "expected a host name or IP address, got %q", host)
		return false
	}
	return true
}

func (v *validator) oneOf(key, got string, allowed ...string) {
	for _, a := range allowed {
		if got == a {
			return
		}
	}
	v.add(key, "expected one of %s, got %q", strings.Join(allowed, ", "), got)
}

// file checks that a required file is named and readable.
func (v *validator) file(key, path, what string) {
	if path == "" {
		v.add(key, "missing: %s", what)
		return
	}
	f, err := os.Open(path)
	if err != nil {
		v.add(key, "cannot read %s: %v", path, errors.Unwrap(err))
		return
	}
	f.Close()
}

func (v *validator) positive(key string, d time.Duration) {
	if d <= 0 {
		v.add(key, "expected a duration above zero, got %s", d)
	}
}

func (v *validator) cluster(key string, c Cluster, seen map[string]bool) {
	v.name(key+".name", c.Name, seen)
	v.oneOf(key+".protocol", c.Protocol, ProtocolHTTP1, ProtocolH2C, ProtocolH2, ProtocolAuto)
	tlsSet := c.TLS != UpstreamTLS{}
	switch c.Protocol {
	case ProtocolH2, ProtocolAuto:
		if c.TLS.CAFile != "" {
			v.file(key+".tls.ca_file", c.TLS.CAFile, "a PEM bundle of certificate authorities")
		}
	default:
		if tlsSet {
			v.add(key+".tls", "only protocols h2 and auto speak TLS upstream; protocol is %q", c.Protocol)
		}
	}
	v.oneOf(key+".balancer", c.Balancer, BalancerLeastRequest, BalancerEWMA, BalancerRoundRobin, BalancerP2C)
	d := c.Discovery
	n := 0
	for _, set := range []bool{d.Static != nil, d.File != "", d.DNS != nil, d.Kubernetes != nil} {
		if set {
			n++
		}
	}
	switch {
	case n == 0:
		v.add(key+".discovery", "missing: name one source (static, file, dns or kubernetes)")
	case n > 1:
		v.add(key+".discovery", "name exactly one source; found %d", n)
	case d.Static != nil:
		if len(d.Static) == 0 {
			v.add(key+".discovery.static", "expected at least one host:port")
		}
		seen := map[string]bool{}
		for i, ep := range d.Static {
			k := fmt.Sprintf("%s.discovery.static[%d]", key, i)
			if v.hostPort(k, ep) && seen[ep] {
				v.add(k, "%s is listed twice", ep)
			}
			seen[ep] = true
		}
	case d.File != "":
		// The directory is watched; the file itself may appear later.
		if st, err := os.Stat(filepath.Dir(d.File)); err != nil || !st.IsDir() {
			v.add(key+".discovery.file", "the directory of %s does not exist", d.File)
		}
	case d.DNS != nil:
		if d.DNS.Name == "" {
			v.add(key+".discovery.dns.name", "missing: the name to resolve (with port: A/AAAA records; without: SRV records)")
		}
		if d.DNS.Port < 0 || d.DNS.Port > 65535 {
			v.add(key+".discovery.dns.port", "expected a port from 1 to 65535 (or none, for SRV), got %d", d.DNS.Port)
		}
		v.positive(key+".discovery.dns.refresh", d.DNS.Refresh)
		if d.DNS.Server != "" {
			v.hostPort(key+".discovery.dns.server", d.DNS.Server)
		}
	case d.Kubernetes != nil:
		v.kubernetes(key+".discovery.kubernetes", *d.Kubernetes)
	}
	if d.OnEmpty != OnEmptyKeep && d.OnEmpty != OnEmptyApply {
		v.add(key+".discovery.on_empty", "expected keep or apply, got %q", d.OnEmpty)
	}
	v.positive(key+".timeouts.connect", c.Timeouts.Connect)
	v.positive(key+".timeouts.response", c.Timeouts.Response)
	v.positive(key+".timeouts.idle", c.Timeouts.Idle)
	if c.MaxConnsPerEndpoint < 1 {
		v.add(key+".max_conns_per_endpoint", "expected at least 1, got %d", c.MaxConnsPerEndpoint)
	}
	if c.MaxInFlight < 0 {
		v.add(key+".max_in_flight", "expected 0 (no cap) or more, got %d", c.MaxInFlight)
	}
	v.outlierDetection(key+".outlier_detection", &c.OutlierDetection)
	if a := c.Retries.Attempts; a < 1 || a > 5 {
		v.add(key+".retries.attempts", "expected 1 (no retry) to 5, got %d", a)
	}
	if b := c.Retries.Budget; b < 0 || b > 1 {
		v.add(key+".retries.budget", "expected a fraction from 0 to 1, got %g", b)
	}
	if b := c.Retries.BufferBody; b < 0 || b > maxRetryBufferBody {
		v.add(key+".retries.buffer_body", "expected a size from 0 (off) to 16MiB, got %d", b)
	}
}

// outlierDetection checks a cluster's passive health settings.
func (v *validator) outlierDetection(key string, o *OutlierDetection) {
	if o.Consecutive5xx < 0 {
		v.add(key+".consecutive_5xx", "expected a count (0: off), got %d", o.Consecutive5xx)
	}
	if o.ConsecutiveGatewayErrors < 0 {
		v.add(key+".consecutive_gateway_errors", "expected a count (0: off), got %d", o.ConsecutiveGatewayErrors)
	}
	if o.BaseEjectionTime <= 0 {
		v.add(key+".base_ejection_time", "expected a positive duration, got %s", o.BaseEjectionTime)
	} else if o.MaxEjectionTime < o.BaseEjectionTime {
		v.add(key+".max_ejection_time", "expected at least base_ejection_time (%s), got %s", o.BaseEjectionTime, o.MaxEjectionTime)
	}
	if p := o.MaxEjectedPercent; p < 0 || p > 100 {
		v.add(key+".max_ejected_percent", "expected a percentage from 0 to 100, got %d", p)
	}
}

// maxRetryBufferBody bounds retries.buffer_body: each request in flight may
// hold that much memory.
const maxRetryBufferBody = 16 << 20

func (v *validator) kubernetes(key string, k KubernetesSrc) {
	if k.Namespace == "" {
		v.add(key+".namespace", "missing: the namespace of the Service")
	} else if !dnsLabel(k.Namespace) {
		v.add(key+".namespace", "expected a namespace name (lowercase letters, digits and '-', at most 63), got %q", k.Namespace)
	}
	if k.Service == "" {
		v.add(key+".service", "missing: the name of the Service whose EndpointSlices give the endpoints")
	} else if !dnsLabel(k.Service) {
		v.add(key+".service", "expected a Service name (lowercase letters, digits and '-', at most 63), got %q", k.Service)
	}
	// Optional: without it, each slice must have exactly one port.
	if n, err := strconv.Atoi(k.Port); err == nil {
		if n < 1 || n > 65535 {
			v.add(key+".port", "expected a port number from 1 to 65535 or a port name, got %d", n)
		}
	} else if k.Port != "" && !dnsLabel(k.Port) {
		v.add(key+".port", "expected a port name of the Service (such as http) or a number, got %q", k.Port)
	}
	// Without a kubeconfig, ebb uses the pod's service account.
	if k.Kubeconfig != "" {
		v.file(key+".kubeconfig", k.Kubeconfig, "a kubeconfig file")
	}
}

// dnsLabel reports whether s is an RFC 1123 label, as Kubernetes names of
// namespaces, Services and ports are.
func dnsLabel(s string) bool {
	if len(s) == 0 || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for _, c := range s {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' {
			return false
		}
	}
	return true
}

// maxUnixPath is the longest path a Unix socket address holds
// (sun_path, with its terminating NUL).
const maxUnixPath = 107

func (v *validator) takeover(t Takeover) {
	p := t.Socket
	switch {
	case p == "":
	case strings.HasPrefix(p, "@"):
		v.add("takeover.socket", "expected a filesystem path, got the abstract socket %q: any local user could connect to it and take the listeners", p)
	case len(p) > maxUnixPath:
		v.add("takeover.socket", "expected a path of at most %d bytes (a Unix socket address), got %d", maxUnixPath, len(p))
	default:
		if st, err := os.Stat(filepath.Dir(p)); err != nil || !st.IsDir() {
			v.add("takeover.socket", "expected a path in an existing directory, got %q", p)
		}
	}
}

func (v *validator) drain(d Drain) {
	if p := d.Report; p != "" {
		if st, err := os.Stat(filepath.Dir(p)); err != nil || !st.IsDir() {
			v.add("drain.report", "expected a file path in an existing directory, got %q", p)
		} else if st, err := os.Stat(p); err == nil && st.IsDir() {
			v.add("drain.report", "expected a file path, got the directory %q", p)
		}
	}
	v.positive("drain.timeout", d.Timeout)
	if d.Delay+d.Spread >= d.Timeout && d.Timeout > 0 {
		v.add("drain.timeout", "%s leaves no time to drain after delay (%s) and spread (%s); make it longer than both together", d.Timeout, d.Delay, d.Spread)
	}
	if d.MinDuration != nil && *d.MinDuration > d.Timeout {
		v.add("drain.min_duration", "%s is longer than drain.timeout (%s)", *d.MinDuration, d.Timeout)
	}
	v.oneOf("drain.accept_until", d.AcceptUntil, AcceptUntilExit, AcceptUntilAfterDelay, AcceptUntilImmediately)
	v.oneOf("drain.websocket.close", d.WebSocket.Close, WebSocketAtSignal, WebSocketAtDeadline)
	v.positive("drain.websocket.grace", d.WebSocket.Grace)
	v.oneOf("drain.event_streams", d.EventStreams, EventStreamsResumable, EventStreamsAll, EventStreamsOff)
	if len(d.Signals) == 0 {
		v.add("drain.signals", "expected at least one signal, such as SIGTERM")
	}
	for i, s := range d.Signals {
		v.oneOf(fmt.Sprintf("drain.signals[%d]", i), s, knownSignals...)
	}
	a := d.App
	n := 0
	if a.TCP != "" {
		n++
		v.hostPort("drain.app.tcp", a.TCP)
	}
	if a.HTTP != "" {
		n++
		if u, err := url.Parse(a.HTTP); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			v.add("drain.app.http", "expected a URL such as http://127.0.0.1:9000/healthz, got %q", a.HTTP)
		}
	}
	if a.PID != 0 {
		n++
		if a.PID < 0 {
			v.add("drain.app.pid", "expected a process id above zero, got %d", a.PID)
		}
	}
	if a.PIDFile != "" {
		n++
	}
	if n > 1 {
		v.add("drain.app", "name at most one of tcp, http, pid and pid_file; found %d", n)
	}
	v.positive("drain.app.interval", a.Interval)
}

// MinAdminToken is the shortest admin token accepted.
const MinAdminToken = 16

// ReadAdminToken returns the token in path, trimmed of white space.
func ReadAdminToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	tok := strings.TrimSpace(string(b))
	if len(tok) < MinAdminToken {
		return "", fmt.Errorf("%s: expected a token of at least %d characters, got %d", path, MinAdminToken, len(tok))
	}
	if strings.ContainsAny(tok, " \t\r\n") {
		return "", fmt.Errorf("%s: expected one token without white space inside", path)
	}
	return tok, nil
}

// validVia reports whether name may stand in a Via field as the
// receiving proxy's name: a token (RFC 9110 §5.6.2), or host:port.
func validVia(name string) bool {
	for i := range len(name) {
		c := name[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~:[]", c) >= 0:
		default:
			return false
		}
	}
	return true
}
