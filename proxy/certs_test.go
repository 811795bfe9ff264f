package proxy

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// certTestTimeout bounds every wait in these tests. It is below certPoll,
// so a reload seen in time was triggered by the watch, not the poll.
const certTestTimeout = 5 * time.Second

// testPair is a self-signed ECDSA certificate for localhost and its key.
type testPair struct {
	cert, key []byte // PEM
	leaf      *x509.Certificate
}

func newTestPair(t *testing.T, cn string) testPair {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 64))
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return testPair{
		cert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		key:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
		leaf: leaf,
	}
}

// writeAtomic replaces path by renaming a complete file over it, as
// editors and deployment tools do.
func writeAtomic(t *testing.T, path string, data []byte) {
	t.Helper()
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// syncBuffer is a bytes.Buffer safe for a logger and a test to share.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// runCertStore loads a store and runs it until the test ends, checking
// that run returns then. Each reload attempt's result arrives on the
// returned channel; the log goes to the returned buffer.
func runCertStore(t *testing.T, certFile, keyFile string) (*certStore, <-chan error, *syncBuffer) {
	t.Helper()
	logs := new(syncBuffer)
	s, err := newCertStore(certFile, keyFile, slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	reloads := make(chan error)
	s.onReload = func(err error) {
		select {
		case reloads <- err:
		case <-ctx.Done():
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.run(ctx)
	}()
	t.Cleanup(func() {
		select {
		case <-done:
		case <-time.After(certTestTimeout):
			t.Error("certStore.run did not return after its context ended")
		}
	})
	return s, reloads, logs
}

// nextReload waits for the store's next reload attempt and returns its error.
func nextReload(t *testing.T, reloads <-chan error) error {
	t.Helper()
	select {
	case err := <-reloads:
		return err
	case <-time.After(certTestTimeout):
		t.Fatalf("no certificate reload within %v", certTestTimeout)
		return nil
	}
}

// waitLoaded waits until a reload succeeds. Attempts that fail in between
// are expected: a certificate replaced before its key is a mismatch.
func waitLoaded(t *testing.T, reloads <-chan error) {
	t.Helper()
	for nextReload(t, reloads) != nil {
	}
}

// tlsEcho serves TLS with cfg on 127.0.0.1:0 until the test ends, echoing
// what each connection sends.
func tlsEcho(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	return ln.Addr().String()
}

// dialTLS opens a TLS connection, closed when the test ends.
func dialTLS(t *testing.T, addr string, cfg *tls.Config) (*tls.Conn, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), certTestTimeout)
	defer cancel()
	c, err := (&tls.Dialer{Config: cfg}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { c.Close() })
	return c.(*tls.Conn), nil
}

// servedLeaf returns the certificate a new handshake with addr sees.
func servedLeaf(t *testing.T, addr string) *x509.Certificate {
	t.Helper()
	// Not verified: the tests compare the certificate with the one expected.
	c, err := dialTLS(t, addr, &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		t.Fatal(err)
	}
	return c.ConnectionState().PeerCertificates[0]
}

func wantServed(t *testing.T, addr string, want testPair) {
	t.Helper()
	if got := servedLeaf(t, addr); !got.Equal(want.leaf) {
		t.Fatalf("handshake got certificate %q, want %q", got.Subject, want.leaf.Subject)
	}
}

// echo sends msg on c and reads it back.
func echo(t *testing.T, c net.Conn, msg string) {
	t.Helper()
	if err := c.SetDeadline(time.Now().Add(certTestTimeout)); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(c, msg); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatal(err)
	}
	if string(got) != msg {
		t.Fatalf("echo got %q, want %q", got, msg)
	}
}

// writePair writes p's certificate and key to dir/tls.crt and dir/tls.key.
func writePair(t *testing.T, dir string, p testPair) (certFile, keyFile string) {
	t.Helper()
	certFile, keyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	writeAtomic(t, certFile, p.cert)
	writeAtomic(t, keyFile, p.key)
	return certFile, keyFile
}

// A pair that does not load is an error naming the files.
func TestCertStoreLoadErrors(t *testing.T) {
	a, b := newTestPair(t, "a"), newTestPair(t, "b")
	dir := t.TempDir()
	certFile, keyFile := writePair(t, dir, a)
	otherKey := filepath.Join(dir, "b.key")
	writeAtomic(t, otherKey, b.key)
	garbage := filepath.Join(dir, "garbage.crt")
	writeAtomic(t, garbage, []byte("not a certificate\n"))
	missing := filepath.Join(dir, "missing")

	tests := []struct {
		name              string
		certFile, keyFile string
		want              []string
	}{
		{"missing certificate", missing, keyFile, []string{missing, "no such file"}},
		{"missing key", certFile, missing, []string{missing, "no such file"}},
		{"key of another certificate", certFile, otherKey, []string{certFile, otherKey, "does not match"}},
		{"garbage certificate", garbage, keyFile, []string{garbage, keyFile}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := newCertStore(tt.certFile, tt.keyFile, slog.New(slog.DiscardHandler))
			if err == nil {
				t.Fatalf("newCertStore = %v, nil; want an error", s)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

// Files replaced by renames: new handshakes get the new certificate, and a
// connection opened before keeps working.
func TestCertRotationRename(t *testing.T) {
	a, b := newTestPair(t, "a"), newTestPair(t, "b")
	certFile, keyFile := writePair(t, t.TempDir(), a)
	s, reloads, logs := runCertStore(t, certFile, keyFile)
	addr := tlsEcho(t, serverTLSConfig(s))

	old, err := dialTLS(t, addr, &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		t.Fatal(err)
	}
	echo(t, old, "before")
	wantServed(t, addr, a)

	writeAtomic(t, certFile, b.cert)
	writeAtomic(t, keyFile, b.key)
	waitLoaded(t, reloads)

	wantServed(t, addr, b)
	echo(t, old, "after")
	if got := old.ConnectionState().PeerCertificates[0]; !got.Equal(a.leaf) {
		t.Errorf("open connection's certificate is %q, want %q", got.Subject, a.leaf.Subject)
	}
	if l := logs.String(); !strings.Contains(l, "TLS certificate reloaded") || !strings.Contains(l, "CN=b") {
		t.Errorf("reload not logged with the new subject:\n%s", l)
	}
}

// A Kubernetes secret volume: tls.crt -> ..data/tls.crt, and an update
// swaps the ..data symlink to a new directory, then removes the old one.
func TestCertRotationKubernetes(t *testing.T) {
	a, b := newTestPair(t, "a"), newTestPair(t, "b")
	dir := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Mkdir(filepath.Join(dir, "..2026_a"), 0o755))
	writePair(t, filepath.Join(dir, "..2026_a"), a)
	must(os.Symlink("..2026_a", filepath.Join(dir, "..data")))
	must(os.Symlink("..data/tls.crt", filepath.Join(dir, "tls.crt")))
	must(os.Symlink("..data/tls.key", filepath.Join(dir, "tls.key")))

	s, reloads, _ := runCertStore(t, filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"))
	addr := tlsEcho(t, serverTLSConfig(s))
	wantServed(t, addr, a)

	must(os.Mkdir(filepath.Join(dir, "..2026_b"), 0o755))
	writePair(t, filepath.Join(dir, "..2026_b"), b)
	must(os.Symlink("..2026_b", filepath.Join(dir, "..data_tmp")))
	must(os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")))
	must(os.RemoveAll(filepath.Join(dir, "..2026_a")))
	waitLoaded(t, reloads)

	wantServed(t, addr, b)
}

// A pair that does not load keeps the previous certificate serving and is
// logged; the next good pair is taken.
func TestCertBadPairKeepsServing(t *testing.T) {
	a, b := newTestPair(t, "a"), newTestPair(t, "b")
	certFile, keyFile := writePair(t, t.TempDir(), a)
	s, reloads, logs := runCertStore(t, certFile, keyFile)
	addr := tlsEcho(t, serverTLSConfig(s))

	// Each step is one atomic change, so each is exactly one attempt.
	steps := []struct {
		name    string
		file    string
		data    []byte
		wantErr string
		serves  testPair
	}{
		{"half-written certificate", certFile, b.cert[:len(b.cert)/2], "failed to find any PEM data", a},
		{"certificate without its key", certFile, b.cert, "does not match", a},
		{"key follows", keyFile, b.key, "", b},
	}
	for _, st := range steps {
		writeAtomic(t, st.file, st.data)
		err := nextReload(t, reloads)
		switch {
		case st.wantErr == "" && err != nil:
			t.Fatalf("%s: reload failed: %v", st.name, err)
		case st.wantErr != "" && (err == nil || !strings.Contains(err.Error(), st.wantErr)):
			t.Fatalf("%s: reload error = %v, want one containing %q", st.name, err, st.wantErr)
		}
		wantServed(t, addr, st.serves)
	}
	l := logs.String()
	for _, want := range []string{"level=WARN", "serving the previous one", certFile, keyFile, "does not match"} {
		if !strings.Contains(l, want) {
			t.Errorf("log does not mention %q:\n%s", want, l)
		}
	}
}

// The listener offers HTTP/2 and HTTP/1.1 by ALPN, and refuses TLS < 1.2.
func TestTLSConfigALPN(t *testing.T) {
	certFile, keyFile := writePair(t, t.TempDir(), newTestPair(t, "a"))
	s, err := newCertStore(certFile, keyFile, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	addr := tlsEcho(t, serverTLSConfig(s))

	tests := []struct {
		name       string
		protos     []string
		minV, maxV uint16
		want       string // negotiated protocol
		wantErr    bool
	}{
		{name: "h2", protos: []string{"h2", "http/1.1"}, want: "h2"},
		{name: "http/1.1 only", protos: []string{"http/1.1"}, want: "http/1.1"},
		{name: "no ALPN", want: ""},
		{name: "TLS 1.2 h2", protos: []string{"h2", "http/1.1"}, maxV: tls.VersionTLS12, want: "h2"},
		{name: "TLS 1.1 refused", protos: []string{"http/1.1"}, minV: tls.VersionTLS10, maxV: tls.VersionTLS11, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := dialTLS(t, addr, &tls.Config{
				InsecureSkipVerify: true,
				NextProtos:         tt.protos,
				MinVersion:         tt.minV,
				MaxVersion:         tt.maxV,
			})
			if tt.wantErr {
				if err == nil {
					t.Fatalf("handshake succeeded with version %#x, want refused", c.ConnectionState().Version)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := c.ConnectionState().NegotiatedProtocol; got != tt.want {
				t.Errorf("negotiated %q, want %q", got, tt.want)
			}
			echo(t, c, "ping")
		})
	}
}
