package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
)

// TestLimits checks limits.max_header_bytes (431) and limits.max_body_bytes
// (413, with Content-Length and chunked), and that requests within the
// limits, up to exactly the limit, pass. Refused requests here are small
// enough for ebb to have read them whole when it answers; larger ones are
// TestRefusalsReachTheClient's.
func TestLimits(t *testing.T) {
	t.Parallel()
	var hits atomic.Int64
	origin := newOrigin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		b, err := io.ReadAll(r.Body)
		if err != nil {
			// Expected when ebb gives up on an oversized chunked body.
			return
		}
		w.Write(b)
	}))
	e := startEbb(t, oneClusterYAML(hostPort(origin), []string{"limits: { max_header_bytes: 2KiB, max_body_bytes: 1KiB }"}, nil))

	const tooLarge = "ebb: request body too large\n"
	cases := []struct {
		name        string
		header      int // bytes of an X-Pad header
		body        int
		chunked     bool
		wantStatus  int
		wantBody    string // "" means: the body sent
		originMiss  bool   // the origin must not be reached
		wantClosing bool   // the response must close the connection
	}{
		{name: "small header", header: 500, wantStatus: 200},
		{name: "header over max_header_bytes", header: 3000, wantStatus: 431, originMiss: true},
		{name: "body at the limit", body: 1024, wantStatus: 200},
		{name: "body at the limit chunked", body: 1024, chunked: true, wantStatus: 200},
		{name: "body one byte over", body: 1025, wantStatus: 413, wantBody: tooLarge, originMiss: true, wantClosing: true},
		{name: "body 8KiB over", body: 8 << 10, wantStatus: 413, wantBody: tooLarge, originMiss: true, wantClosing: true},
		{name: "body one byte over chunked", body: 1025, chunked: true, wantStatus: 413, wantBody: tooLarge, wantClosing: true},
		{name: "body 8KiB over chunked", body: 8 << 10, chunked: true, wantStatus: 413, wantBody: tooLarge, wantClosing: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			client := newClient(t)
			body := randBytes(4, tc.body)
			method := http.MethodGet
			var rd io.Reader
			if tc.body > 0 {
				method = http.MethodPost
				rd = bytes.NewReader(body)
			}
			req, _ := http.NewRequest(method, e.url("public", "/"), rd)
			if tc.chunked {
				req.Body = io.NopCloser(io.MultiReader(bytes.NewReader(body)))
				req.ContentLength = -1
			}
			if tc.header > 0 {
				req.Header.Set("X-Pad", strings.Repeat("p", tc.header))
			}
			before := hits.Load()
			status, got, resp := do(t, client, req)
			if status != tc.wantStatus {
				t.Fatalf("status %d, want %d (body %q)", status, tc.wantStatus, got)
			}
			want := body
			if tc.wantBody != "" {
				want = []byte(tc.wantBody)
			}
			if status != 431 && !bytes.Equal(got, want) {
				t.Fatalf("body %q (%d bytes), want %q (%d bytes)", trunc(got), len(got), trunc(want), len(want))
			}
			if tc.originMiss && hits.Load() != before {
				t.Errorf("the origin was reached; ebb must refuse the request itself")
			}
			if tc.wantClosing && !resp.Close {
				t.Errorf("the %d response keeps the connection open; the rest of the body is unread, so it must close", status)
			}
		})
	}
}

func trunc(b []byte) []byte {
	if len(b) > 40 {
		return append(b[:40:40], "..."...)
	}
	return b
}

// TestDefaultMaxHeaderBytes checks the documented default of
// limits.max_header_bytes (docs/CONFIGURATION.md: 32KiB): a request
// with 33 KiB of headers to a listener without limits gets 431, one with 31
// KiB passes.
func TestDefaultMaxHeaderBytes(t *testing.T) {
	t.Parallel()
	origin := newOrigin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}))
	e := startEbb(t, singleClusterYAML(hostPort(origin)))
	client := newClient(t)
	cases := []struct {
		pad  int
		want int
	}{
		{pad: 31 << 10, want: 200},
		{pad: 33 << 10, want: 431},
	}
	for _, tc := range cases {
		req, _ := http.NewRequest(http.MethodGet, e.url("public", "/"), nil)
		req.Header.Set("X-Pad", strings.Repeat("p", tc.pad))
		if status, _, _ := do(t, client, req); status != tc.want {
			t.Errorf("%d KiB of headers: status %d, want %d (the documented default max_header_bytes is 32KiB)", tc.pad>>10, status, tc.want)
		}
	}
}

// TestRouting checks host and path prefix routing over two clusters: the
// first matching route wins, hosts match in any case and without the port,
// *.example matches subdomains only, and a request no route matches gets
// 404 from ebb itself.
func TestRouting(t *testing.T) {
	t.Parallel()
	named := func(name string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, name+" "+r.URL.Path)
		})
	}
	a := newOrigin(t, named("A"))
	b := newOrigin(t, named("B"))
	e := startEbb(t, fmt.Sprintf(`
admin: { address: 127.0.0.1:0 }
listeners:
  - name: public
    address: 127.0.0.1:0
    routes:
      - match: { path_prefix: "/b-first/" }
        cluster: b
      - match: { host: a.example }
        cluster: a
      - match: { host: b.example, path_prefix: "/api/" }
        cluster: b
      - match: { host: "*.wild.example" }
        cluster: b
      - match: { path_prefix: "/any/" }
        cluster: a
clusters:
  - name: a
    discovery: { static: [%q] }
  - name: b
    discovery: { static: [%q] }
`, hostPort(a), hostPort(b)))
	client := newClient(t)

	const noRoute = "ebb: no route for this request\n"
	cases := []struct {
		host, path string
		status     int
		body       string
	}{
		{"a.example", "/x", 200, "A /x"},
		{"A.EXAMPLE:8080", "/x", 200, "A /x"},
		{"a.example.", "/x", 200, "A /x"},
		{"a.example", "/b-first/x", 200, "B /b-first/x"},
		{"b.example", "/api/v1", 200, "B /api/v1"},
		{"b.example", "/apix", 404, noRoute},
		{"b.example", "/any/thing", 200, "A /any/thing"},
		{"x.wild.example", "/", 200, "B /"},
		{"deep.x.wild.example", "/", 200, "B /"},
		{"wild.example", "/", 404, noRoute},
		{"notwild.example", "/", 404, noRoute},
		{"c.example", "/", 404, noRoute},
		{"c.example", "/b-first", 404, noRoute},
	}
	for _, tc := range cases {
		t.Run(tc.host+tc.path, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodGet, e.url("public", tc.path), nil)
			req.Host = tc.host
			status, body, _ := do(t, client, req)
			if status != tc.status || string(body) != tc.body {
				t.Fatalf("status %d, body %q; want %d %q", status, body, tc.status, tc.body)
			}
		})
	}
}

// TestBodyLimitAtOnce checks the documented promise that a Content-Length
// over max_body_bytes gets 413 "at once" (docs/CONFIGURATION.md): the client
// sends only the headers, and must get 413 without sending the body. With
// Expect: 100-continue, ebb must not invite the body with 100 Continue
// either: the point of the expectation is to learn of the 413 before
// sending.
func TestBodyLimitAtOnce(t *testing.T) {
	t.Parallel()
	origin := newOrigin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, "origin answered")
	}))
	e := startEbb(t, oneClusterYAML(hostPort(origin), []string{"limits: { max_body_bytes: 1KiB }", "timeouts: { header: 2s }"}, nil))
	for _, expect := range []bool{false, true} {
		name := "plain"
		head := "POST /upload HTTP/1.1\r\nHost: app\r\nContent-Length: 100000\r\n"
		if expect {
			name = "expect 100-continue"
			head += "Expect: 100-continue\r\n"
		}
		t.Run(name, func(t *testing.T) {
			c := rawConn(t, e.addr("public"))
			io.WriteString(c, head+"\r\n")
			if !expect {
				// A client without Expect sends its body right away;
				// ebb answers after its first bytes, not after 100000.
				io.WriteString(c, strings.Repeat("x", 100))
			}
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatalf("no response to the headers: %v", err)
			}
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != 413 {
				t.Fatalf("first response %d %q, want 413 before the body is read (Content-Length 100000 > max_body_bytes 1KiB)", resp.StatusCode, body)
			}
		})
	}
}

// TestRefusalsReachTheClient sends requests that ebb refuses while the
// client is still sending them: 4 MiB bodies (Content-Length and chunked)
// to a listener with max_body_bytes 1KiB, and 256 KiB of headers to one
// with max_header_bytes 32KiB, 20 times each. The client must get the 413
// or 431 every time, not a connection reset. ebb must not close the
// connection with unread data in its receive buffer (the kernel then sends
// an RST, which can destroy the answer before the client reads it, or
// fail the client's write first) but linger, reading and discarding for a
// while, as nginx (lingering_close) and Go's net/http do.
func TestRefusalsReachTheClient(t *testing.T) {
	t.Parallel()
	origin := newOrigin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, "origin answered")
	}))
	e := startEbb(t, oneClusterYAML(hostPort(origin), []string{"limits: { max_body_bytes: 1KiB }"}, nil))
	const size = 4 << 20
	cases := []struct {
		name       string
		chunked    bool
		header     int
		wantStatus int
		wantBody   string
	}{
		{name: "413 content-length", wantStatus: 413, wantBody: "ebb: request body too large\n"},
		{name: "413 chunked", chunked: true, wantStatus: 413, wantBody: "ebb: request body too large\n"},
		{name: "431", header: 256 << 10, wantStatus: 431},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			client := newClient(t)
			var failures []string
			for i := range 20 {
				var req *http.Request
				if tc.header > 0 {
					req, _ = http.NewRequest(http.MethodGet, e.url("public", "/"), nil)
					req.Header.Set("X-Pad", strings.Repeat("p", tc.header))
				} else {
					req, _ = http.NewRequest(http.MethodPost, e.url("public", "/upload"), io.NopCloser(io.LimitReader(randReader(byte(i)), size)))
					req.ContentLength = size
					if tc.chunked {
						req.ContentLength = -1
					}
				}
				resp, err := client.Do(req)
				if err != nil {
					failures = append(failures, err.Error())
					continue
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != tc.wantStatus || (tc.wantBody != "" && string(body) != tc.wantBody) {
					t.Fatalf("request %d: status %d, body %q; want %d %q", i, resp.StatusCode, body, tc.wantStatus, tc.wantBody)
				}
			}
			if len(failures) > 0 {
				t.Errorf("%d of 20 refused requests got an error instead of the %d, such as: %s", len(failures), tc.wantStatus, failures[0])
			}
		})
	}
}
