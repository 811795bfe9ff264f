package proxytest

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The behaviour matrix runs every scenario once per mode: each way a
// client can reach ebb crossed with each way ebb can reach the origin, as
// net/http's clientserver_test.go runs its tests over HTTP/1.1 and
// HTTP/2. The proxy package runs it against a Proxy in the test's
// process; e2e against the binary, for what only a process shows.

// WaitTimeout bounds every wait of a behaviour test for something that
// must happen.
const WaitTimeout = 15 * time.Second

// Downstream is how the test's client talks to ebb.
type Downstream int

const (
	DownH1    Downstream = iota // HTTP/1.1 in cleartext
	DownH1TLS                   // HTTP/1.1 over TLS (ALPN http/1.1)
	DownH2C                     // HTTP/2 in cleartext, with prior knowledge
	DownH2TLS                   // HTTP/2 over TLS (ALPN h2)
)

var downNames = [...]string{DownH1: "h1", DownH1TLS: "h1tls", DownH2C: "h2c", DownH2TLS: "h2tls"}

// Upstream is how ebb talks to the origin: the cluster's protocol, and an
// origin that speaks it.
type Upstream int

const (
	UpHTTP1     Upstream = iota // protocol http1; the origin speaks HTTP/1.1 only
	UpH2C                       // protocol h2c; the origin speaks HTTP/1.1 and h2c
	UpH2                        // protocol h2; a TLS origin offering h2 and http/1.1
	UpAuto                      // protocol auto; the same TLS origin (h2 is negotiated)
	UpAutoHTTP1                 // protocol auto; a TLS origin offering http/1.1 only
)

var upNames = [...]string{UpHTTP1: "http1", UpH2C: "h2c", UpH2: "h2", UpAuto: "auto", UpAutoHTTP1: "auto-http1"}

// upProtocols are the clusters' protocols.
var upProtocols = [...]string{UpHTTP1: "http1", UpH2C: "h2c", UpH2: "h2", UpAuto: "auto", UpAutoHTTP1: "auto"}

// Mode is one combination of the matrix.
type Mode struct {
	Down Downstream
	Up   Upstream
}

func (m Mode) String() string { return downNames[m.Down] + "-" + upNames[m.Up] }

// TLS reports whether the client reaches ebb over TLS.
func (m Mode) TLS() bool { return m.Down == DownH1TLS || m.Down == DownH2TLS }

// DownH2 reports whether the client speaks HTTP/2 to ebb.
func (m Mode) DownH2() bool { return m.Down == DownH2C || m.Down == DownH2TLS }

// UpH2 reports whether ebb speaks HTTP/2 to the origin.
func (m Mode) UpH2() bool { return m.Up != UpHTTP1 && m.Up != UpAutoHTTP1 }

// UpHTTP1Cluster reports whether the cluster's protocol is http1: only
// those relay protocol upgrades (WebSocket).
func (m Mode) UpHTTP1Cluster() bool { return m.Up == UpHTTP1 }

// Modes is every combination; each one makes sense.
var Modes = func() []Mode {
	var out []Mode
	for d := range len(downNames) {
		for u := range len(upNames) {
			out = append(out, Mode{Downstream(d), Upstream(u)})
		}
	}
	return out
}()

// Run runs f once per mode, each in a parallel subtest named after it.
func Run(t *testing.T, f func(t *testing.T, m Mode)) {
	t.Helper()
	for _, m := range Modes {
		t.Run(m.String(), func(t *testing.T) {
			t.Parallel()
			f(t, m)
		})
	}
}

// Env is one mode set up: an origin serving the scenario's handler, ebb
// in front of it, and a client speaking exactly the mode's downstream
// protocol.
//
// ebb's one listener, "public", routes requests for host 127.0.0.1 to
// cluster "app" (the origin), those under /slow/ to cluster "slow" (the
// same origin, with timeouts.response SlowTimeout) and those under /down/
// to cluster "down" (a closed port); any other host has no route.
type Env struct {
	Mode
	Client   *http.Client
	Host     string // ebb's listener as the client addresses it: 127.0.0.1:PORT
	Base     string // http:// or https:// and Host
	CertFile string // the listener's certificate (PEM), when the mode is TLS
	Pool     *x509.CertPool
}

// SlowTimeout is timeouts.response of cluster "slow".
const SlowTimeout = "300ms"

// NewEnv starts an origin serving h and a client for mode m, and has
// start run ebb with the configuration it is given, returning the address
// of its listener "public"; all are stopped at cleanup. The origin fails
// the test if a request reaches it over another protocol than the mode's.
func NewEnv(t *testing.T, m Mode, h http.Handler, start func(yaml string) (public string)) *Env {
	t.Helper()
	originAddr, caFile := StartOrigin(t, m.Up, h)
	e := &Env{Mode: m}
	var listener []string
	if m.TLS() {
		var keyFile string
		e.CertFile, keyFile, e.Pool = WriteTestCert(t, t.TempDir())
		listener = append(listener, fmt.Sprintf("tls: { cert: %q, key: %q }", e.CertFile, keyFile))
	}
	e.Host = start(MatrixYAML(m.Up, originAddr, caFile, ClosedPort(t), listener))
	e.Base = "http://" + e.Host
	if m.TLS() {
		e.Base = "https://" + e.Host
	}
	// Registered after start, so it runs first: ebb then stops without
	// waiting on the client's idle connections.
	e.Client = ModeClient(t, m, e.Pool)
	return e
}

// MatrixYAML is the configuration of an Env (see Env). listener holds
// extra lines for the listener's block.
func MatrixYAML(up Upstream, origin, caFile, down string, listener []string) string {
	cluster := func(name, addr string, extra ...string) string {
		lines := []string{"name: " + name, "protocol: " + upProtocols[up], fmt.Sprintf("discovery: { static: [%q] }", addr)}
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
	b.WriteString(cluster("slow", origin, "timeouts: { response: "+SlowTimeout+" }"))
	b.WriteString(cluster("down", down))
	return b.String()
}

// StartOrigin starts an origin for up serving h, and returns its address
// and, for a TLS origin, a PEM file of its certificate (for tls.ca_file).
func StartOrigin(t *testing.T, up Upstream, h http.Handler) (addr, caFile string) {
	t.Helper()
	wantMajor := 2
	if up == UpHTTP1 || up == UpAutoHTTP1 {
		wantMajor = 1
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor != wantMajor {
			t.Errorf("the origin received %s %s over %s, want HTTP/%d", r.Method, r.URL, r.Proto, wantMajor)
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	var p http.Protocols
	switch up {
	case UpHTTP1:
		p.SetHTTP1(true)
		srv.Config.Protocols = &p
		srv.Start()
	case UpH2C:
		p.SetHTTP1(true)
		p.SetUnencryptedHTTP2(true)
		srv.Config.Protocols = &p
		srv.Start()
	case UpH2, UpAuto, UpAutoHTTP1:
		srv.EnableHTTP2 = up != UpAutoHTTP1
		if up == UpAutoHTTP1 {
			srv.TLS = &tls.Config{NextProtos: []string{"http/1.1"}}
		}
		srv.StartTLS()
		caFile = filepath.Join(t.TempDir(), "origin-ca.pem")
		b := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
		if err := os.WriteFile(caFile, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return srv.Listener.Addr().String(), caFile
}

// ModeClient returns a client whose transport speaks only m's downstream
// protocol, trusting pool on TLS; its connections are closed at cleanup.
func ModeClient(t *testing.T, m Mode, pool *x509.CertPool) *http.Client {
	t.Helper()
	var p http.Protocols
	switch m.Down {
	case DownH1, DownH1TLS:
		p.SetHTTP1(true)
	case DownH2C:
		p.SetUnencryptedHTTP2(true)
	case DownH2TLS:
		p.SetHTTP2(true)
	}
	tr := &http.Transport{
		Protocols:             &p,
		DisableCompression:    true,
		MaxIdleConnsPerHost:   4,
		ResponseHeaderTimeout: WaitTimeout,
	}
	if m.TLS() {
		tr.TLSClientConfig = &tls.Config{RootCAs: pool}
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{
		Transport:     tr,
		Timeout:       2 * time.Minute,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// URL returns the URL of path on ebb's listener.
func (e *Env) URL(path string) string { return e.Base + path }

// WantMajor is the HTTP major version the client must get.
func (e *Env) WantMajor() int {
	if e.DownH2() {
		return 2
	}
	return 1
}

// Send sends req and checks that the response came over the mode's
// protocol. The caller closes the body.
func (e *Env) Send(t *testing.T, req *http.Request) *http.Response {
	t.Helper()
	resp, err := e.Client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	if resp.ProtoMajor != e.WantMajor() {
		resp.Body.Close()
		t.Fatalf("%s %s: response over %s, want HTTP/%d", req.Method, req.URL, resp.Proto, e.WantMajor())
	}
	return resp
}

// Exchange sends req, reads the whole response body and checks the
// protocol as Send does.
func (e *Env) Exchange(t *testing.T, req *http.Request) (*http.Response, []byte) {
	t.Helper()
	resp := e.Send(t, req)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the body: %v", req.Method, req.URL, err)
	}
	return resp, body
}

// NewRequest is http.NewRequestWithContext that fails the test on error.
func NewRequest(t *testing.T, ctx context.Context, method, url string, body io.Reader) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// CheckSum reads r to its end and checks that it held n bytes with the
// SHA-256 sum (hex).
func CheckSum(t *testing.T, r io.Reader, n int64, sum string) {
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

// ClosedPort returns a loopback address on which nothing listens.
func ClosedPort(t testing.TB) string {
	t.Helper()
	// A socket bound but not listening: connecting to it is refused, and
	// while the test runs no other test's server can take the port (one
	// closed at once could be handed to a parallel test's listener).
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
