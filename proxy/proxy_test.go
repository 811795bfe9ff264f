package proxy

import (
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/metric"

	"github.com/ebb-proxy/ebb/config"
	"github.com/ebb-proxy/ebb/proxy/downstream"
)

func testConfig(addrs ...string) *config.Config {
	cfg := config.Default()
	for i, a := range addrs {
		cfg.Listeners = append(cfg.Listeners, config.Listener{
			Name: "l" + string(rune('0'+i)), Address: a,
			Limits:   config.Limits{MaxHeaderBytes: config.DefaultMaxHeaderBytes},
			Timeouts: config.ListenerTimeouts{Header: time.Second, Idle: time.Second, Write: time.Second},
			Routes:   []config.Route{{Cluster: "c"}},
		})
	}
	cfg.Clusters = []config.Cluster{{Name: "c", MaxConnsPerEndpoint: 1,
		Discovery: config.Discovery{Static: []string{"127.0.0.1:1"}},
		Timeouts:  config.ClusterTimeouts{Connect: time.Second, Response: time.Second, Idle: time.Second}}}
	return cfg
}

func newTestProxy(t *testing.T, cfg *config.Config) *Proxy {
	t.Helper()
	if cfg.Telemetry.AccessLog.Path == "" {
		cfg.Telemetry.AccessLog.Path = os.DevNull // not the test binary's stdout
	}
	p, err := New(cfg, downstream.NewRegistry(), metric.NewMeterProvider().Meter("t"), nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if p.sink != nil { // tests that do not Close p
			p.sink.Close()
		}
	})
	return p
}

// A listener that cannot bind fails Start with its name, and the ones
// already bound are released; nothing hangs.
func TestStartFailsCleanly(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	p := newTestProxy(t, testConfig("127.0.0.1:0", busy.Addr().String()))
	err = p.Start()
	if err == nil || !strings.Contains(err.Error(), `listener "l1"`) {
		t.Fatalf("Start = %v", err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
}

// Close right after Start (before the engines run) returns, and the
// proxy cannot be started again.
func TestCloseRightAfterStart(t *testing.T) {
	p := newTestProxy(t, testConfig("127.0.0.1:0", "127.0.0.1:0"))
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != ErrClosed {
		t.Fatalf("Start after Close = %v, want ErrClosed", err)
	}
}

// addrConn gives a net.Pipe end a TCP peer address, as accepted sockets have.
type addrConn struct{ net.Conn }

func (addrConn) RemoteAddr() net.Addr {
	return &net.TCPAddr{IP: net.IPv4(10, 1, 2, 3), Port: 40000}
}
