package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/ebb-proxy/ebb/config"
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

// refusingH2C is an HTTP/2 (h2c) upstream that processes nothing: it
// answers each request's HEADERS with RST_STREAM(REFUSED_STREAM), or with
// GOAWAY whose last stream is 0, and reports each request on the channel.
func refusingH2C(t *testing.T, goAway bool) (addr string, refused <-chan uint32) {
	r := make(chan uint32, 64)
	// Connections net/http opened for a request it then gave up on stay
	// open in its pool; they end with the test.
	var (
		mu    sync.Mutex
		conns []net.Conn
		ended bool
	)
	addr = tcpOrigin(t, func(c net.Conn, br *bufio.Reader) {
		mu.Lock()
		conns = append(conns, c)
		if ended {
			c.Close()
		}
		mu.Unlock()
		preface := make([]byte, len(http2.ClientPreface))
		if _, err := io.ReadFull(br, preface); err != nil || string(preface) != http2.ClientPreface {
			return
		}
		fr := http2.NewFramer(c, br)
		if fr.WriteSettings() != nil {
			return
		}
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				return
			}
			switch f := f.(type) {
			case *http2.SettingsFrame:
				if !f.IsAck() && fr.WriteSettingsAck() != nil {
					return
				}
			case *http2.PingFrame:
				if !f.IsAck() && fr.WritePing(true, f.Data) != nil {
					return
				}
			case *http2.HeadersFrame:
				select {
				case r <- f.StreamID:
				default: // the test fails on the count
				}
				if goAway {
					// As a server does once the streams it kept are done.
					fr.WriteGoAway(0, http2.ErrCodeNo, nil)
					return
				}
				fr.WriteRSTStream(f.StreamID, http2.ErrCodeRefusedStream)
			}
		}
	})
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		ended = true
		for _, c := range conns {
			c.Close()
		}
	})
	return addr, r
}

// echoH2C is an HTTP/2 (h2c) upstream that answers with the request's
// method and body.
func echoH2C(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	srv := &http.Server{Protocols: &protocols, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		io.WriteString(w, r.Method+" "+string(body))
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// TestRefusedStreamRetriedElsewhere: an HTTP/2 upstream that refuses a
// stream (REFUSED_STREAM) or goes away before it (GOAWAY with a lower last
// stream) has provably not processed it, so even a POST goes to another
// endpoint, its buffered body with it. When the refusing endpoint is the
// only one, the request is sent to it once more on a new connection, and
// then answered with 503.
func TestRefusedStreamRetriedElsewhere(t *testing.T) {
	good := echoH2C(t)
	for _, goAway := range []bool{false, true} {
		bad, refused := refusingH2C(t, goAway)
		h2c := func(c *config.Cluster) { c.Protocol = config.ProtocolH2C; c.Balancer = config.BalancerRoundRobin }
		l := clusterProxy(t, h2c, bad, good)
		for _, tc := range []struct{ method, body string }{{"POST", "pay once"}, {"POST", ""}, {"GET", ""}} {
			l.p.snap.Load().tables[0].routes[0].cluster.rr.Store(0) // the refusing endpoint first
			ctx := serveBody(l, tc.method, []byte(tc.body))
			if got, want := string(ctx.Response.Body()), tc.method+" "+tc.body; ctx.Response.StatusCode() != 200 || got != want {
				t.Fatalf("goaway %v, %s %q: %d %q, want 200 %q", goAway, tc.method, tc.body, ctx.Response.StatusCode(), got, want)
			}
			<-refused
			if tc.method == "POST" {
				select {
				case <-refused:
					t.Fatalf("goaway %v: the %s went to the refusing endpoint twice", goAway, tc.method)
				default:
				}
			}
			for len(refused) > 0 { // a GET may be sent there twice
				<-refused
			}
		}

		l = clusterProxy(t, h2c, bad)
		ctx := serveBody(l, "POST", []byte("pay once"))
		if ctx.Response.StatusCode() != http.StatusServiceUnavailable {
			t.Fatalf("goaway %v, the only endpoint refusing: %d %q, want 503", goAway, ctx.Response.StatusCode(), ctx.Response.Body())
		}
		<-refused
		<-refused // retries.attempts is 2
		select {
		case <-refused:
			t.Fatal("the request was refused a third time")
		default:
		}
		if ctx := serveBody(l, "GET", nil); ctx.Response.StatusCode() != http.StatusServiceUnavailable {
			t.Fatalf("goaway %v, GET to the only endpoint refusing: %d %q, want 503", goAway, ctx.Response.StatusCode(), ctx.Response.Body())
		}
	}
}
