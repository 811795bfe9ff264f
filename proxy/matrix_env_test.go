package proxy

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/metric"

	"github.com/ebb-proxy/ebb/config"
	"github.com/ebb-proxy/ebb/drain"
	"github.com/ebb-proxy/ebb/proxy/internal/proxytest"
)

// The proxy behaviour tests of matrix_test.go run every scenario once per
// mode: each way a client can reach ebb crossed with each way ebb can reach
// the origin, as net/http's clientserver_test.go runs its tests over
// HTTP/1.1 and HTTP/2. ebb runs in the test's process: a Proxy built from
// a configuration file as the binary loads it, with real sockets on
// 127.0.0.1, a real origin and a real client.

// downstream is how the test's client talks to ebb.
type downstream int

const (
	downH1    downstream = iota // HTTP/1.1 in cleartext
	downH1TLS                   // HTTP/1.1 over TLS (ALPN http/1.1)
	downH2C                     // HTTP/2 in cleartext, with prior knowledge
	downH2TLS                   // HTTP/2 over TLS (ALPN h2)
)

var downNames = [...]string{downH1: "h1", downH1TLS: "h1tls", downH2C: "h2c", downH2TLS: "h2tls"}

// upstream is how ebb talks to the origin: the cluster's protocol, and an
// origin that speaks it.
type upstream int

const (
	upHTTP1 upstream = iota // protocol http1; the origin speaks HTTP/1.1 only
	upH2C                   // protocol h2c; the origin speaks HTTP/1.1 and h2c
	upH2                    // protocol h2; a TLS origin offering h2 and http/1.1
	upAuto                  // protocol auto; the same TLS origin (h2 is negotiated)
)

var upNames = [...]string{upHTTP1: "http1", upH2C: "h2c", upH2: "h2", upAuto: "auto"}

// mode is one combination of the matrix.
type mode struct {
	down downstream
	up   upstream
}

func (m mode) String() string { return downNames[m.down] + "-" + upNames[m.up] }

// tls reports whether the client reaches ebb over TLS.
func (m mode) tls() bool { return m.down == downH1TLS || m.down == downH2TLS }

// downH2 reports whether the client speaks HTTP/2 to ebb.
func (m mode) downH2() bool { return m.down == downH2C || m.down == downH2TLS }

// upH2 reports whether ebb speaks HTTP/2 to the origin.
func (m mode) upH2() bool { return m.up != upHTTP1 }

// allModes is every combination; each one makes sense.
var allModes = func() []mode {
	var out []mode
	for d := range len(downNames) {
		for u := range len(upNames) {
			out = append(out, mode{downstream(d), upstream(u)})
		}
	}
	return out
}()

// run runs f once per mode, each in a parallel subtest named after it.
func run(t *testing.T, f func(t *testing.T, m mode)) {
	t.Helper()
	for _, m := range allModes {
		t.Run(m.String(), func(t *testing.T) {
			t.Parallel()
			f(t, m)
		})
	}
}

// env is one mode set up: an origin serving the scenario's handler, ebb
// in front of it, and a client speaking exactly the mode's downstream
// protocol.
//
// ebb's one listener routes requests for host 127.0.0.1 to cluster "app"
// (the origin), those under /slow/ to cluster "slow" (the same origin,
// with timeouts.response slowTimeout) and those under /down/ to cluster
// "down" (a closed port); any other host has no route.
type env struct {
	mode
	px       *Proxy
	client   *http.Client
	host     string // ebb's listener as the client addresses it: 127.0.0.1:PORT
	base     string // http:// or https:// and host
	certFile string // the listener's certificate (PEM), when the mode is TLS
	pool     *x509.CertPool
}

// slowTimeout is timeouts.response of cluster "slow".
const slowTimeout = "300ms"

// newEnv starts an origin serving h, ebb and a client for mode m, all
// stopped at cleanup. The origin fails the test if a request reaches it
// over another protocol than the mode's.
func newEnv(t *testing.T, m mode, h http.Handler) *env {
	t.Helper()
	originAddr, caFile := startMatrixOrigin(t, m.up, h)
	e := &env{mode: m}
	var listener []string
	if m.tls() {
		var keyFile string
		e.certFile, keyFile, e.pool = writeTestCert(t, t.TempDir())
		listener = append(listener, fmt.Sprintf("tls: { cert: %q, key: %q }", e.certFile, keyFile))
	}
	e.px = startMatrixProxy(t, matrixYAML(m.up, originAddr, caFile, closedPort(t), listener))
	e.host = e.px.Addr("public").String()
	e.base = "http://" + e.host
	if m.tls() {
		e.base = "https://" + e.host
	}
	// Registered after startMatrixProxy, so it runs first: ebb then stops
	// without waiting on the client's idle connections.
	e.client = modeClient(t, m, e.pool)
	return e
}

// matrixYAML is the configuration of an env (see env). listener holds
// extra lines for the listener's block.
func matrixYAML(up upstream, origin, caFile, down string, listener []string) string {
	cluster := func(name, addr string, extra ...string) string {
		lines := []string{"name: " + name, "protocol: " + upNames[up], fmt.Sprintf("discovery: { static: [%q] }", addr)}
		if caFile != "" {
			lines = append(lines, fmt.Sprintf("tls: { ca_file: %q }", caFile))
		}
		lines = append(lines, extra...)
		return "  - " + strings.Join(lines, "\n    ") + "\n"
	}
	var b strings.Builder
	b.WriteString("admin: { address: 127.0.0.1:0 }\nlisteners:\n  - name: public\n    address: 127.0.0.1:0\n")
	for _, l := range listener {
		b.WriteString("    " + l + "\n")
	}
	b.WriteString(`    routes:
      - { match: { path_prefix: "/down/" }, cluster: down }
      - { match: { host: "127.0.0.1", path_prefix: "/slow/" }, cluster: slow }
      - { match: { host: "127.0.0.1" }, cluster: app }
clusters:
`)
	b.WriteString(cluster("app", origin))
	b.WriteString(cluster("slow", origin, "timeouts: { response: "+slowTimeout+" }"))
	b.WriteString(cluster("down", down))
	return b.String()
}

// startMatrixOrigin starts an origin for up serving h, and returns its
// address and, for a TLS origin, a PEM file of its certificate (for
// tls.ca_file).
func startMatrixOrigin(t *testing.T, up upstream, h http.Handler) (addr, caFile string) {
	t.Helper()
	wantMajor := 2
	if up == upHTTP1 {
		wantMajor = 1
	}
	srv := newUnstartedOrigin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor != wantMajor {
			t.Errorf("the origin received %s %s over %s, want HTTP/%d", r.Method, r.URL, r.Proto, wantMajor)
		}
		h.ServeHTTP(w, r)
	}))
	var p http.Protocols
	switch up {
	case upHTTP1:
		p.SetHTTP1(true)
		srv.Config.Protocols = &p
		srv.Start()
	case upH2C:
		p.SetHTTP1(true)
		p.SetUnencryptedHTTP2(true)
		srv.Config.Protocols = &p
		srv.Start()
	case upH2, upAuto:
		srv.EnableHTTP2 = true
		srv.StartTLS()
		caFile = filepath.Join(t.TempDir(), "origin-ca.pem")
		b := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
		if err := os.WriteFile(caFile, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return hostPort(srv), caFile
}

// modeClient returns a client whose transport speaks only m's downstream
// protocol, trusting pool on TLS; its connections are closed at cleanup.
func modeClient(t *testing.T, m mode, pool *x509.CertPool) *http.Client {
	t.Helper()
	var p http.Protocols
	switch m.down {
	case downH1, downH1TLS:
		p.SetHTTP1(true)
	case downH2C:
		p.SetUnencryptedHTTP2(true)
	case downH2TLS:
		p.SetHTTP2(true)
	}
	tr := &http.Transport{
		Protocols:             &p,
		DisableCompression:    true,
		MaxIdleConnsPerHost:   4,
		ResponseHeaderTimeout: waitTimeout,
	}
	if m.tls() {
		tr.TLSClientConfig = &tls.Config{RootCAs: pool}
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{
		Transport:     tr,
		Timeout:       2 * time.Minute,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// url returns the URL of path on ebb's listener.
func (e *env) url(path string) string { return e.base + path }

// wantMajor is the HTTP major version the client must get.
func (e *env) wantMajor() int {
	if e.downH2() {
		return 2
	}
	return 1
}

// send sends req and checks that the response came over the mode's
// protocol. The caller closes the body.
func (e *env) send(t *testing.T, req *http.Request) *http.Response {
	t.Helper()
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	if resp.ProtoMajor != e.wantMajor() {
		resp.Body.Close()
		t.Fatalf("%s %s: response over %s, want HTTP/%d", req.Method, req.URL, resp.Proto, e.wantMajor())
	}
	return resp
}

// exchange sends req, reads the whole response body and checks the
// protocol as send does.
func (e *env) exchange(t *testing.T, req *http.Request) (*http.Response, []byte) {
	t.Helper()
	resp := e.send(t, req)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the body: %v", req.Method, req.URL, err)
	}
	return resp, body
}

// newRequest is http.NewRequestWithContext that fails the test on error.
func newRequest(t *testing.T, ctx context.Context, method, url string, body io.Reader) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// checkSum reads r to its end and checks that it held n bytes with the
// SHA-256 sum (hex).
func checkSum(t *testing.T, r io.Reader, n int64, sum string) {
	t.Helper()
	h := sha256.New()
	got, err := io.Copy(h, r)
	if err != nil {
		t.Fatalf("after %d bytes: %v", got, err)
	}
	if gotSum := hex.EncodeToString(h.Sum(nil)); got != n || gotSum != sum {
		t.Fatalf("received %d bytes with SHA-256 %s, want %d bytes with %s", got, gotSum, n, sum)
	}
}

// waitTimeout bounds every wait of the matrix tests for something that
// must happen.
const waitTimeout = 15 * time.Second

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

// writeTestCert writes a self-signed certificate for 127.0.0.1 and
// localhost and its key into dir, and returns their paths and a pool that
// trusts the certificate.
func writeTestCert(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	p := newTestPair(t, "ebb matrix test")
	certFile, keyFile = writePair(t, dir, p)
	pool = x509.NewCertPool()
	pool.AddCert(p.leaf)
	return certFile, keyFile, pool
}

// newUnstartedOrigin returns an httptest server for h that the test
// configures and starts; it is closed at cleanup.
func newUnstartedOrigin(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// hostPort returns the host:port of an httptest server.
func hostPort(srv *httptest.Server) string { return srv.Listener.Addr().String() }

// closedPort returns a loopback address on which nothing listens: a
// socket bound but not listening, so that while the test runs no other
// test's server can take the port.
func closedPort(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
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
