package proxy

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/metric"

	"github.com/ebb-proxy/ebb/config"
	"github.com/ebb-proxy/ebb/drain"
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
	path := filepath.Join(t.TempDir(), "ebb.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path, config.Options{})
	if err != nil {
		t.Fatalf("loading the configuration: %v\n%s", err, yaml)
	}
	p, err := New(cfg, drain.NewRegistry(), metric.NewMeterProvider().Meter("matrix"), proxytest.Discard())
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// randReader returns a deterministic stream of pseudo-random bytes.
func randReader(seed byte) io.Reader {
	var s [32]byte
	for i := range s {
		s[i] = seed + byte(i)
	}
	return rand.NewChaCha8(s)
}

// randBytes returns n deterministic pseudo-random bytes.
func randBytes(seed byte, n int) []byte {
	b := make([]byte, n)
	if _, err := io.ReadFull(randReader(seed), b); err != nil {
		panic(err)
	}
	return b
}

// streamSHA256 returns the hex SHA-256 of the first n bytes of
// randReader(seed).
func streamSHA256(seed byte, n int64) string {
	h := sha256.New()
	if _, err := io.CopyN(h, randReader(seed), n); err != nil {
		panic(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// after returns a timer channel and a function that stops the timer.
func after(d time.Duration) (<-chan time.Time, func() bool) {
	tm := time.NewTimer(d)
	return tm.C, tm.Stop
}

// recv waits for a value on ch, failing the test after waitTimeout.
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	timeout, stop := after(waitTimeout)
	defer stop()
	select {
	case v := <-ch:
		return v
	case <-timeout:
		t.Fatalf("timed out after %s waiting for %s", waitTimeout, what)
	}
	panic("unreachable")
}

// pieces are sent one at a time by the streaming scenarios; each must
// cross ebb before the next is sent.
var pieces = []string{"first piece\n", strings.Repeat("second ", 1000) + "\n", "x", "last piece\n"}
