package proxy

import (
	"bufio"
	"io"
	"net"
	"testing"
	"time"

	"github.com/ebb-proxy/ebb/discovery"
)

// refusedAddr returns a loopback address whose connects are refused.
func refusedAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// TestRetryOnConnectFailure: a POST whose first endpoint refuses the
// connection goes to the other endpoint (it was never sent); with
// retries.attempts 1 the first one gets the 502 and the endpoint is
// ejected.
func TestRetryOnConnectFailure(t *testing.T) {
	origin := tcpOrigin(t, func(c net.Conn, br *bufio.Reader) {
		for readHeader(br) {
			io.CopyN(io.Discard, br, 4) // the body
			if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"); err != nil {
				return
			}
		}
	})
	dead := refusedAddr(t)
	for _, attempts := range []int{1, 2} {
		l := benchProxy(t, origin)
		c := l.p.snap.Load().tables[0].routes[0].cluster
		c.cfg.Retries.Attempts = attempts
		// Round robin with the dead endpoint first: every request tries it.
		c.p2c = false
		c.setEndpoints(discovery.Set{Endpoints: []discovery.Endpoint{{Address: dead}, {Address: origin}}})
		for i := range 4 {
			c.rr.Store(0)
			ctx := serve(l, "POST", []byte("body"))
			// Without retries the first request gets the 502; the failed
			// connect ejects the endpoint, and the next requests go to the
			// other one.
			want := 200
			if attempts == 1 && i == 0 {
				want = 502
			}
			if got := ctx.Response.StatusCode(); got != want {
				t.Fatalf("attempts %d, request %d: status %d, want %d", attempts, i, got, want)
			}
		}
	}
}

// TestRetryBudget: retries are allowed up to the budget's fraction of the
// window's requests plus the floor, and the window rolls over.
func TestRetryBudget(t *testing.T) {
	b := retryBudget{ratio: 0.2}
	now := time.Now()
	for range 100 {
		b.request(now)
	}
	allowed := 0
	for range 100 {
		if b.allow() {
			allowed++
		}
	}
	if want := 100*2/10 + retryFloor; allowed != want {
		t.Fatalf("%d retries allowed after 100 requests, want %d", allowed, want)
	}
	b.request(now.Add(retryWindow + time.Second)) // a new window
	allowed = 0
	for range 100 {
		if b.allow() {
			allowed++
		}
	}
	if allowed != retryFloor {
		t.Fatalf("%d retries allowed in a new window with 1 request, want the floor %d", allowed, retryFloor)
	}
}
