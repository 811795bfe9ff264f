package h2client_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/ebb-proxy/ebb/proxy/h2client"
	"github.com/ebb-proxy/ebb/proxy/proxytest"
	"github.com/ebb-proxy/ebb/proxy/upstream"
)

// newPool returns a pool of connections to addr, closed when the test
// ends.
func newPool(t *testing.T, addr string, edit func(*h2client.Config)) *h2client.Pool {
	t.Helper()
	cfg := h2client.Config{
		Dial: func(ctx context.Context) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", addr)
		},
		ConnectTimeout:  5 * time.Second,
		ResponseTimeout: 10 * time.Second,
	}
	if edit != nil {
		edit(&cfg)
	}
	p := h2client.NewPool(cfg)
	t.Cleanup(p.Close)
	return p
}

func request(t testing.TB, method, addr, path string, body io.Reader) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+addr+path, body)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// TestLargeBodiesBothWays: a body far larger than every window goes up
// while another comes down, each intact.
func TestLargeBodiesBothWays(t *testing.T) {
	const size = 8 << 20
	addr := proxytest.H2CServer(t, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := sha256.New()
		n, err := io.Copy(h, r.Body)
		if err != nil || n != size {
			http.Error(w, "short body", 400)
			return
		}
		w.Header().Set("x-sum", hex.EncodeToString(h.Sum(nil)))
		w.Write(bytes.Repeat([]byte("b"), size))
	}))
	p := newPool(t, addr, nil)
	payload := bytes.Repeat([]byte("a"), size)
	resp, err := p.RoundTrip(request(t, "POST", addr, "/", io.NopCloser(bytes.NewReader(payload))))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(payload)
	if resp.StatusCode != 200 || len(got) != size || resp.Header.Get("x-sum") != hex.EncodeToString(sum[:]) || strings.Trim(string(got), "b") != "" {
		t.Fatalf("status %d, %d bytes back, sum ok %v", resp.StatusCode, len(got), resp.Header.Get("x-sum") == hex.EncodeToString(sum[:]))
	}
}

// TestStreamsUpToPeerLimit: streams share a connection up to the peer's
// SETTINGS_MAX_CONCURRENT_STREAMS, then a new connection opens, up to
// MaxConns; beyond that a request waits for a stream, and fails as
// overloaded if none frees within the connect timeout.
func TestStreamsUpToPeerLimit(t *testing.T) {
	arrived, release := make(chan struct{}, 8), make(chan struct{})
	addr := proxytest.H2CServer(t, &http.HTTP2Config{MaxConcurrentStreams: 2}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-release
		io.WriteString(w, "ok")
	}))
	p := newPool(t, addr, func(c *h2client.Config) { c.MaxConns = 2; c.ConnectTimeout = 200 * time.Millisecond })
	errs := make(chan error, 4)
	for range 4 {
		go func() {
			resp, err := p.RoundTrip(request(t, "GET", addr, "/", nil))
			if err == nil {
				_, err = io.ReadAll(resp.Body)
				resp.Body.Close()
			}
			errs <- err
		}()
	}
	for range 4 {
		recvWithin(t, arrived, "a request at the upstream")
	}
	if n := p.Conns(); n != 2 {
		t.Errorf("%d connections for 4 streams at 2 per connection, want 2", n)
	}
	_, err := p.RoundTrip(request(t, "GET", addr, "/", nil))
	if upstream.KindOf(err) != upstream.KindOverloaded {
		t.Errorf("a fifth request: %v, want the pool overloaded", err)
	}
	close(release)
	for range 4 {
		if err := recvWithin(t, errs, "a response"); err != nil {
			t.Error(err)
		}
	}
}

// TestUnprocessedStreams: a stream beyond an upstream's GOAWAY, or refused,
// fails with an error saying the upstream did not process it, so that
// any request, a POST too, may go again.
func TestUnprocessedStreams(t *testing.T) {
	for _, goAway := range []bool{false, true} {
		addr, seen := proxytest.RefusingH2C(t, goAway)
		p := newPool(t, addr, nil)
		_, err := p.RoundTrip(request(t, "POST", addr, "/", strings.NewReader("body")))
		recvWithin(t, seen, "the request at the upstream")
		if !errors.Is(err, upstream.ErrResend) {
			t.Errorf("GOAWAY %v: %v, want upstream.ErrResend", goAway, err)
		}
	}
}

// TestIdleConnectionClosed: a connection that carried no stream for the
// idle timeout is closed, with a GOAWAY from ebb.
func TestIdleConnectionClosed(t *testing.T) {
	goAway := make(chan *http2.GoAwayFrame, 1)
	addr := proxytest.H2CFrames(t, false, func(c *proxytest.H2CConn, f http2.Frame) bool {
		switch f := f.(type) {
		case *http2.HeadersFrame:
			c.Fr.WriteHeaders(http2.HeadersFrameParam{StreamID: f.StreamID, BlockFragment: c.Block([][2]string{{":status", "204"}}), EndStream: true, EndHeaders: true})
		case *http2.GoAwayFrame:
			goAway <- f
			return false
		}
		return true
	})
	p := newPool(t, addr, func(c *h2client.Config) { c.IdleTimeout = 50 * time.Millisecond })
	resp, err := p.RoundTrip(request(t, "GET", addr, "/", nil))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if f := recvWithin(t, goAway, "ebb's GOAWAY"); f.ErrCode != http2.ErrCodeNo {
		t.Errorf("GOAWAY %v, want NO_ERROR", f.ErrCode)
	}
}

// TestDeadConnectionFoundByPing: an upstream that goes silent (no FIN, no
// answer to PING) fails the streams on its connection once the PING
// timeout passes, well before the response timeout.
func TestDeadConnectionFoundByPing(t *testing.T) {
	silent := make(chan struct{})
	defer close(silent)
	addr := proxytest.Origin(t, func(c net.Conn, br *bufio.Reader) {
		fr := http2.NewFramer(c, br)
		if _, err := io.ReadFull(br, make([]byte, len(http2.ClientPreface))); err != nil {
			return
		}
		fr.WriteSettings()
		<-silent // reads nothing more, answers nothing
	})
	p := newPool(t, addr, func(c *h2client.Config) {
		c.PingAfter, c.PingTimeout, c.ResponseTimeout = 20*time.Millisecond, 50*time.Millisecond, time.Minute
	})
	_, err := p.RoundTrip(request(t, "GET", addr, "/", nil))
	var ue *upstream.Error
	if !errors.As(err, &ue) || ue.Kind != upstream.KindBroken || !ue.Unanswered {
		t.Errorf("%v, want an unanswered broken exchange", err)
	}
}

// recvWithin receives from ch, failing the test after 10 seconds.
func recvWithin[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	timer := time.NewTimer(10 * time.Second)
	defer timer.Stop()
	select {
	case v := <-ch:
		return v
	case <-timer.C:
		t.Fatalf("no %s within 10s", what)
		var zero T
		return zero
	}
}
