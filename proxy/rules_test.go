package proxy

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync/atomic"
	"testing"
)

// headersOrigin answers every request with the request's headers as JSON
// (Host included, under "Host"), and sets response headers that are
// hop-by-hop (Connection naming X-Internal, X-Internal, Keep-Alive,
// Upgrade) next to an ordinary one (X-Ordinary-Response).
func headersOrigin() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := r.Header.Clone()
		h.Set("Host", r.Host)
		w.Header().Set("Connection", "X-Internal")
		w.Header().Set("X-Internal", "secret")
		w.Header().Set("Keep-Alive", "timeout=5")
		w.Header().Set("Upgrade", "foo/2")
		w.Header().Set("X-Ordinary-Response", "kept")
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(h)
	})
}

// hopRequest carries every kind of request hop-by-hop header: Connection
// and the header it names, Keep-Alive, Proxy-Connection, TE and Upgrade
// (not a real upgrade: Connection does not name it). Trailer is not
// hop-by-hop (RFC 9110 §6.6.2 lists the message's own trailer fields);
// TestMatrixTrailers covers it.
const hopRequest = "GET /headers HTTP/1.1\r\n" +
	"Host: app.example\r\n" +
	"Connection: keep-alive, X-Secret\r\n" +
	"X-Secret: 1\r\n" +
	"Keep-Alive: timeout=5\r\n" +
	"Proxy-Connection: keep-alive\r\n" +
	"TE: trailers\r\n" +
	"Upgrade: h2c\r\n" +
	"X-Ordinary: kept\r\n" +
	"\r\n"

var (
	hopRequestHeaders  = []string{"Connection", "X-Secret", "Keep-Alive", "Proxy-Connection", "Te", "Upgrade"}
	hopResponseHeaders = []string{"Connection", "X-Internal", "Keep-Alive", "Upgrade"}
)

// TestHopByHopHeaders sends hop-by-hop request headers and has the origin
// set hop-by-hop response headers; none may cross ebb either way, while
// ordinary headers do. A control exchange straight with the origin shows
// that each header would be seen if it were forwarded.
func TestHopByHopHeaders(t *testing.T) {
	t.Parallel()
	origin := newOrigin(t, headersOrigin())
	e := startEbb(t, singleClusterYAML(hostPort(origin)))

	exchange := func(t *testing.T, addr string) (http.Header, *http.Response) {
		resp, body := rawExchange(t, addr, hopRequest)
		if resp.StatusCode != 200 {
			t.Fatalf("status %d, body %q", resp.StatusCode, body)
		}
		var atOrigin http.Header
		if err := json.Unmarshal(body, &atOrigin); err != nil {
			t.Fatalf("origin's answer %q: %v", body, err)
		}
		return atOrigin, resp
	}

	// Control: straight to the origin, every header is seen both ways.
	direct, directResp := exchange(t, hostPort(origin))
	for _, h := range append(hopRequestHeaders, "X-Ordinary") {
		if _, ok := direct[h]; !ok {
			t.Fatalf("control: the origin does not see request header %s even when sent straight to it; the test cannot check it", h)
		}
	}
	for _, h := range append(hopResponseHeaders, "X-Ordinary-Response") {
		if _, ok := directResp.Header[h]; !ok {
			t.Fatalf("control: the origin's response header %s does not reach a client straight from it; the test cannot check it", h)
		}
	}

	atOrigin, resp := exchange(t, e.addr("public"))
	t.Run("request", func(t *testing.T) {
		for _, h := range hopRequestHeaders {
			if v, ok := atOrigin[h]; ok {
				t.Errorf("hop-by-hop request header %s: %q reached the origin", h, v)
			}
		}
		if got := atOrigin.Get("X-Ordinary"); got != "kept" {
			t.Errorf("X-Ordinary at the origin: %q, want \"kept\"", got)
		}
	})
	t.Run("response", func(t *testing.T) {
		for _, h := range hopResponseHeaders {
			if v, ok := resp.Header[h]; ok {
				t.Errorf("hop-by-hop response header %s: %q reached the client", h, v)
			}
		}
		if got := resp.Header.Get("X-Ordinary-Response"); got != "kept" {
			t.Errorf("X-Ordinary-Response at the client: %q, want \"kept\"", got)
		}
	})
}

// TestForwardedHeaders checks X-Forwarded-For (replaced, or appended to
// from a trusted proxy), -Proto and -Host (set, or kept from a trusted
// proxy: trusted_proxies, or trust_forwarded) and X-Real-IP (dropped, or
// kept from a trusted proxy) as the origin sees them.
func TestForwardedHeaders(t *testing.T) {
	t.Parallel()
	origin := newOrigin(t, headersOrigin())
	e := startEbb(t, fmt.Sprintf(`
admin: { address: 127.0.0.1:0 }
listeners:
  - name: public
    address: 127.0.0.1:0
    routes: [{ cluster: app }]
  - name: behind-waf
    address: 127.0.0.1:0
    headers: { trust_forwarded: true }
    routes: [{ cluster: app }]
  - name: trusts-loopback
    address: 127.0.0.1:0
    headers: { trusted_proxies: ["192.0.2.7", "127.0.0.0/8"] }
    routes: [{ cluster: app }]
  - name: trusts-others
    address: 127.0.0.1:0
    headers: { trusted_proxies: ["192.0.2.0/24", "::1"] }
    routes: [{ cluster: app }]
clusters:
  - name: app
    discovery: { static: [%q] }
`, hostPort(origin)))
	client := newClient(t)

	cases := []struct {
		name               string
		listener           string
		host               string
		sent               map[string]string
		wantFor, wantProto string
		wantHost           string
		wantRealIP         string // "" for none
	}{
		{
			name: "none sent", listener: "public", host: "app.example",
			wantFor: "127.0.0.1", wantProto: "http", wantHost: "app.example",
		},
		{
			name: "host with port", listener: "public", host: "App.Example:8443",
			wantFor: "127.0.0.1", wantProto: "http", wantHost: "App.Example:8443",
		},
		{
			name: "untrusted values replaced", listener: "public", host: "app.example",
			sent:    map[string]string{"X-Forwarded-For": "203.0.113.7, 198.51.100.1", "X-Forwarded-Proto": "https", "X-Forwarded-Host": "evil.example", "X-Real-IP": "203.0.113.7"},
			wantFor: "127.0.0.1", wantProto: "http", wantHost: "app.example",
		},
		{
			name: "peer in trusted_proxies", listener: "trusts-loopback", host: "app.example",
			sent:    map[string]string{"X-Forwarded-For": "203.0.113.7", "X-Forwarded-Proto": "https", "X-Forwarded-Host": "www.example", "X-Real-IP": "203.0.113.7"},
			wantFor: "203.0.113.7, 127.0.0.1", wantProto: "https", wantHost: "www.example", wantRealIP: "203.0.113.7",
		},
		{
			name: "peer not in trusted_proxies", listener: "trusts-others", host: "app.example",
			sent:    map[string]string{"X-Forwarded-For": "203.0.113.7", "X-Forwarded-Proto": "https", "X-Forwarded-Host": "www.example", "X-Real-IP": "203.0.113.7"},
			wantFor: "127.0.0.1", wantProto: "http", wantHost: "app.example",
		},
		{
			name: "trusted values kept", listener: "behind-waf", host: "app.example",
			sent:    map[string]string{"X-Forwarded-For": "203.0.113.7", "X-Forwarded-Proto": "https", "X-Forwarded-Host": "www.example"},
			wantFor: "203.0.113.7, 127.0.0.1", wantProto: "https", wantHost: "www.example",
		},
		{
			name: "trusted listener fills in what is missing", listener: "behind-waf", host: "app.example",
			wantFor: "127.0.0.1", wantProto: "http", wantHost: "app.example",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodGet, e.url(tc.listener, "/"), nil)
			req.Host = tc.host
			for k, v := range tc.sent {
				req.Header.Set(k, v)
			}
			status, body, _ := do(t, client, req)
			if status != 200 {
				t.Fatalf("status %d, body %q", status, body)
			}
			var h http.Header
			if err := json.Unmarshal(body, &h); err != nil {
				t.Fatal(err)
			}
			for _, c := range []struct{ name, want string }{
				{"X-Forwarded-For", tc.wantFor},
				{"X-Forwarded-Proto", tc.wantProto},
				{"X-Forwarded-Host", tc.wantHost},
			} {
				if got := h.Values(c.name); len(got) != 1 || got[0] != c.want {
					t.Errorf("%s at the origin: %q, want exactly [%q]", c.name, got, c.want)
				}
			}
			if got := strings.Join(h.Values("X-Real-Ip"), ","); got != tc.wantRealIP {
				t.Errorf("X-Real-IP at the origin: %q, want %q", got, tc.wantRealIP)
			}
			// Host names are case-insensitive: ebb (fasthttp) forwards Host
			// in lower case, which is fine.
			if got := h.Values("Host"); len(got) != 1 || !strings.EqualFold(got[0], tc.host) {
				t.Errorf("Host at the origin: %q, want [%q] in any case", got, tc.host)
			}
		})
	}
}

// TestUpstreamConnectionClose has the origin answer with Connection: close.
// ebb honours it on its upstream connection (a new one for each such
// request) but must keep the client's connection open: the client's next
// requests reuse it and succeed.
func TestUpstreamConnectionClose(t *testing.T) {
	t.Parallel()
	var upstreamConns atomic.Int64
	origin := newUnstartedOrigin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/close" {
			w.Header().Set("Connection", "close")
		}
		io.WriteString(w, "answer to "+r.URL.Path+"\n")
	}))
	origin.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			upstreamConns.Add(1)
		}
	}
	origin.Start()
	e := startEbb(t, singleClusterYAML(hostPort(origin)))
	client := newClient(t)

	var firstConn string
	for i, path := range []string{"/close", "/close", "/keep", "/close", "/keep"} {
		var info httptrace.GotConnInfo
		trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { info = i }}
		req, _ := http.NewRequest(http.MethodGet, e.url("public", path), nil)
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), trace))
		status, body, resp := do(t, client, req)
		if status != 200 || string(body) != "answer to "+path+"\n" {
			t.Fatalf("request %d (%s): status %d, body %q", i, path, status, body)
		}
		if resp.Close || resp.Header.Get("Connection") != "" {
			t.Errorf("request %d (%s): the response closes the client connection (Connection: %q)", i, path, resp.Header.Get("Connection"))
		}
		local := info.Conn.LocalAddr().String()
		if i == 0 {
			firstConn = local
			continue
		}
		if !info.Reused || local != firstConn {
			t.Errorf("request %d (%s): connection %s reused=%v, want the first connection %s reused", i, path, local, info.Reused, firstConn)
		}
	}
	// Each Connection: close answer ends its upstream connection:
	// /close, /close, /keep, /close, /keep run on upstream connections
	// 1, 2, 3, 3 (closed after it), 4.
	if got := upstreamConns.Load(); got != 4 {
		t.Errorf("ebb opened %d upstream connections, want 4 (one per Connection: close answer, plus one)", got)
	}
}

// TestAbsoluteFormRequest sends a request in absolute form (as to a
// forward proxy): the URI's host is the one that counts.
func TestAbsoluteFormRequest(t *testing.T) {
	t.Parallel()
	origin := newOrigin(t, headersOrigin())
	e := startEbb(t, singleClusterYAML(hostPort(origin)))
	resp, body := rawExchange(t, e.addr("public"), "GET http://uri.example/x HTTP/1.1\r\nHost: header.example\r\n\r\n")
	if resp.StatusCode != 200 {
		t.Fatalf("status %d, body %q", resp.StatusCode, body)
	}
	var h http.Header
	if err := json.Unmarshal(body, &h); err != nil {
		t.Fatal(err)
	}
	if got := h.Get("Host"); !strings.EqualFold(got, "uri.example") {
		t.Errorf("Host at the origin %q, want uri.example", got)
	}
}

// TestNoHeadersAdded checks that the upstream's Server, Date and
// Content-Type pass through as they are, absent ones included: ebb adds
// none of its own, to proxied responses or to the ones it makes.
func TestNoHeadersAdded(t *testing.T) {
	t.Parallel()
	origin := newOrigin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/bare":
			// Go's server would add Date and sniff a Content-Type.
			w.Header()["Date"] = nil
			w.Header()["Content-Type"] = nil
		case "/dressed":
			w.Header().Set("Server", "origin/1.0")
			w.Header().Set("Date", "Tue, 01 Dec 2026 10:00:00 GMT")
			w.Header().Set("Content-Type", "text/x-origin")
		}
		io.WriteString(w, "body")
	}))
	e := startEbb(t, fmt.Sprintf(`
admin: { address: 127.0.0.1:0 }
listeners:
  - name: public
    address: 127.0.0.1:0
    limits: { max_header_bytes: 1KiB }
    routes:
      - { match: { path_prefix: "/bare" }, cluster: app }
      - { match: { path_prefix: "/dressed" }, cluster: app }
clusters:
  - name: app
    discovery: { static: [%q] }
`, hostPort(origin)))
	cases := []struct {
		path   string
		status int
		want   map[string]string // "" means absent
	}{
		{"/bare", 200, map[string]string{"Server": "", "Date": "", "Content-Type": ""}},
		{"/dressed", 200, map[string]string{"Server": "origin/1.0", "Date": "Tue, 01 Dec 2026 10:00:00 GMT", "Content-Type": "text/x-origin"}},
	}
	for _, tc := range cases {
		t.Run(tc.path, func(t *testing.T) {
			resp, body := rawExchange(t, e.addr("public"), "GET "+tc.path+" HTTP/1.1\r\nHost: app\r\n\r\n")
			if resp.StatusCode != tc.status || string(body) != "body" {
				t.Fatalf("status %d, body %q", resp.StatusCode, body)
			}
			for k, want := range tc.want {
				if got := resp.Header.Values(k); (want == "" && len(got) != 0) || (want != "" && (len(got) != 1 || got[0] != want)) {
					t.Errorf("%s: %q, want %q", k, got, want)
				}
			}
		})
	}
	t.Run("ebb's own answers", func(t *testing.T) {
		// ebb's own answers carry no Server header (a Date, which fasthttp
		// adds to them, is legitimate for a response ebb makes), and one of
		// them does not leak a Date into the next response on the
		// connection.
		c := rawConn(t, e.addr("public"))
		br := bufio.NewReader(c)
		for _, x := range []struct {
			path   string
			status int
			date   bool
		}{{"/x", 404, true}, {"/bare", 200, false}} {
			io.WriteString(c, "GET "+x.path+" HTTP/1.1\r\nHost: app\r\n\r\n")
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			if resp.StatusCode != x.status {
				t.Fatalf("%s: status %d, want %d", x.path, resp.StatusCode, x.status)
			}
			if v := resp.Header.Values("Server"); len(v) != 0 {
				t.Errorf("%s: Server %q, want none", x.path, v)
			}
			if !x.date && len(resp.Header.Values("Date")) != 0 {
				t.Errorf("%s: Date %q, want none (the origin sent none)", x.path, resp.Header.Values("Date"))
			}
		}
		resp, _ := rawExchange(t, e.addr("public"), "GET /x HTTP/1.1\r\nHost: app\r\nX-Pad: "+strings.Repeat("p", 2000)+"\r\n\r\n")
		if resp.StatusCode != 431 || len(resp.Header.Values("Server")) != 0 {
			t.Errorf("oversized header: status %d, Server %q; want 431 and no Server", resp.StatusCode, resp.Header.Values("Server"))
		}
	})
}

// TestConnectionCannotRemoveFraming sends a request whose Connection header
// names Content-Length, Transfer-Encoding and Host: those frame and route
// the message, and must reach the origin anyway (a request smuggling
// guard).
func TestConnectionCannotRemoveFraming(t *testing.T) {
	t.Parallel()
	origin := newOrigin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		fmt.Fprintf(w, "host=%s length=%d body=%q err=%v", r.Host, r.ContentLength, b, err)
	}))
	e := startEbb(t, singleClusterYAML(hostPort(origin)))
	for _, tc := range []struct{ name, framing, body, want string }{
		{"content-length", "Content-Length: 4\r\n", "body", `host=app.example length=4 body="body" err=<nil>`},
		{"chunked", "Transfer-Encoding: chunked\r\n", "4\r\nbody\r\n0\r\n\r\n", `host=app.example length=-1 body="body" err=<nil>`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := rawExchange(t, e.addr("public"), "POST /p HTTP/1.1\r\nHost: app.example\r\n"+
				"Connection: Content-Length, Transfer-Encoding, Host\r\n"+tc.framing+"\r\n"+tc.body)
			if resp.StatusCode != 200 || string(body) != tc.want {
				t.Fatalf("status %d, body %q; want 200 %q", resp.StatusCode, body, tc.want)
			}
		})
	}
}

// TestClientConnectionClose checks that a client's Connection: close ends
// the client's connection after the response, and only that: the upstream
// connection stays pooled and serves the next client.
func TestClientConnectionClose(t *testing.T) {
	t.Parallel()
	var upstreamConns atomic.Int64
	origin := newUnstartedOrigin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "connection header at the origin: %q", r.Header.Get("Connection"))
	}))
	origin.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			upstreamConns.Add(1)
		}
	}
	origin.Start()
	e := startEbb(t, singleClusterYAML(hostPort(origin)))
	for i := range 3 {
		c := rawConn(t, e.addr("public"))
		io.WriteString(c, "GET / HTTP/1.1\r\nHost: app\r\nConnection: close\r\n\r\n")
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || string(body) != `connection header at the origin: ""` {
			t.Fatalf("client %d: status %d, body %q", i, resp.StatusCode, body)
		}
		if !resp.Close {
			t.Errorf("client %d: the response does not say Connection: close", i)
		}
		if _, err := br.ReadByte(); err != io.EOF {
			t.Errorf("client %d: connection still open after Connection: close (read: %v)", i, err)
		}
	}
	if got := upstreamConns.Load(); got != 1 {
		t.Errorf("ebb opened %d upstream connections for 3 sequential clients, want 1 (pooled)", got)
	}
}

// TestForwardedHeadersRepeated sends the X-Forwarded-* headers on several
// lines, which HTTP allows (RFC 9110 §5.3: the lines of a list header
// combine in order). A client-supplied line must not survive next to the
// value ebb sets: from a client that is not a trusted proxy, the origin
// must see only ebb's X-Forwarded-Proto, -Host and -For (the address ebb
// saw), not a value the client wrote.
func TestForwardedHeadersRepeated(t *testing.T) {
	t.Parallel()
	origin := newOrigin(t, headersOrigin())
	e := startEbb(t, singleClusterYAML(hostPort(origin)))
	cases := []struct {
		name, headers string
		header        string
		want          string
	}{
		{"X-Forwarded-For", "X-Forwarded-For: 192.0.2.1\r\nX-Forwarded-For: 192.0.2.2\r\n", "X-Forwarded-For", "127.0.0.1"},
		{"X-Forwarded-Proto", "X-Forwarded-Proto: http\r\nX-Forwarded-Proto: https\r\n", "X-Forwarded-Proto", "http"},
		{"X-Forwarded-Host", "X-Forwarded-Host: a.example\r\nX-Forwarded-Host: evil.example\r\n", "X-Forwarded-Host", "app.example"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := rawExchange(t, e.addr("public"), "GET / HTTP/1.1\r\nHost: app.example\r\n"+tc.headers+"\r\n")
			if resp.StatusCode != 200 {
				t.Fatalf("status %d", resp.StatusCode)
			}
			var h http.Header
			if err := json.Unmarshal(body, &h); err != nil {
				t.Fatal(err)
			}
			// Combined as RFC 9110 §5.3 says a recipient may.
			if got := strings.Join(h.Values(tc.header), ", "); got != tc.want {
				t.Errorf("%s at the origin: %q (lines %q), want %q", tc.header, got, h.Values(tc.header), tc.want)
			}
		})
	}
}

// TestConnectionOnSeveralLines sends a Connection header split over two
// lines, in the request and in the origin's response. The lines form one
// list (RFC 9110 §5.3), and every header any of them names is hop-by-hop
// (§7.6.1): it must not cross ebb.
func TestConnectionOnSeveralLines(t *testing.T) {
	t.Parallel()
	origin := newOrigin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header()["Connection"] = []string{"keep-alive", "X-Internal"}
		w.Header().Set("X-Internal", "secret")
		json.NewEncoder(w).Encode(r.Header)
	}))
	e := startEbb(t, singleClusterYAML(hostPort(origin)))
	const request = "GET / HTTP/1.1\r\nHost: app\r\nConnection: keep-alive\r\nConnection: X-Secret\r\nX-Secret: 1\r\n\r\n"

	// Control: straight to the origin, both headers are there.
	resp, body := rawExchange(t, hostPort(origin), request)
	if !strings.Contains(string(body), `"X-Secret":["1"]`) || resp.Header.Get("X-Internal") != "secret" {
		t.Fatalf("control: the origin saw %s and answered %v; the test cannot check anything", body, resp.Header)
	}

	resp, body = rawExchange(t, e.addr("public"), request)
	var atOrigin http.Header
	if err := json.Unmarshal(body, &atOrigin); err != nil {
		t.Fatalf("%q: %v", body, err)
	}
	if v, ok := atOrigin["X-Secret"]; ok {
		t.Errorf("request: X-Secret %q, named by the second Connection line, reached the origin", v)
	}
	if v, ok := resp.Header["X-Internal"]; ok {
		t.Errorf("response: X-Internal %q, named by the second Connection line, reached the client", v)
	}
}
