package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// pieces are sent one at a time; each must cross ebb before the next is
// sent, which only a proxy that forwards chunks as they come passes.
var pieces = []string{"first piece\n", strings.Repeat("second ", 1000) + "\n", "x", "last piece\n"}

// TestChunkedResponseStreams has the origin write a response without
// Content-Length in pieces, flushing each and waiting until the client has
// received it before writing the next: ebb must relay each chunk as it
// comes, with chunked framing.
func TestChunkedResponseStreams(t *testing.T) {
	t.Parallel()
	ack := make(chan struct{})
	originErr := make(chan error, 1)
	origin := newOrigin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		originErr <- func() error {
			for i, p := range pieces {
				if _, err := io.WriteString(w, p); err != nil {
					return err
				}
				w.(http.Flusher).Flush()
				if i == len(pieces)-1 {
					return nil
				}
				select {
				case <-ack:
				case <-r.Context().Done():
					return fmt.Errorf("piece %d was never acknowledged: %w", i, r.Context().Err())
				}
			}
			return nil
		}()
	}))
	e := startEbb(t, singleClusterYAML(hostPort(origin)))
	client := newClient(t)

	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.url("public", "/stream"), nil)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if resp.ContentLength != -1 || len(resp.TransferEncoding) != 1 || resp.TransferEncoding[0] != "chunked" {
		t.Fatalf("Content-Length %d, Transfer-Encoding %q; want a chunked response", resp.ContentLength, resp.TransferEncoding)
	}
	for i, p := range pieces {
		got := make([]byte, len(p))
		if _, err := io.ReadFull(resp.Body, got); err != nil {
			t.Fatalf("piece %d did not arrive on its own (ebb holds chunks back?): %v", i, err)
		}
		if string(got) != p {
			t.Fatalf("piece %d: got %q, want %q", i, got, p)
		}
		if i < len(pieces)-1 {
			ack <- struct{}{}
		}
	}
	if rest, err := io.ReadAll(resp.Body); err != nil || len(rest) != 0 {
		t.Fatalf("after the last piece: %q, %v; want a clean end", rest, err)
	}
	if err := recv(t, originErr, "the origin handler"); err != nil {
		t.Fatal("origin:", err)
	}
}

// TestChunkedRequestStreams sends a chunked request body one piece at a
// time, each only after the origin has read the previous one: ebb must
// forward each chunk as it comes, chunked.
func TestChunkedRequestStreams(t *testing.T) {
	t.Parallel()
	got := make(chan string) // each piece as the origin read it
	type result struct {
		contentLength int64
		te            []string
		rest          []byte
		err           error
	}
	done := make(chan result, 1)
	origin := newOrigin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		res := result{contentLength: r.ContentLength, te: r.TransferEncoding}
		for _, p := range pieces {
			b := make([]byte, len(p))
			if _, err := io.ReadFull(r.Body, b); err != nil {
				res.err = err
				done <- res
				return
			}
			select {
			case got <- string(b):
			case <-r.Context().Done():
				res.err = r.Context().Err()
				done <- res
				return
			}
		}
		res.rest, res.err = io.ReadAll(r.Body)
		done <- res
		io.WriteString(w, "received\n")
	}))
	e := startEbb(t, singleClusterYAML(hostPort(origin)))
	client := newClient(t)

	pr, pw := io.Pipe()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.url("public", "/upload"), pr)
	req.ContentLength = -1
	type response struct {
		status int
		body   string
		err    error
	}
	respCh := make(chan response, 1)
	go func() {
		resp, err := client.Do(req)
		if err != nil {
			respCh <- response{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		respCh <- response{status: resp.StatusCode, body: string(b), err: err}
	}()
	for i, p := range pieces {
		if _, err := io.WriteString(pw, p); err != nil {
			t.Fatalf("writing piece %d: %v", i, err)
		}
		if g := recv(t, got, fmt.Sprintf("piece %d at the origin (ebb holds chunks back?)", i)); g != p {
			t.Fatalf("origin read piece %d as %q, want %q", i, g, p)
		}
	}
	pw.Close()
	res := recv(t, done, "the origin to read the end of the body")
	if res.err != nil || len(res.rest) != 0 {
		t.Fatalf("origin, after the last piece: %q, %v; want a clean end", res.rest, res.err)
	}
	if res.contentLength != -1 || len(res.te) != 1 || res.te[0] != "chunked" {
		t.Errorf("origin saw Content-Length %d, Transfer-Encoding %q; want a chunked request", res.contentLength, res.te)
	}
	r := recv(t, respCh, "the response")
	if r.err != nil || r.status != 200 || r.body != "received\n" {
		t.Fatalf("response: status %d, body %q, err %v; want 200 \"received\\n\"", r.status, r.body, r.err)
	}
}

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
