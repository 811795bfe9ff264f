package config

import "time"

// Defaults. Each is documented, with its reason, on the field it fills;
// docs/CONFIGURATION.md shows them together.
const (
	DefaultAdminAddress        = "127.0.0.1:9901"
	DefaultMaxHeaderBytes      = 32 << 10
	DefaultMinBodyRate         = 1 << 10
	DefaultMaxConnections      = 20000
	DefaultMaxInFlight         = 20000
	DefaultMaxStreams          = 250
	DefaultStreamWindow        = 256 << 10
	DefaultConnectionWindow    = 1 << 20
	DefaultHeaderTimeout       = 10 * time.Second
	DefaultIdleTimeout         = 120 * time.Second
	DefaultWriteTimeout        = 30 * time.Second
	DefaultConnectTimeout      = 2 * time.Second
	DefaultResponseTimeout     = 30 * time.Second
	DefaultUpstreamIdleTimeout = 4 * time.Second
	DefaultMaxConnsPerEndpoint = 512
	DefaultRetryAttempts       = 2
	DefaultRetryBudget         = 0.2
	DefaultRetryBufferBody     = 64 << 10
)

// Default returns a configuration holding every default and no listener or
// cluster (those have no sensible default).
func Default() *Config {
	return &Config{
		Admin:  Admin{Address: DefaultAdminAddress, Hosts: []string{}},
		Reload: Reload{Watch: true},
		Drain: Drain{
			Delay:        0,
			Spread:       2 * time.Second,
			Quiet:        time.Second,
			Timeout:      25 * time.Second,
			AcceptUntil:  AcceptUntilExit,
			HTTP1:        DrainHTTP1{IdleClose: IdleClose(time.Second)},
			HTTP2:        DrainHTTP2{GoawayGrace: time.Second},
			WebSocket:    DrainWebSocket{Close: WebSocketAtSignal, Grace: DefaultWebSocketGrace},
			EventStreams: EventStreamsResumable,
			Signals:      []string{"SIGTERM", "SIGINT"},
			App:          App{Interval: 500 * time.Millisecond},
		},
		Telemetry: Telemetry{
			Log:       Log{Format: "json", Level: "info"},
			AccessLog: AccessLog{Enabled: true, Format: "json"},
			Tracing:   Tracing{SamplingRatio: 1},
			Metrics:   Metrics{Prometheus: true},
		},
	}
}

func (l *Listener) setDefaults() {
	l.Role = RoleInbound
	l.Limits.MaxHeaderBytes = DefaultMaxHeaderBytes
	l.Limits.MinBodyRate = DefaultMinBodyRate
	l.Limits.MaxConnections = DefaultMaxConnections
	l.Limits.MaxInFlight = DefaultMaxInFlight
	l.HTTP2 = ListenerHTTP2{MaxConcurrentStreams: DefaultMaxStreams, StreamWindow: DefaultStreamWindow, ConnectionWindow: DefaultConnectionWindow}
	l.Timeouts = ListenerTimeouts{Header: DefaultHeaderTimeout, Idle: DefaultIdleTimeout, Write: DefaultWriteTimeout}
	l.Headers.TrustedProxies = []string{}
	l.Headers.RequestID = RequestIDTrusted
	l.Paths.EscapedSlashes = EscapedSlashesKeep
}

func (c *Cluster) setDefaults() {
	c.Protocol = ProtocolHTTP1
	c.Balancer = BalancerLeastRequest
	c.Timeouts = ClusterTimeouts{
		Connect:  DefaultConnectTimeout,
		Response: DefaultResponseTimeout,
		Idle:     DefaultUpstreamIdleTimeout,
	}
	c.MaxConnsPerEndpoint = DefaultMaxConnsPerEndpoint
	c.Retries = Retries{Attempts: DefaultRetryAttempts, Budget: DefaultRetryBudget, BufferBody: DefaultRetryBufferBody}
	c.Discovery.OnEmpty = OnEmptyKeep
	c.OutlierDetection = DefaultOutlierDetection()
}

// DefaultOutlierDetection is a cluster's passive health when its
// configuration says nothing of it.
func DefaultOutlierDetection() OutlierDetection {
	return OutlierDetection{Consecutive5xx: 5, ConsecutiveGatewayErrors: 5,
		BaseEjectionTime: time.Second, MaxEjectionTime: 30 * time.Second, MaxEjectedPercent: 100}
}

func (d *DNSSource) setDefaults() {
	d.Refresh = 5 * time.Second
}
