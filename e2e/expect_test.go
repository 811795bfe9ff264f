package e2e

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestExpectContinue checks that ebb answers Expect: 100-continue itself:
// curl gets "100 Continue", sends the body, and the origin receives it
// whole (without the Expect header, which ebb has answered); a raw client
// gets the 100 before it sends a byte of the body.
func TestExpectContinue(t *testing.T) {
	t.Parallel()
	type seen struct {
		expect string
		sum    string
		n      int64
	}
	seenCh := make(chan seen, 4)
	origin := newOrigin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := sha256.New()
		n, err := io.Copy(h, r.Body)
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		seenCh <- seen{expect: r.Header.Get("Expect"), sum: fmt.Sprintf("%x", h.Sum(nil)), n: n}
		fmt.Fprintf(w, "%d bytes\n", n)
	}))
	e := startEbb(t, singleClusterYAML(hostPort(origin)))

	t.Run("curl", func(t *testing.T) {
		body := randBytes(3, 3<<20)
		f := filepath.Join(t.TempDir(), "body")
		if err := os.WriteFile(f, body, 0o644); err != nil {
			t.Fatal(err)
		}
		r := runCurl(t, "-v", "-H", "Expect: 100-continue", "--data-binary", "@"+f, e.url("public", "/upload"))
		if r.status != 200 || string(r.body) != fmt.Sprintf("%d bytes\n", len(body)) {
			t.Fatalf("status %d, body %q", r.status, r.body)
		}
		if !strings.Contains(r.stderr, "< HTTP/1.1 100 Continue") {
			t.Errorf("curl got no 100 Continue; its trace:\n%s", r.stderr)
		}
		s := recv(t, seenCh, "the origin")
		if want := fmt.Sprintf("%x", sha256.Sum256(body)); s.sum != want || s.n != int64(len(body)) {
			t.Errorf("origin received %d bytes (sha256 %s), want %d (%s)", s.n, s.sum, len(body), want)
		}
		if s.expect != "" {
			t.Errorf("origin received Expect: %q; ebb answered it, it must not be forwarded", s.expect)
		}
	})

	t.Run("raw", func(t *testing.T) {
		c := rawConn(t, e.addr("public"))
		const body = "hello, body"
		fmt.Fprintf(c, "POST /upload HTTP/1.1\r\nHost: app\r\nContent-Length: %d\r\nExpect: 100-continue\r\n\r\n", len(body))
		br := bufio.NewReader(c)
		// Nothing of the body is sent until the 100 Continue arrives.
		interim, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("waiting for 100 Continue: %v", err)
		}
		if interim.StatusCode != 100 {
			t.Fatalf("got %d before sending the body, want 100", interim.StatusCode)
		}
		io.WriteString(c, body)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != 200 || !bytes.Equal(got, []byte("11 bytes\n")) {
			t.Fatalf("final response: %d %q %v; want 200 \"11 bytes\\n\"", resp.StatusCode, got, err)
		}
		s := recv(t, seenCh, "the origin")
		if want := fmt.Sprintf("%x", sha256.Sum256([]byte(body))); s.sum != want || s.expect != "" {
			t.Errorf("origin received sha256 %s with Expect %q, want %s and none", s.sum, s.expect, want)
		}
	})
}
