package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestUpstreamFailures checks the answers ebb makes when the upstream
// fails: 502 when nothing listens, 504 when the response headers take
// longer than timeouts.response (and the upstream connection is then
// closed), and that neither costs the client its connection.
func TestUpstreamFailures(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	abandoned := make(chan error, 1) // the slow handler's request context ended
	slow := newOrigin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
			io.WriteString(w, "too late\n")
		case <-r.Context().Done():
			abandoned <- r.Context().Err()
		}
	}))
	t.Cleanup(func() { close(release) }) // runs before slow.Close
	ok := newOrigin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "fine\n")
	}))
	e := startEbb(t, fmt.Sprintf(`
admin: { address: 127.0.0.1:0 }
listeners:
  - name: public
    address: 127.0.0.1:0
    routes:
      - { match: { path_prefix: "/down" }, cluster: down }
      - { match: { path_prefix: "/slow" }, cluster: slow }
      - { cluster: ok }
clusters:
  - name: down
    discovery: { static: [%q] }
  - name: slow
    discovery: { static: [%q] }
    timeouts: { response: 300ms }
  - name: ok
    discovery: { static: [%q] }
`, closedPort(t), hostPort(slow), hostPort(ok)))
	client := newClient(t)

	t.Run("connect refused is 502", func(t *testing.T) {
		status, body, resp := get(t, client, e.url("public", "/down"))
		if status != 502 || string(body) != "ebb: upstream connect failed\n" {
			t.Fatalf("status %d, body %q; want 502 \"ebb: upstream connect failed\\n\"", status, body)
		}
		if ct := resp.Header.Get("Content-Type"); ct != "text/plain; charset=utf-8" {
			t.Errorf("Content-Type %q, want text/plain; charset=utf-8", ct)
		}
	})
	t.Run("response timeout is 504", func(t *testing.T) {
		getTimedOut(t, client, e.url("public", "/slow"), 504, "ebb: upstream timed out\n", "timeouts.response")
		if err := recv(t, abandoned, "ebb to close the timed-out upstream connection"); !errors.Is(err, context.Canceled) {
			t.Errorf("the slow origin's request ended with %v, want context.Canceled (connection closed)", err)
		}
	})
	t.Run("client connection survives", func(t *testing.T) {
		// The same client connection carried the 502 and the 504.
		var reused bool
		req, _ := http.NewRequest(http.MethodGet, e.url("public", "/"), nil)
		req = withReuseTrace(req, &reused)
		status, body, _ := do(t, client, req)
		if status != 200 || string(body) != "fine\n" {
			t.Fatalf("status %d, body %q", status, body)
		}
		if !reused {
			t.Errorf("ebb closed the client connection after an upstream error")
		}
	})
	t.Run("metrics count the errors", func(t *testing.T) {
		m := scrape(t, e)
		for _, c := range []struct {
			name   string
			labels map[string]string
		}{
			{"ebb_upstream_errors_total", map[string]string{"cluster": "down", "kind": "connect"}},
			{"ebb_upstream_errors_total", map[string]string{"cluster": "slow", "kind": "timeout"}},
			{"ebb_upstream_connect_errors_total", map[string]string{"cluster": "down"}},
			{"ebb_requests_total", map[string]string{"cluster": "down", "listener": "public", "protocol": "http1", "status_class": "5xx"}},
			{"ebb_requests_total", map[string]string{"cluster": "slow", "listener": "public", "protocol": "http1", "status_class": "5xx"}},
		} {
			if v, ok := metricValue(m, c.name, c.labels); !ok || v != 1 {
				t.Errorf("%s%v = %v (present %v), want 1", c.name, c.labels, v, ok)
			}
		}
	})
	t.Run("logged as warnings", func(t *testing.T) {
		var kinds []string
		for _, rec := range e.logRecords("upstream error") {
			kinds = append(kinds, fmt.Sprint(rec["cluster"], "/", rec["kind"], "/", rec["status"], "/", rec["level"]))
		}
		want := []string{"down/connect/502/WARN", "slow/timeout/504/WARN"}
		if strings.Join(kinds, " ") != strings.Join(want, " ") {
			t.Errorf("upstream error log lines %q, want %q", kinds, want)
		}
	})
}

// withReuseTrace records in *reused whether req went out on a reused
// connection.
func withReuseTrace(req *http.Request, reused *bool) *http.Request {
	trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { *reused = i.Reused }}
	return req.WithContext(httptrace.WithClientTrace(req.Context(), trace))
}

// TestUpstreamStallMidBody has the origin send part of a body and then
// stall past timeouts.response. The response has already started, so ebb
// cannot answer 504: it must end the client's connection so that the
// truncation shows, for a body with Content-Length and for a chunked one.
func TestUpstreamStallMidBody(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	origin := newOrigin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("chunked") == "" {
			w.Header().Set("Content-Length", "200000")
		}
		w.Write(make([]byte, 100000))
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() { close(release) })
	e := startEbb(t, oneClusterYAML(hostPort(origin), nil, []string{"timeouts: { response: 300ms }"}))
	client := newClient(t)

	for _, path := range []string{"/stall", "/stall?chunked=1"} {
		t.Run(path, func(t *testing.T) {
			resp, err := client.Get(e.url("public", path))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("status %d", resp.StatusCode)
			}
			n, err := io.Copy(io.Discard, resp.Body)
			if err == nil {
				t.Fatalf("the body ended cleanly after %d bytes of 200000: the client cannot tell it was cut", n)
			}
			// The bytes ebb still held in its write buffer may be lost with
			// the connection; what matters is that the cut shows.
			if n > 100000 {
				t.Errorf("received %d bytes, more than the 100000 sent", n)
			}
		})
	}
}

// TestStaleUpstreamConnection has the origin close a keep-alive connection
// right after a complete response, with a FIN, as an upstream does when its
// keep-alive idle timeout or request limit ends a connection. The close has
// reached ebb before the client's next request does, so that request must
// not fail: a GET is sent again on a new connection (which ebb does), and a
// POST must not be put on the closed connection in the first place (which,
// as Go's Transport, nginx and HAProxy do, takes noticing the pending EOF
// of a pooled connection before reusing it).
func TestStaleUpstreamConnection(t *testing.T) {
	t.Parallel()
	var conns, requests atomic.Int64
	closed := make(chan struct{}, 1) // the origin has closed a connection
	origin := newUnstartedOrigin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		body, _ := io.ReadAll(r.Body)
		if r.URL.Path == "/then-close" {
			// A complete keep-alive response, then the connection ends.
			c, bw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				panic(err)
			}
			fmt.Fprintf(bw, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfirst")
			bw.Flush()
			c.Close()
			closed <- struct{}{}
			return
		}
		fmt.Fprintf(w, "%s %s %s", r.Method, r.URL.Path, body)
	}))
	origin.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	origin.Start()
	e := startEbb(t, singleClusterYAML(hostPort(origin)))
	client := newClient(t)

	cases := []struct {
		method string
		body   string
	}{
		{"GET", ""},
		{"POST", "payload"},
	}
	for _, tc := range cases {
		t.Run(tc.method, func(t *testing.T) {
			status, body, _ := get(t, client, e.url("public", "/then-close"))
			if status != 200 || string(body) != "first" {
				t.Fatalf("first request: status %d, body %q", status, body)
			}
			// ebb pooled the connection after a complete keep-alive
			// response; the origin's FIN followed (waited for here: on a
			// busy machine the origin's goroutine can be descheduled
			// between its response and its close).
			recv(t, closed, "the origin to close the connection")
			req, _ := http.NewRequest(tc.method, e.url("public", "/next"), strings.NewReader(tc.body))
			status, body, _ = do(t, client, req)
			want := tc.method + " /next " + tc.body
			if status != 200 || string(body) != want {
				t.Fatalf("request after the upstream closed its idle connection: status %d, body %q; want 200 %q", status, body, want)
			}
		})
	}
}

// getTimedOut GETs url with c and checks that ebb answered status and
// body once its timeout of 300ms (named by timeout) had passed, within 5s.
func getTimedOut(t *testing.T, c *http.Client, url string, status int, body, timeout string) {
	t.Helper()
	start := time.Now()
	gotStatus, gotBody, _ := get(t, c, url)
	took := time.Since(start)
	if gotStatus != status || string(gotBody) != body {
		t.Fatalf("GET %s: status %d, body %q; want %d %q", url, gotStatus, gotBody, status, body)
	}
	if took < 300*time.Millisecond || took > 5*time.Second {
		t.Errorf("the %d came after %s; %s is 300ms", status, took, timeout)
	}
}

// TestConnectionLimit checks max_conns_per_endpoint: with one connection
// allowed and busy, a second request waits timeouts.connect and gets 503.
func TestConnectionLimit(t *testing.T) {
	t.Parallel()
	origin, hold := gatedOrigin(t, "/hold", func(w http.ResponseWriter, r *http.Request, _ bool) {
		io.WriteString(w, "done "+r.URL.Path)
	})
	e := startEbb(t, oneClusterYAML(hostPort(origin), nil, []string{"max_conns_per_endpoint: 1", "timeouts: { connect: 300ms }"}))
	client := newClient(t)

	held := getHeld(t, client, e.url("public", "/hold"), 0)
	recv(t, hold.arrived, "the first request to reach the origin")

	getTimedOut(t, client, e.url("public", "/second"), 503, "ebb: upstream connection limit reached\n", "timeouts.connect")
	hold.open()
	if r := recv(t, held, "the held request"); r.err != nil || r.status != 200 || r.body != "done /hold" {
		t.Fatalf("held request: %d %q %v", r.status, r.body, r.err)
	}
	// The connection is free again.
	if status, body, _ := get(t, client, e.url("public", "/third")); status != 200 || string(body) != "done /third" {
		t.Fatalf("third request: status %d, body %q", status, body)
	}
}

// TestHTTP10Client checks that an HTTP/1.0 client is served and that the
// request goes upstream as HTTP/1.1.
func TestHTTP10Client(t *testing.T) {
	t.Parallel()
	origin := newOrigin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s %s", r.Proto, r.URL.Path)
	}))
	e := startEbb(t, singleClusterYAML(hostPort(origin)))
	c := rawConn(t, e.addr("public"))
	io.WriteString(c, "GET /old HTTP/1.0\r\nHost: app\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 || string(body) != "HTTP/1.1 /old" {
		t.Fatalf("status %d, body %q, err %v; want 200 \"HTTP/1.1 /old\"", resp.StatusCode, body, err)
	}
	// Without keep-alive, HTTP/1.0 ends with the connection.
	if _, err := br.ReadByte(); err != io.EOF {
		t.Errorf("after an HTTP/1.0 response without keep-alive the connection stays open (read: %v)", err)
	}
}

// TestEarlyUpstreamResponse has the origin answer an upload at once (401)
// without reading the body, as an authenticating or size-checking origin
// does; Go's server then closes the connection rather than read megabytes
// it does not want. The origin's answer is complete and waiting on the
// upstream connection: ebb must relay it, as a direct client gets it,
// rather than report the failed write of the rest of the body as 502.
func TestEarlyUpstreamResponse(t *testing.T) {
	t.Parallel()
	origin := newOrigin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusUnauthorized)
		io.WriteString(w, "who are you?\n")
	}))
	e := startEbb(t, singleClusterYAML(hostPort(origin)))
	for _, size := range []int64{1000, 100 << 10, 4 << 20} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			client := newClient(t)
			for _, target := range []struct{ name, url string }{
				{"direct (control)", origin.URL + "/upload"},
				{"through ebb", e.url("public", "/upload")},
			} {
				req, _ := http.NewRequest(http.MethodPost, target.url, io.NopCloser(io.LimitReader(randReader(1), size)))
				req.ContentLength = size
				status, body, _ := do(t, client, req)
				if status != 401 || string(body) != "who are you?\n" {
					t.Errorf("%s: status %d, body %q; want the origin's 401 \"who are you?\\n\"", target.name, status, body)
				}
			}
		})
	}
}
