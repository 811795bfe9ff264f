package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/ebb-proxy/ebb/proxy/proxytest"
)

// h2cTransport is an HTTP/2 client that speaks cleartext from the start
// (prior knowledge), closed at cleanup.
func h2cTransport(t *testing.T) *http2.Transport {
	tr := &http2.Transport{AllowHTTP: true, DialTLSContext: func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}}
	t.Cleanup(tr.CloseIdleConnections)
	return tr
}

// trickle writes total bytes to w: lead bytes at once, then chunk bytes
// at each tick of every; then it closes w. It stops early when a write
// fails or stop is closed.
func trickle(w io.WriteCloser, lead, chunk int, every time.Duration, total int, stop <-chan struct{}) {
	defer w.Close()
	if _, err := w.Write([]byte(strings.Repeat("x", lead))); err != nil {
		return
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	buf := []byte(strings.Repeat("x", chunk))
	for sent := lead; sent < total; sent += chunk {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		if _, err := w.Write(buf[:min(chunk, total-sent)]); err != nil {
			return
		}
	}
}

// bodyRead is what the origin read of a request body.
type bodyRead struct {
	n   int64
	err error
}

// TestBodyMinRate sends request bodies at a tick (issue 14, item 2), with
// timeouts.header 1s and the default limits.min_body_rate (1KiB a
// second), from an HTTP/1.1 and an h2c client: 9,000 bytes, then a
// trickle of one byte every 50 ms, which is never silent for a second,
// is cut with 408 and its upstream request ends without the body whole;
// a body at 20KiB a second for twice the header timeout arrives whole; a
// gRPC request to an HTTP/2 cluster may trickle (its messages may rightly
// be sparse), another request to it may not.
func TestBodyMinRate(t *testing.T) {
	t.Parallel()
	reads := make(chan bodyRead, 4)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, err := io.Copy(io.Discard, r.Body)
		reads <- bodyRead{n, err}
		fmt.Fprintf(w, "got %d", n)
	})
	h1origin := hostPort(newOrigin(t, h))
	h2origin := proxytest.H2CServer(t, nil, h)
	yaml := fmt.Sprintf(`
admin: { address: 127.0.0.1:0 }
listeners:
  - name: public
    address: 127.0.0.1:0
    timeouts: { header: 1s }
    routes:
      - match: { path_prefix: "/grpc/" }
        cluster: h2
      - match: { path_prefix: "/" }
        cluster: h1
clusters:
  - name: h1
    discovery: { static: [%q] }
    retries: { buffer_body: 0 }
  - name: h2
    protocol: h2c
    discovery: { static: [%q] }
    retries: { buffer_body: 0 }
`, h1origin, h2origin)
	e := startEbb(t, yaml)
	tr := h2cTransport(t)
	for _, tc := range []struct {
		name        string
		path, ctype string
		lead, chunk int
		total       int
		h2          bool
		want        int // status
	}{
		{name: "http1 trickle", path: "/up", lead: 9000, chunk: 1, total: 100000, want: http.StatusRequestTimeout},
		{name: "h2 trickle", path: "/up", lead: 9000, chunk: 1, total: 100000, h2: true, want: http.StatusRequestTimeout},
		{name: "http1 steady", path: "/up", chunk: 1024, total: 40 << 10, want: http.StatusOK},
		{name: "h2 steady", path: "/up", chunk: 1024, total: 40 << 10, h2: true, want: http.StatusOK},
		{name: "h2 grpc trickle", path: "/grpc/up", ctype: "application/grpc", lead: 9000, chunk: 1, total: 9040, h2: true, want: http.StatusOK},
		{name: "h2 not grpc trickle", path: "/grpc/up", ctype: "application/octet-stream", lead: 9000, chunk: 1, total: 100000, h2: true, want: http.StatusRequestTimeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stop := make(chan struct{})
			defer close(stop)
			var status int
			var body string
			if tc.h2 {
				pr, pw := io.Pipe()
				req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, e.url("public", tc.path), pr)
				if err != nil {
					t.Fatal(err)
				}
				req.ContentLength = int64(tc.total)
				if tc.ctype != "" {
					req.Header.Set("Content-Type", tc.ctype)
				}
				go trickle(pw, tc.lead, tc.chunk, 50*time.Millisecond, tc.total, stop)
				resp, err := tr.RoundTrip(req)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				status, body = resp.StatusCode, string(b)
			} else {
				c := rawConn(t, e.addr("public"))
				if _, err := fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: test\r\nContent-Length: %d\r\n\r\n", tc.path, tc.total); err != nil {
					t.Fatal(err)
				}
				go trickle(nopCloser{c}, tc.lead, tc.chunk, 50*time.Millisecond, tc.total, stop)
				resp, err := http.ReadResponse(bufio.NewReader(c), nil)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				status, body = resp.StatusCode, string(b)
			}
			if status != tc.want {
				t.Fatalf("answered %d %q, want %d", status, body, tc.want)
			}
			got := recv(t, reads, "the origin's read of the body")
			switch {
			case tc.want == http.StatusOK && (got.err != nil || got.n != int64(tc.total) || body != "got "+strconv.Itoa(tc.total)):
				t.Fatalf("the origin read %d bytes (%v) and answered %q; want the %d bytes whole", got.n, got.err, body, tc.total)
			case tc.want != http.StatusOK && got.err == nil:
				t.Fatalf("the origin read a whole body of %d bytes from a client cut off", got.n)
			}
		})
	}
}

// nopCloser keeps trickle from closing a connection the test reads.
type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

// TestBidiPause: once the upstream's response has begun, the rest of the
// request body is the upstream's to wait for. A bidirectional stream
// (echoing lines, as gRPC's do messages) idles three times
// timeouts.header between two messages and goes on, from an h2c and an
// HTTP/1.1 client to an HTTP/2 upstream.
func TestBidiPause(t *testing.T) {
	t.Parallel()
	origin := proxytest.H2CServer(t, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		br := bufio.NewReader(r.Body)
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				return
			}
			io.WriteString(w, line)
			w.(http.Flusher).Flush()
		}
	}))
	e := startEbb(t, oneClusterYAML(origin, []string{"timeouts: { header: 200ms }"}, []string{"protocol: h2c", "retries: { buffer_body: 0 }"}))
	pause := func() {
		t.Helper()
		p := time.NewTimer(600 * time.Millisecond)
		<-p.C
	}
	t.Run("h2", func(t *testing.T) {
		pr, pw := io.Pipe()
		defer pw.Close()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, e.url("public", "/bidi"), pr)
		if err != nil {
			t.Fatal(err)
		}
		go io.WriteString(pw, "one\n")
		resp, err := h2cTransport(t).RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		br := bufio.NewReader(resp.Body)
		for i, msg := range []string{"one\n", "two\n"} {
			if i > 0 {
				pause()
				go io.WriteString(pw, msg)
			}
			if got, err := br.ReadString('\n'); got != msg {
				t.Fatalf("message %d: got %q (%v), want %q", i, got, err, msg)
			}
		}
	})
	t.Run("http1", func(t *testing.T) {
		c := rawConn(t, e.addr("public"))
		if _, err := io.WriteString(c, "POST /bidi HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: chunked\r\n\r\n4\r\none\n\r\n"); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("answered %d", resp.StatusCode)
		}
		br := bufio.NewReader(resp.Body)
		for i, msg := range []string{"one\n", "two\n"} {
			if i > 0 {
				pause()
				if _, err := io.WriteString(c, "4\r\n"+msg+"\r\n"); err != nil {
					t.Fatal(err)
				}
			}
			if got, err := br.ReadString('\n'); got != msg {
				t.Fatalf("message %d: got %q (%v), want %q", i, got, err, msg)
			}
		}
	})
}
