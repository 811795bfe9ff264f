package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
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
	return resettingH2C(t, goAway, http2.ErrCodeRefusedStream)
}

// resettingH2C is refusingH2C resetting each stream with code.
func resettingH2C(t *testing.T, goAway bool, code http2.ErrCode) (addr string, refused <-chan uint32) {
	return h2cResetter(t, goAway, code, false)
}

// h2cResetter is resettingH2C; with atData, it resets a stream only once
// a DATA frame of its request has come, the rest of the body still to
// come.
func h2cResetter(t *testing.T, goAway bool, code http2.ErrCode, atData bool) (addr string, refused <-chan uint32) {
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
				if !atData {
					fr.WriteRSTStream(f.StreamID, code)
				}
			case *http2.DataFrame:
				if atData && len(f.Data()) > 0 {
					fr.WriteRSTStream(f.StreamID, code)
				}
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

// h2cServer serves h with net/http's HTTP/2 server, cleartext (h2c), on
// a loopback port for the test's duration; h2 (may be nil) configures it.
func h2cServer(t *testing.T, h2 *http.HTTP2Config, h http.Handler) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	srv := &http.Server{Protocols: &protocols, HTTP2: h2, Handler: h}
	var serving sync.WaitGroup
	serving.Go(func() { srv.Serve(ln) })
	t.Cleanup(func() { srv.Close(); serving.Wait() })
	return ln.Addr().String()
}

// echoH2C is an HTTP/2 (h2c) upstream that answers with the request's
// method and body.
func echoH2C(t *testing.T) string {
	return h2cServer(t, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		io.WriteString(w, r.Method+" "+string(body))
	}))
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

// TestUnansweredRetriedElsewhereIfIdempotent: an endpoint that takes a
// request on a new connection and fails it before any response byte (its
// process killed, a stream reset with INTERNAL_ERROR) may have processed
// it. A GET goes to another endpoint; a POST does not, and gets the 502.
func TestUnansweredRetriedElsewhereIfIdempotent(t *testing.T) {
	t.Run("http1", func(t *testing.T) {
		bad, got := silentOrigin(t)
		good, heads, _ := recordingOrigin(t, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		rr := func(c *config.Cluster) { c.Balancer = config.BalancerRoundRobin }
		l := clusterProxy(t, rr, bad, good)
		c := l.p.snap.Load().tables[0].routes[0].cluster
		c.rr.Store(0) // the silent endpoint first
		if ctx := serve(l, "GET", nil); ctx.Response.StatusCode() != 200 {
			t.Fatalf("GET: %d %q, want 200 from the other endpoint", ctx.Response.StatusCode(), ctx.Response.Body())
		}
		<-got
		<-heads
		c.rr.Store(0)
		if ctx := serveBody(l, "POST", []byte("pay once")); ctx.Response.StatusCode() != fasthttp.StatusBadGateway {
			t.Fatalf("POST: %d %q, want 502", ctx.Response.StatusCode(), ctx.Response.Body())
		}
		<-got
		select {
		case h := <-heads:
			t.Fatalf("the POST the first endpoint received went to the other one too:\n%s", h)
		default:
		}
	})
	t.Run("h2c", func(t *testing.T) {
		bad, reset := resettingH2C(t, false, http2.ErrCodeInternal)
		good := echoH2C(t)
		h2c := func(c *config.Cluster) { c.Protocol = config.ProtocolH2C; c.Balancer = config.BalancerRoundRobin }
		l := clusterProxy(t, h2c, bad, good)
		c := l.p.snap.Load().tables[0].routes[0].cluster
		c.rr.Store(0)
		if ctx := serve(l, "GET", nil); ctx.Response.StatusCode() != 200 || string(ctx.Response.Body()) != "GET " {
			t.Fatalf("GET: %d %q, want 200 from the other endpoint", ctx.Response.StatusCode(), ctx.Response.Body())
		}
		<-reset
		for _, body := range []string{"pay once", ""} {
			c.rr.Store(0)
			if ctx := serveBody(l, "POST", []byte(body)); ctx.Response.StatusCode() != fasthttp.StatusBadGateway {
				t.Fatalf("POST %q: %d %q, want 502", body, ctx.Response.StatusCode(), ctx.Response.Body())
			}
			<-reset
			select {
			case <-reset:
				t.Fatalf("POST %q sent to the resetting endpoint twice", body)
			default:
			}
		}
	})
}

// TestRetryAddressesNextEndpoint: a retry's request names the endpoint it
// goes to (its URL's host, what a TLS upstream's server name and a
// missing Host default to), not the one that failed.
func TestRetryAddressesNextEndpoint(t *testing.T) {
	bad, refused := refusingH2C(t, false)
	good := echoH2C(t)
	h2c := func(c *config.Cluster) { c.Protocol = config.ProtocolH2C; c.Balancer = config.BalancerRoundRobin }
	l := clusterProxy(t, h2c, bad, good)
	c := l.p.snap.Load().tables[0].routes[0].cluster
	type dial struct{ ep, host string }
	dials := make(chan dial, 8)
	for _, ep := range *c.endpoints.Load() {
		next := ep.ht.DialContext
		ep.ht.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			dials <- dial{ep.addr, addr}
			return next(ctx, network, addr)
		}
	}
	c.rr.Store(0)
	if ctx := serveBody(l, "POST", []byte("x")); ctx.Response.StatusCode() != 200 {
		t.Fatalf("POST: %d %q", ctx.Response.StatusCode(), ctx.Response.Body())
	}
	<-refused
	for range 2 {
		d := <-dials
		if d.ep != d.host {
			t.Errorf("endpoint %s dialled for a request to %s", d.ep, d.host)
		}
	}
}

// TestRequestBodyOutlivesHandler: net/http's Transport may still read a
// request body after the response arrived (full duplex). Once the
// response is done, it reads no more of it, and the next request's body,
// which may reuse the pooled reqBody, never reaches the first upstream.
func TestRequestBodyOutlivesHandler(t *testing.T) {
	proceed := make(chan struct{})
	type result struct {
		body []byte
		err  error
	}
	got := make(chan result, 1)
	// The smallest stream window (RFC 9113's initial one): most of the
	// body is still the client's when the response comes.
	origin := h2cServer(t, &http.HTTP2Config{MaxReceiveBufferPerStream: 65535},
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(200)
			w.(http.Flusher).Flush()
			<-proceed
			b, err := io.ReadAll(r.Body)
			got <- result{b, err}
		}))
	h2c := func(c *config.Cluster) { c.Protocol = config.ProtocolH2C }
	l := clusterProxy(t, h2c, origin)
	first := serveBody(l, "POST", bytes.Repeat([]byte("x"), 512<<10))
	if first.Response.StatusCode() != 200 {
		t.Fatalf("first POST: %d %q", first.Response.StatusCode(), first.Response.Body())
	}
	// Written: fasthttp closes the body stream.
	if err := first.Response.CloseBodyStream(); err != nil {
		t.Fatal(err)
	}
	other, _, _ := recordingOrigin(t, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
	if ctx := serveBody(benchProxy(t, other), "POST", bytes.Repeat([]byte("y"), 512<<10)); ctx.Response.StatusCode() != 200 {
		t.Fatalf("second POST: %d", ctx.Response.StatusCode())
	}
	close(proceed)
	r := <-got
	if r.err == nil {
		t.Fatalf("the first upstream read the whole body (%d bytes), want it cut once the response was done", len(r.body))
	}
	if n := bytes.Count(r.body, []byte("y")); n > 0 || len(r.body) >= 512<<10 {
		t.Fatalf("the first upstream read %d bytes, %d of them the second request's", len(r.body), n)
	}
}

// TestTruncatedBodyNotForwarded: a client body that ends before its
// Content-Length is a 400, and nothing of it reaches the upstream as if
// it were whole, buffered or streamed.
func TestTruncatedBodyNotForwarded(t *testing.T) {
	origin, heads, _ := recordingOrigin(t, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
	for _, buffer := range []config.Size{config.DefaultRetryBufferBody, 0} {
		l := clusterProxy(t, func(c *config.Cluster) { c.Retries.BufferBody = buffer }, origin)
		ctx := serveRequest(l, "POST", func(req *fasthttp.Request) {
			req.SetBodyStream(bytes.NewReader([]byte("0123456789")), 5000)
		})
		if ctx.Response.StatusCode() != fasthttp.StatusBadRequest {
			t.Fatalf("buffer_body %d: status %d %q, want 400", buffer, ctx.Response.StatusCode(), ctx.Response.Body())
		}
		select {
		case h := <-heads:
			t.Fatalf("buffer_body %d: the upstream answered a request with a truncated body:\n%s", buffer, h)
		default:
		}
	}
}

// TestBodilessPostShape: a POST without a body reaches each kind of
// net/http upstream as one: with Content-Length: 0 over HTTP/1.1 (an
// auto cluster whose upstream does not offer h2), not chunked; an empty
// stream over HTTP/2.
func TestBodilessPostShape(t *testing.T) {
	type seen struct {
		proto         string
		contentLength string
		chunked       bool
		body          int
	}
	got := make(chan seen, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- seen{r.Proto, r.Header.Get("Content-Length"), slices.Contains(r.TransferEncoding, "chunked"), len(b)}
	})
	h1 := httptest.NewTLSServer(h)
	t.Cleanup(h1.Close)
	h2 := httptest.NewUnstartedServer(h)
	h2.EnableHTTP2 = true
	h2.StartTLS()
	t.Cleanup(h2.Close)
	h2c := httptest.NewUnstartedServer(h)
	h2c.Config.Protocols = new(http.Protocols)
	h2c.Config.Protocols.SetUnencryptedHTTP2(true)
	h2c.Start()
	t.Cleanup(h2c.Close)

	auto := func(c *config.Cluster) { c.Protocol = config.ProtocolAuto; c.TLS.InsecureSkipVerify = true }
	for _, tc := range []struct {
		name   string
		set    func(*config.Cluster)
		origin *httptest.Server
		want   seen
	}{
		{"auto, HTTP/1.1", auto, h1, seen{proto: "HTTP/1.1", contentLength: "0"}},
		{"auto, HTTP/2", auto, h2, seen{proto: "HTTP/2.0", contentLength: "0"}},
		{"h2c", func(c *config.Cluster) { c.Protocol = config.ProtocolH2C }, h2c, seen{proto: "HTTP/2.0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := clusterProxy(t, tc.set, tc.origin.Listener.Addr().String())
			var ctx fasthttp.RequestCtx
			ctx.Request.Header.SetMethod(http.MethodPost)
			ctx.Request.SetRequestURI("/")
			ctx.Request.Header.SetHost("example")
			l.handle(&ctx)
			if s := ctx.Response.StatusCode(); s != http.StatusOK {
				t.Fatalf("status %d %q, want 200", s, ctx.Response.Body())
			}
			if s := <-got; s != tc.want {
				t.Errorf("upstream saw %+v, want %+v", s, tc.want)
			}
		})
	}
}

// TestUpstreamResetMidBody: an HTTP/2 upstream that resets a stream while
// ebb waits for more of the client's streamed body is the request's
// failure, a 502, not the client's (a 400 once the body's read timed
// out): the Transport's Close ends the read it waits for.
func TestUpstreamResetMidBody(t *testing.T) {
	origin, streams := h2cResetter(t, false, http2.ErrCodeInternal, true)
	pausedUploadsFail(t, startedClusterProxy(t, func(c *config.Cluster) {
		c.Protocol = config.ProtocolH2C
		c.Retries.BufferBody = 0 // streamed
	}, origin))
	if n := len(streams); n != 2 {
		t.Fatalf("the upstream saw %d streams, want 2 (one per request, none retried)", n)
	}
}

// TestUpstreamDropMidBodyHTTP1: the same with an auto cluster's upstream
// that speaks HTTP/1.1 and drops the connection after the first bytes of
// the body. net/http closes the body only once its writer is done with
// it; the connection's close ends the read instead.
func TestUpstreamDropMidBodyHTTP1(t *testing.T) {
	pair := newTestPair(t, "localhost")
	cert, err := tls.X509KeyPair(pair.cert, pair.key)
	if err != nil {
		t.Fatal(err)
	}
	// HTTP/1.1 only (no ALPN), as an upstream without h2 answers.
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}}
	requests := make(chan struct{}, 4)
	origin := tcpOrigin(t, func(c net.Conn, _ *bufio.Reader) {
		tc := tls.Server(c, cfg)
		defer tc.Close()
		br := bufio.NewReader(tc)
		if readHeader(br) {
			requests <- struct{}{}
			// All the client sent: then net/http waits to read more of
			// the body.
			io.ReadFull(br, make([]byte, pausedUploadSent))
		}
	})
	pausedUploadsFail(t, startedClusterProxy(t, func(c *config.Cluster) {
		c.Protocol = config.ProtocolAuto
		c.TLS.InsecureSkipVerify = true
		c.Retries.BufferBody = 0
	}, origin))
	if n := len(requests); n != 2 {
		t.Fatalf("the upstream saw %d requests, want 2 (one per request, none retried)", n)
	}
}

// startedClusterProxy is clusterProxy listening on a loopback port, its
// address returned.
func startedClusterProxy(t *testing.T, set func(*config.Cluster), origins ...string) string {
	t.Helper()
	l := clusterProxy(t, set, origins...)
	p := l.p
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p.Addr(l.cfg.Name).String()
}

// pausedUploadSent is how much of its body each client of
// pausedUploadsFail sends: more than fasthttp reads before the handler
// runs.
const pausedUploadSent = prefetchedBody + 10

// pausedUploadsFail sends a POST through the proxy at addr over HTTP/1.1,
// then one over HTTP/2 (h2c), each client sending the first
// pausedUploadSent bytes of a 100,000-byte body and then nothing, and wants each answered 502 (and
// the HTTP/1.1 connection closed: its body was not read to its end). The
// hang guard is far beyond the body's read timeout (1 s).
func pausedUploadsFail(t *testing.T, addr string) {
	t.Helper()
	const guard = 30 * time.Second
	t.Run("HTTP/1.1", func(t *testing.T) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(guard))
		head := "POST / HTTP/1.1\r\nHost: example\r\nContent-Length: 100000\r\n\r\n"
		if _, err := io.WriteString(c, head+strings.Repeat("x", pausedUploadSent)); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != http.StatusBadGateway {
			t.Fatalf("status %d, want 502", resp.StatusCode)
		}
		if _, err := br.ReadByte(); err != io.EOF {
			t.Fatalf("after the response: %v, want EOF", err)
		}
	})
	t.Run("HTTP/2", func(t *testing.T) {
		tr := &http2.Transport{AllowHTTP: true, DialTLSContext: func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		}}
		defer tr.CloseIdleConnections()
		pr, pw := io.Pipe()
		var writer sync.WaitGroup
		defer writer.Wait()
		defer pw.Close() // ends the write below if the body was not read
		writer.Go(func() { pw.Write(bytes.Repeat([]byte("x"), pausedUploadSent)) })
		ctx, cancel := context.WithTimeout(context.Background(), guard)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/", pr)
		if err != nil {
			t.Fatal(err)
		}
		req.ContentLength = 100000
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadGateway {
			t.Fatalf("status %d, want 502", resp.StatusCode)
		}
	})
}
