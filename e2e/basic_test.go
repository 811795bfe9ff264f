package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/ebb-proxy/ebb/proxy/proxytest"
)

// What the behaviour tests share with the proxy package's: configurations,
// an address on which nothing listens.
var (
	singleClusterYAML = proxytest.SingleClusterYAML
	oneClusterYAML    = proxytest.OneClusterYAML
	closedPort        = proxytest.ClosedPort
)

// TestGetAndPost sends GET and POST requests through the ebb binary with
// curl, and checks status and body byte for byte. Bodies cover empty,
// small (prefetched whole by ebb), larger than the 8 KiB prefetch and
// larger than the 64 KiB response buffering threshold, sent with
// Content-Length and chunked. (The same exchanges with Go's clients, in
// every client × upstream mode, are proxy's TestMatrixExchanges.)
func TestGetAndPost(t *testing.T) {
	t.Parallel()
	origin := newOrigin(t, proxytest.ExchangeOrigin())
	e := startEbb(t, singleClusterYAML(hostPort(origin)))

	type exchange struct {
		name       string
		method     string
		path       string
		body       []byte
		chunked    bool
		wantStatus int
		wantBody   []byte
		wantLength string // X-Request-Length the origin reports, for POST
	}
	big := randBytes(1, 100<<10)
	mid := randBytes(2, 20<<10)
	cases := []exchange{
		{name: "get", method: "GET", path: "/hello", wantStatus: 200, wantBody: []byte("hello, world\n")},
		{name: "status passes through", method: "GET", path: "/teapot", wantStatus: 418, wantBody: []byte("short and stout\n")},
		{name: "request URI kept as sent", method: "GET", path: "/uri/a%2Fb/./c?x=1&y=%20two", wantStatus: 200, wantBody: []byte("/uri/a%2Fb/./c?x=1&y=%20two")},
		{name: "post small", method: "POST", path: "/echo", body: []byte("ping"), wantStatus: 201, wantBody: []byte("ping"), wantLength: "4"},
		{name: "post empty", method: "POST", path: "/echo", body: []byte{}, wantStatus: 201, wantBody: []byte{}, wantLength: "0"},
		{name: "post 20KiB", method: "POST", path: "/echo", body: mid, wantStatus: 201, wantBody: mid, wantLength: "20480"},
		{name: "post 100KiB", method: "POST", path: "/echo", body: big, wantStatus: 201, wantBody: big, wantLength: "102400"},
		{name: "post small chunked", method: "POST", path: "/echo", body: []byte("ping"), chunked: true, wantStatus: 201, wantBody: []byte("ping"), wantLength: "-1"},
		{name: "post 100KiB chunked", method: "POST", path: "/echo", body: big, chunked: true, wantStatus: 201, wantBody: big, wantLength: "-1"},
	}

	t.Run("curl", func(t *testing.T) {
		dir := t.TempDir()
		for i, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				args := []string{"-X", tc.method}
				if tc.method == "POST" {
					f := filepath.Join(dir, fmt.Sprintf("body-%d", i))
					if err := os.WriteFile(f, tc.body, 0o644); err != nil {
						t.Fatal(err)
					}
					args = append(args, "-H", "Content-Type: application/x-test", "--data-binary", "@"+f)
					if tc.chunked {
						args = append(args, "-H", "Transfer-Encoding: chunked")
					}
				}
				hdrs := filepath.Join(dir, fmt.Sprintf("headers-%d", i))
				args = append(args, "-D", hdrs, "--path-as-is", e.url("public", tc.path))
				r := runCurl(t, args...)
				if r.status != tc.wantStatus {
					t.Fatalf("status %d, want %d (body %q)", r.status, tc.wantStatus, r.body)
				}
				if !bytes.Equal(r.body, tc.wantBody) {
					t.Fatalf("body differs: got %d bytes, want %d", len(r.body), len(tc.wantBody))
				}
				if tc.method != "POST" {
					return
				}
				h, err := os.ReadFile(hdrs)
				if err != nil {
					t.Fatal(err)
				}
				resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(h)), nil)
				if err != nil {
					t.Fatalf("curl's -D headers: %v\n%s", err, h)
				}
				if l := resp.Header.Get("X-Request-Length"); l != tc.wantLength {
					t.Errorf("origin saw Content-Length %s, want %s", l, tc.wantLength)
				}
			})
		}
	})
}

// TestPipelining sends three requests in one write on one connection: the
// responses come back in order, each exact.
func TestPipelining(t *testing.T) {
	t.Parallel()
	origin := newOrigin(t, proxytest.ExchangeOrigin())
	e := startEbb(t, singleClusterYAML(hostPort(origin)))
	c := rawConn(t, e.addr("public"))
	io.WriteString(c, "GET /hello HTTP/1.1\r\nHost: app\r\n\r\n"+
		"POST /echo HTTP/1.1\r\nHost: app\r\nContent-Type: text/x-a\r\nContent-Length: 5\r\n\r\nhello"+
		"GET /uri/third?q=3 HTTP/1.1\r\nHost: app\r\n\r\n")
	br := bufio.NewReader(c)
	for i, want := range []struct {
		status int
		body   string
	}{{200, "hello, world\n"}, {201, "hello"}, {200, "/uri/third?q=3"}} {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("response %d: %v", i, err)
		}
		body, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != want.status || string(body) != want.body {
			t.Fatalf("response %d: %d %q %v; want %d %q", i, resp.StatusCode, body, err, want.status, want.body)
		}
	}
}

// TestClientAbortsDownload has the client go away in the middle of a large
// streamed response: ebb must close the upstream connection (the origin's
// request ends) rather than leave the origin writing or pool a connection
// in the middle of a body; the next request works.
func TestClientAbortsDownload(t *testing.T) {
	t.Parallel()
	ended := make(chan error, 1)
	origin := newOrigin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/endless" {
			io.WriteString(w, "next")
			return
		}
		chunk := make([]byte, 64<<10)
		for {
			if _, err := w.Write(chunk); err != nil {
				ended <- err
				return
			}
			select {
			case <-r.Context().Done():
				ended <- r.Context().Err()
				return
			default:
			}
		}
	}))
	e := startEbb(t, singleClusterYAML(hostPort(origin)))
	client := newClient(t)
	resp, err := client.Get(e.url("public", "/endless"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(resp.Body, make([]byte, 1<<20)); err != nil {
		t.Fatalf("reading the first MiB: %v", err)
	}
	resp.Body.Close() // closes the connection: the body is unfinished
	if err := recv(t, ended, "the origin to see the upstream connection end"); err == nil {
		t.Fatal("origin handler ended without an error")
	}
	if status, body, _ := get(t, client, e.url("public", "/next")); status != 200 || string(body) != "next" {
		t.Fatalf("next request: %d %q", status, body)
	}
}
