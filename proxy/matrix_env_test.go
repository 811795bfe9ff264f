package proxy

import (
	"net/http"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/sdk/metric"

	"github.com/ebb-proxy/ebb/proxy/downstream"
	"github.com/ebb-proxy/ebb/proxy/proxytest"
)

// The behaviour matrix (proxytest.Mode: each way a client can reach ebb
// crossed with each way ebb reaches the origin) runs here against ebb in
// the test's process: a Proxy built from the configuration file as the
// binary loads it, with real sockets on 127.0.0.1, a real origin and a
// real client.

// mode is one combination of the matrix.
type mode = proxytest.Mode

// allModes is every combination.
var allModes = proxytest.Modes

// run runs f once per mode, each in a parallel subtest.
func run(t *testing.T, f func(t *testing.T, m mode)) {
	t.Helper()
	proxytest.Run(t, f)
}

// env is one mode set up (see proxytest.Env) with a Proxy in the middle.
type env struct {
	*proxytest.Env
	px *Proxy
}

// newEnv starts an origin serving h, a Proxy and a client for mode m, all
// stopped at cleanup.
func newEnv(t *testing.T, m mode, h http.Handler) *env {
	t.Helper()
	e := &env{}
	e.Env = proxytest.NewEnv(t, m, h, func(yaml string) string {
		e.px = startMatrixProxy(t, yaml)
		return e.px.Addr("public").String()
	})
	return e
}

// waitTimeout bounds every wait of the matrix tests for something that
// must happen.
const waitTimeout = proxytest.WaitTimeout

// startMatrixProxy loads yaml as ebb loads its configuration file, and
// starts a Proxy for it, closed at cleanup.
func startMatrixProxy(t *testing.T, yaml string) *Proxy {
	t.Helper()
	p, err := New(loadYAML(t, yaml), downstream.NewRegistry(), metric.NewMeterProvider().Meter("matrix"), nil, proxytest.Discard())
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// pieces are sent one at a time by the streaming scenarios; each must
// cross ebb before the next is sent.
var pieces = []string{"first piece\n", strings.Repeat("second ", 1000) + "\n", "x", "last piece\n"}
