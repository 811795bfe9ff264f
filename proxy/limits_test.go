package proxy

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"testing"
	"time"
)

// TestMaxInFlight holds requests at the origin until as many are in
// flight as the limit allows, from an HTTP/1.1 and an h2c client, for the
// listener's limits.max_in_flight and the cluster's max_in_flight: the
// next request gets 503 with Retry-After at once, without reaching the
// origin, and once the held ones are answered requests pass again.
func TestMaxInFlight(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name              string
		listener, cluster []string
		msg               string
	}{
		{"listener", []string{"limits: { max_in_flight: 2 }"}, nil, "ebb: too many requests in flight, retry later\n"},
		{"cluster", nil, []string{"max_in_flight: 2"}, "ebb: too many requests in flight to this service, retry later\n"},
	} {
		for _, h2 := range []bool{false, true} {
			name := tc.name + "/http1"
			if h2 {
				name = tc.name + "/h2c"
			}
			t.Run(name, func(t *testing.T) {
				arrived := make(chan string, 3)
				release := make(chan struct{})
				origin := newOrigin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					arrived <- r.URL.Path
					if r.URL.Path == "/hold" {
						<-release
					}
					io.WriteString(w, "ok")
				}))
				e := startEbb(t, oneClusterYAML(hostPort(origin), tc.listener, tc.cluster))
				client := newClient(t)
				if h2 {
					client = &http.Client{Transport: h2cTransport(t)}
				}
				held := make(chan int, 2)
				for range 2 {
					go func() {
						code, _, _ := do(t, client, mustRequest(t, http.MethodGet, e.url("public", "/hold")))
						held <- code
					}()
				}
				for range 2 {
					recv(t, arrived, "a held request at the origin")
				}
				code, body, resp := do(t, client, mustRequest(t, http.MethodGet, e.url("public", "/over")))
				if code != http.StatusServiceUnavailable || string(body) != tc.msg || resp.Header.Get("Retry-After") != "1" {
					t.Fatalf("over the limit: %d %q Retry-After %q, want 503 %q Retry-After 1", code, body, resp.Header.Get("Retry-After"), tc.msg)
				}
				close(release)
				for range 2 {
					if code := recv(t, held, "a held request's answer"); code != http.StatusOK {
						t.Fatalf("a held request was answered %d", code)
					}
				}
				if code, body, _ := do(t, client, mustRequest(t, http.MethodGet, e.url("public", "/after"))); code != http.StatusOK || string(body) != "ok" {
					t.Fatalf("after: %d %q, want 200", code, body)
				}
				// The refused request never arrived; the one after did.
				if p := recv(t, arrived, "the request after at the origin"); p != "/after" {
					t.Fatalf("the origin got %s, want /after", p)
				}
			})
		}
	}
}

// TestMaxConnections opens limits.max_connections connections, each
// served: a connection more completes its handshake (the kernel's accept
// queue) but is not accepted, so its request is not answered, until one of
// the others closes; then it is served. The loop's slots come back as
// connections close, whichever side closes them.
func TestMaxConnections(t *testing.T) {
	t.Parallel()
	origin := newOrigin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	e := startEbb(t, oneClusterYAML(hostPort(origin), []string{"limits: { max_connections: 2 }"}, nil))
	const req = "GET / HTTP/1.1\r\nHost: test\r\n\r\n"
	served := func(c net.Conn, br *bufio.Reader) {
		t.Helper()
		if _, err := io.WriteString(c, req); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK || string(body) != "ok" {
			t.Fatalf("answered %d %q", resp.StatusCode, body)
		}
	}
	for round := range 3 {
		a, b := rawConn(t, e.addr("public")), rawConn(t, e.addr("public"))
		served(a, bufio.NewReader(a))
		served(b, bufio.NewReader(b))
		extra := rawConn(t, e.addr("public"))
		if _, err := io.WriteString(extra, req); err != nil {
			t.Fatal(err)
		}
		xr := bufio.NewReader(extra)
		extra.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		if _, err := xr.Peek(1); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("round %d: a connection over the cap was answered (%v)", round, err)
		}
		extra.SetReadDeadline(time.Time{})
		a.Close()
		resp, err := http.ReadResponse(xr, nil)
		if err != nil {
			t.Fatalf("round %d: once a connection closed: %v", round, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("round %d: once a connection closed: %d", round, resp.StatusCode)
		}
		b.Close()
		extra.Close()
	}
}

// TestConnectionSlotsReturn: every way a connection ends gives its slot
// back, so that max_connections never fills with connections long gone:
// a client that closes after a request (HTTP/1.1, h2c), one ebb closes
// (Connection: close, bytes that are no protocol it speaks, a malformed
// request), and one that leaves before sending anything.
func TestConnectionSlotsReturn(t *testing.T) {
	t.Parallel()
	origin := newOrigin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	e := startEbb(t, oneClusterYAML(hostPort(origin), []string{"limits: { max_connections: 3 }", "timeouts: { header: 500ms }"}, nil))
	loop := e.px.listeners[0].loop
	addr := e.addr("public")
	for range 5 {
		tr := h2cTransport(t)
		if code, _, _ := do(t, &http.Client{Transport: tr}, mustRequest(t, http.MethodGet, e.url("public", "/h2"))); code != http.StatusOK {
			t.Fatalf("h2c: %d", code)
		}
		tr.CloseIdleConnections()
		for _, raw := range []string{
			"GET / HTTP/1.1\r\nHost: test\r\n\r\n",
			"GET / HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n",
			"\x16\x03\x01\x00\x05hello", // a TLS record on a cleartext port: closed after timeouts.header
			"GET / HTTP/1.1\r\nHost: test\r\nContent-Length: x\r\n\r\n",
			"",
		} {
			c := rawConn(t, addr)
			if raw != "" {
				if _, err := io.WriteString(c, raw); err != nil {
					t.Fatal(err)
				}
				c.SetReadDeadline(time.Now().Add(5 * time.Second))
				_, _ = bufio.NewReader(c).ReadString('\n') // an answer, or the close
			}
			c.Close()
		}
	}
	// The last connections may still be closing on ebb's side. The loop
	// holds one slot for the connection it waits to accept.
	deadline := time.NewTimer(5 * time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for len(loop.slots) != 1 {
		select {
		case <-deadline.C:
			t.Fatalf("%d slots taken after every connection closed, want 1 (the next accept's)", len(loop.slots))
		case <-tick.C:
		}
	}
}
