package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/ebb-proxy/ebb/config"
	"github.com/ebb-proxy/ebb/proxy/proxytest"
)

// TestUpstreamResetMidBody: an HTTP/2 upstream that resets a stream while
// ebb waits for more of the client's streamed body is the request's
// failure, a 502, not the client's (a 400 once the body's read timed
// out): the stream's reset ends the read it waits for.
func TestUpstreamResetMidBody(t *testing.T) {
	origin, streams := proxytest.H2CResetter(t, false, http2.ErrCodeInternal, true)
	pausedUploadsFail(t, startedClusterProxy(t, func(c *config.Cluster) {
		c.Protocol = config.ProtocolH2C
		c.Retries.BufferBody = 0 // streamed
	}, origin), http.StatusBadGateway)
	if n := len(streams); n != 2 {
		t.Fatalf("the upstream saw %d streams, want 2 (one per request, none retried)", n)
	}
}

// TestUpstreamDropMidBodyHTTP1: the same with an auto cluster's upstream
// that speaks HTTP/1.1 and drops the connection after the first bytes of
// the body. The HTTP/2 client's body goes up while the response is read
// (full duplex): the drop ends the exchange, and the read of the body it
// waits for, at once. An HTTP/1.1 client's body is written whole before
// the response is read, as to an http1 cluster (fasthttp's server owns
// its reads): nothing looks at the upstream meanwhile, and the client
// that stops sending gets the 408 of the body's read timeout.
func TestUpstreamDropMidBodyHTTP1(t *testing.T) {
	pair := newTestPair(t, "localhost")
	cert, err := tls.X509KeyPair(pair.cert, pair.key)
	if err != nil {
		t.Fatal(err)
	}
	// HTTP/1.1 only (no ALPN), as an upstream without h2 answers.
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}}
	requests := make(chan struct{}, 4)
	origin := proxytest.Origin(t, func(c net.Conn, _ *bufio.Reader) {
		tc := tls.Server(c, cfg)
		defer tc.Close()
		br := bufio.NewReader(tc)
		if proxytest.ReadHeader(br) {
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
	}, origin), http.StatusRequestTimeout)
	if n := len(requests); n != 2 {
		t.Fatalf("the upstream saw %d requests, want 2 (one per request, none retried)", n)
	}
}

// startedClusterProxy is a proxy listening on a loopback port in front
// of proxytest.Cluster(origins...), adjusted by set; its address is
// returned.
func startedClusterProxy(t *testing.T, set func(*config.Cluster), origins ...string) string {
	t.Helper()
	cfg := config.Default()
	c := proxytest.Cluster(origins...)
	if set != nil {
		set(&c)
	}
	cfg.Listeners = []config.Listener{proxytest.Listener()}
	cfg.Clusters = []config.Cluster{c}
	p := newTestProxy(t, cfg)
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p.Addr(cfg.Listeners[0].Name).String()
}

// pausedUploadSent is how much of its body each client of
// pausedUploadsFail sends: more than fasthttp reads before the handler
// runs.
const pausedUploadSent = 8<<10 + 10 // fasthttp prefetches 8 KiB

// pausedUploadsFail sends a POST through the proxy at addr over HTTP/1.1,
// then one over HTTP/2 (h2c), each client sending the first
// pausedUploadSent bytes of a 100,000-byte body and then nothing, and
// wants the HTTP/1.1 one answered h1Status and the HTTP/2 one 502 (and
// the HTTP/1.1 connection closed: its body was not read to its end). The
// hang guard is far beyond the body's read timeout (1 s).
func pausedUploadsFail(t *testing.T, addr string, h1Status int) {
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
		if resp.StatusCode != h1Status {
			t.Fatalf("status %d, want %d", resp.StatusCode, h1Status)
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

// TestUpstreamCancelPassedOn: an HTTP/2 upstream that cancels a stream
// before answering (a gRPC server does at the call's deadline) has the
// HTTP/2 client's stream cancelled in turn (gRPC then reports the
// deadline), and an HTTP/1.1 client answered 502.
func TestUpstreamCancelPassedOn(t *testing.T) {
	origin, _ := proxytest.ResettingH2C(t, false, http2.ErrCodeCancel)
	addr := startedClusterProxy(t, func(c *config.Cluster) { c.Protocol = config.ProtocolH2C }, origin)
	h2c := &http.Client{Transport: &http2.Transport{AllowHTTP: true, DialTLSContext: func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}}}
	_, err := h2c.Post("http://"+addr+"/rpc", "application/grpc", strings.NewReader("call"))
	var se http2.StreamError
	if !errors.As(err, &se) || se.Code != http2.ErrCodeCancel {
		t.Fatalf("the HTTP/2 client got %v, want its stream reset with CANCEL", err)
	}
	if code, _, _ := do(t, newClient(t), mustRequest(t, http.MethodGet, "http://"+addr+"/")); code != http.StatusBadGateway {
		t.Fatalf("the HTTP/1.1 client got %d, want 502", code)
	}
}

// TestGRPCTimeoutBoundsTheCall: a gRPC call's grpc-timeout bounds it in
// ebb too, whatever its client does after sending it: past the deadline
// the upstream's stream is cancelled, and the client's, before the
// response head and while the response streams.
func TestGRPCTimeoutBoundsTheCall(t *testing.T) {
	cancelled := make(chan string, 2)
	origin := proxytest.H2CServer(t, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/streaming" {
			w.Header().Set("Content-Type", "application/grpc")
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
		}
		<-r.Context().Done() // the call never ends by itself
		cancelled <- r.URL.Path
	}))
	addr := startedClusterProxy(t, func(c *config.Cluster) { c.Protocol = config.ProtocolH2C }, origin)
	h2c := &http.Client{Transport: &http2.Transport{AllowHTTP: true, DialTLSContext: func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}}}
	for _, path := range []string{"/unary", "/streaming"} {
		req := mustRequest(t, http.MethodPost, "http://"+addr+path)
		req.Header.Set("Content-Type", "application/grpc")
		req.Header.Set("Grpc-Timeout", "100m")
		resp, err := h2c.Do(req)
		if err == nil {
			_, err = io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		var se http2.StreamError
		if !errors.As(err, &se) || se.Code != http2.ErrCodeCancel {
			t.Errorf("%s: the client got %v, want its stream reset with CANCEL at the deadline", path, err)
		}
		if got := within(t, cancelled, 10*time.Second, path+"'s cancellation at the upstream"); got != path {
			t.Errorf("the upstream saw %s cancelled, want %s", got, path)
		}
	}
}
