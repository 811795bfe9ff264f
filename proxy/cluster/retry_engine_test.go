package cluster_test

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"golang.org/x/net/http2"

	"github.com/ebb-proxy/ebb/config"
	"github.com/ebb-proxy/ebb/proxy/cluster"
	"github.com/ebb-proxy/ebb/proxy/internal/enginetest"
	"github.com/ebb-proxy/ebb/proxy/proxytest"
)

// TestRetryOnConnectFailure: a POST whose first endpoint refuses the
// connection goes to the other endpoint (it was never sent); with
// retries.attempts 1 the first one gets the 502 and the endpoint is
// ejected.
func TestRetryOnConnectFailure(t *testing.T) {
	origin := proxytest.Origin(t, func(c net.Conn, br *bufio.Reader) {
		for proxytest.ReadHeader(br) {
			io.CopyN(io.Discard, br, 4) // the body
			if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"); err != nil {
				return
			}
		}
	})
	dead := proxytest.RefusedAddr(t)
	for _, attempts := range []int{1, 2} {
		// Round robin with the dead endpoint first: every request tries it.
		e := enginetest.New(t, func(c *config.Cluster) {
			c.Retries.Attempts = attempts
			c.Balancer = config.BalancerRoundRobin
		}, dead, origin)
		for i := range 4 {
			cluster.SetRoundRobin(e.Cluster, 0)
			ctx := e.Serve("POST", []byte("body"))
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

// TestRefusedStreamRetriedElsewhere: an HTTP/2 upstream that refuses a
// stream (REFUSED_STREAM) or goes away before it (GOAWAY with a lower last
// stream) has provably not processed it, so even a POST goes to another
// endpoint, its buffered body with it. When the refusing endpoint is the
// only one, the request is sent to it once more on a new connection, and
// then answered with 503.
func TestRefusedStreamRetriedElsewhere(t *testing.T) {
	good := proxytest.EchoH2C(t)
	for _, goAway := range []bool{false, true} {
		bad, refused := proxytest.RefusingH2C(t, goAway)
		h2c := func(c *config.Cluster) { c.Protocol = config.ProtocolH2C; c.Balancer = config.BalancerRoundRobin }
		e := enginetest.New(t, h2c, bad, good)
		for _, tc := range []struct{ method, body string }{{"POST", "pay once"}, {"POST", ""}, {"GET", ""}} {
			cluster.SetRoundRobin(e.Cluster, 0) // the refusing endpoint first
			ctx := e.ServeBody(tc.method, []byte(tc.body))
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

		e = enginetest.New(t, h2c, bad)
		ctx := e.ServeBody("POST", []byte("pay once"))
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
		if ctx := e.ServeBody("GET", nil); ctx.Response.StatusCode() != http.StatusServiceUnavailable {
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
		bad, got := proxytest.SilentOrigin(t)
		good, heads, _ := proxytest.RecordingOrigin(t, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		rr := func(c *config.Cluster) { c.Balancer = config.BalancerRoundRobin }
		e := enginetest.New(t, rr, bad, good)
		c := e.Cluster
		cluster.SetRoundRobin(c, 0) // the silent endpoint first
		if ctx := e.Serve("GET", nil); ctx.Response.StatusCode() != 200 {
			t.Fatalf("GET: %d %q, want 200 from the other endpoint", ctx.Response.StatusCode(), ctx.Response.Body())
		}
		<-got
		<-heads
		cluster.SetRoundRobin(c, 0)
		if ctx := e.ServeBody("POST", []byte("pay once")); ctx.Response.StatusCode() != fasthttp.StatusBadGateway {
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
		bad, reset := proxytest.ResettingH2C(t, false, http2.ErrCodeInternal)
		good := proxytest.EchoH2C(t)
		h2c := func(c *config.Cluster) { c.Protocol = config.ProtocolH2C; c.Balancer = config.BalancerRoundRobin }
		e := enginetest.New(t, h2c, bad, good)
		c := e.Cluster
		cluster.SetRoundRobin(c, 0)
		if ctx := e.Serve("GET", nil); ctx.Response.StatusCode() != 200 || string(ctx.Response.Body()) != "GET " {
			t.Fatalf("GET: %d %q, want 200 from the other endpoint", ctx.Response.StatusCode(), ctx.Response.Body())
		}
		<-reset
		for _, body := range []string{"pay once", ""} {
			cluster.SetRoundRobin(c, 0)
			if ctx := e.ServeBody("POST", []byte(body)); ctx.Response.StatusCode() != fasthttp.StatusBadGateway {
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
	bad, refused := proxytest.RefusingH2C(t, false)
	good := proxytest.EchoH2C(t)
	h2c := func(c *config.Cluster) { c.Protocol = config.ProtocolH2C; c.Balancer = config.BalancerRoundRobin }
	e := enginetest.New(t, h2c, bad, good)
	c := e.Cluster
	type dial struct{ ep, host string }
	dials := make(chan dial, 8)
	cluster.WrapDials(c, func(ep string, next cluster.DialFunc) cluster.DialFunc {
		return func(ctx context.Context, network, addr string) (net.Conn, error) {
			dials <- dial{ep, addr}
			return next(ctx, network, addr)
		}
	})
	cluster.SetRoundRobin(c, 0)
	if ctx := e.ServeBody("POST", []byte("x")); ctx.Response.StatusCode() != 200 {
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

// TestRequestBodyOutlivesHandler: an exchange in net/http's form may
// still read a request body after the response arrived (full duplex). Once the
// response is done, it reads no more of it, and the next request's body,
// which may reuse the pooled upstream.Body, never reaches the first upstream.
func TestRequestBodyOutlivesHandler(t *testing.T) {
	proceed := make(chan struct{})
	type result struct {
		body []byte
		err  error
	}
	got := make(chan result, 1)
	// The smallest stream window (RFC 9113's initial one): most of the
	// body is still the client's when the response comes.
	origin := proxytest.H2CServer(t, &http.HTTP2Config{MaxReceiveBufferPerStream: 65535},
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(200)
			w.(http.Flusher).Flush()
			<-proceed
			b, err := io.ReadAll(r.Body)
			got <- result{b, err}
		}))
	h2c := func(c *config.Cluster) { c.Protocol = config.ProtocolH2C }
	e := enginetest.New(t, h2c, origin)
	first := e.ServeBody("POST", bytes.Repeat([]byte("x"), 512<<10))
	if first.Response.StatusCode() != 200 {
		t.Fatalf("first POST: %d %q", first.Response.StatusCode(), first.Response.Body())
	}
	// Written: fasthttp closes the body stream.
	if err := first.Response.CloseBodyStream(); err != nil {
		t.Fatal(err)
	}
	other, _, _ := proxytest.RecordingOrigin(t, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
	if ctx := enginetest.New(t, nil, other).ServeBody("POST", bytes.Repeat([]byte("y"), 512<<10)); ctx.Response.StatusCode() != 200 {
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
	origin, heads, _ := proxytest.RecordingOrigin(t, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
	for _, buffer := range []config.Size{config.DefaultRetryBufferBody, 0} {
		e := enginetest.New(t, func(c *config.Cluster) { c.Retries.BufferBody = buffer }, origin)
		ctx := e.ServeRequest("POST", func(req *fasthttp.Request) {
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
// upstream HTTP/1 clients reach through net/http's types as one: with
// Content-Length: 0 over HTTP/1.1 (an auto cluster whose upstream does not
// offer h2), not chunked; HEADERS ending the stream over HTTP/2.
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
		{"auto, HTTP/2", auto, h2, seen{proto: "HTTP/2.0"}}, // ebb's own client, as h2c
		{"h2c", func(c *config.Cluster) { c.Protocol = config.ProtocolH2C }, h2c, seen{proto: "HTTP/2.0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := enginetest.New(t, tc.set, tc.origin.Listener.Addr().String())
			var ctx fasthttp.RequestCtx
			ctx.Request.Header.SetMethod(http.MethodPost)
			ctx.Request.SetRequestURI("/")
			ctx.Request.Header.SetHost("example")
			e.H1.Handle(&ctx)
			if s := ctx.Response.StatusCode(); s != http.StatusOK {
				t.Fatalf("status %d %q, want 200", s, ctx.Response.Body())
			}
			if s := <-got; s != tc.want {
				t.Errorf("upstream saw %+v, want %+v", s, tc.want)
			}
		})
	}
}

// shares sends n GET requests one after another through the engine and
// counts the answers by the origin's name (its body) and by status.
func shares(t *testing.T, e *enginetest.Engine, n int) (byOrigin map[string]int, byStatus map[int]int) {
	byOrigin, byStatus = map[string]int{}, map[int]int{}
	for range n {
		ctx := e.Serve("GET", nil)
		byOrigin[string(ctx.Response.Body())]++
		byStatus[ctx.Response.StatusCode()]++
	}
	return byOrigin, byStatus
}

// namedOrigin answers every request with its name, after delay, with
// status.
func namedOrigin(t *testing.T, name string, status int, delay time.Duration) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if delay > 0 {
			<-time.After(delay) // a slow upstream
		}
		w.WriteHeader(status)
		io.WriteString(w, name)
	}))
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String()
}

// TestEWMAShares: three real origins. One answering 20 ms late gets under
// 10 % of 600 requests with ewma (least_request, blind to latency, gives
// it about a third); one answering 503 at once gets under 10 % too
// instead of the most.
func TestEWMAShares(t *testing.T) {
	slow := []string{namedOrigin(t, "a", 200, 0), namedOrigin(t, "slow", 200, 20*time.Millisecond), namedOrigin(t, "b", 200, 0)}
	for _, c := range []struct {
		balancer string
		atMost   int
		atLeast  int
	}{{config.BalancerEWMA, 59, 0}, {config.BalancerLeastRequest, 600, 150}} {
		e := enginetest.New(t, func(cc *config.Cluster) { cc.Balancer = c.balancer }, slow...)
		got, _ := shares(t, e, 600)
		if got["slow"] > c.atMost || got["slow"] < c.atLeast {
			t.Errorf("%s: the slow origin answered %d of 600 requests (%v), want %d to %d", c.balancer, got["slow"], got, c.atLeast, c.atMost)
		}
		t.Logf("%s, one origin 20 ms slow: %v", c.balancer, got)
		// /endpoints shows the estimate, with ewma only.
		for _, ep := range e.Cluster.State().Endpoints {
			if ep.Address != slow[1] {
				continue
			}
			if c.balancer == config.BalancerEWMA && ep.LatencyMS < 10 || c.balancer != config.BalancerEWMA && ep.LatencyMS != 0 {
				t.Errorf("%s: /endpoints shows the slow origin's latency estimate as %v ms", c.balancer, ep.LatencyMS)
			}
		}
	}

	failing := []string{namedOrigin(t, "a", 200, 0), namedOrigin(t, "failing", 503, 0), namedOrigin(t, "b", 200, 0)}
	e := enginetest.New(t, func(cc *config.Cluster) { cc.Balancer = config.BalancerEWMA }, failing...)
	got, statuses := shares(t, e, 600)
	if got["failing"] > 59 || got["failing"] != statuses[503] {
		t.Errorf("ewma: the origin answering 503 answered %d of 600 requests (%v; statuses %v), want under 10 %%", got["failing"], got, statuses)
	}
	t.Logf("ewma, one origin answering 503: %v", got)
}
