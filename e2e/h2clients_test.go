package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/ebb-proxy/ebb/proxy/proxytest"
)

// TestCurlHTTP2 sends GET and POST requests through ebb with curl over
// HTTP/2: --http2 over TLS (ALPN, the listener's certificate trusted with
// --cacert) and --http2-prior-knowledge in cleartext (h2c), to an HTTP/1
// and an HTTP/2 origin.
func TestCurlHTTP2(t *testing.T) {
	t.Parallel()
	upload := filepath.Join(t.TempDir(), "upload")
	payload := randBytes(5, 1<<20)
	if err := os.WriteFile(upload, payload, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, m := range []mode{{Down: downH2TLS, Up: upHTTP1}, {Down: downH2TLS, Up: upH2}, {Down: downH2C, Up: upHTTP1}, {Down: downH2C, Up: upH2C}} {
		t.Run(m.String(), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, m, proxytest.ExchangeOrigin())
			flags := []string{"--http2-prior-knowledge"}
			if m.TLS() {
				flags = []string{"--http2", "--cacert", e.CertFile}
			}
			for _, c := range []struct {
				name   string
				args   []string
				status int
				body   []byte
			}{
				{"get", []string{e.URL("/hello")}, 200, []byte("hello, world\n")},
				{"post 1MiB", []string{"--data-binary", "@" + upload, "-H", "Content-Type: application/x-test", e.URL("/echo")}, 201, payload},
			} {
				t.Run(c.name, func(t *testing.T) {
					status, version, body := matrixCurl(t, append(flags, c.args...)...)
					if version != "2" {
						t.Errorf("curl used HTTP/%s, want 2", version)
					}
					if status != c.status || !bytes.Equal(body, c.body) {
						t.Fatalf("status %d, %d bytes (%.40q); want %d and %d bytes", status, len(body), body, c.status, len(c.body))
					}
				})
			}
		})
	}
}

// TestH2load runs h2load (2000 requests, 4 connections, 10 streams each)
// through ebb over h2c and over TLS, to an HTTP/1 and an HTTP/2 origin:
// every request must succeed with a 2xx.
func TestH2load(t *testing.T) {
	t.Parallel()
	bin := h2loadPath(t)
	const total = 2000
	for _, m := range []mode{{Down: downH2C, Up: upHTTP1}, {Down: downH2C, Up: upH2C}, {Down: downH2TLS, Up: upHTTP1}, {Down: downH2TLS, Up: upH2C}} {
		t.Run(m.String(), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, m, proxytest.ExchangeOrigin())
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, "-n", strconv.Itoa(total), "-c", "4", "-m", "10", e.URL("/hello"))
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("h2load: %v\n%s", err, out)
			}
			if !bytes.Contains(out, []byte("Application protocol: h2")) {
				t.Errorf("h2load did not speak h2 (no \"Application protocol: h2\"):\n%s", out)
			}
			req := h2loadRequests.FindStringSubmatch(string(out))
			st := h2loadStatus.FindStringSubmatch(string(out))
			if req == nil || st == nil {
				t.Fatalf("h2load's summary not found in its output:\n%s", out)
			}
			want := fmt.Sprintf("requests: %d total, %d started, %d done, %d succeeded, 0 failed, 0 errored, 0 timeout", total, total, total, total)
			wantStatus := fmt.Sprintf("status codes: %d 2xx, 0 3xx, 0 4xx, 0 5xx", total)
			if req[0] != want || st[0] != wantStatus {
				t.Fatalf("h2load:\n%s\n%s\nwant:\n%s\n%s\nfull output:\n%s", req[0], st[0], want, wantStatus, out)
			}
		})
	}
}
