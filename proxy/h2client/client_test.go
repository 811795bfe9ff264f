package h2client_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/ebb-proxy/ebb/proxy/h2client"
)

// h2cServer serves h on a cleartext HTTP/2 listener on 127.0.0.1 until
// the test ends; it returns the listener's address.
func h2cServer(t *testing.T, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http2.Server{}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, nc)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				srv.ServeConn(nc, &http2.ServeConnOpts{Handler: h})
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, nc := range conns {
			nc.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

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

func request(t *testing.T, method, addr, path string, body io.Reader) *http.Request {
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
	addr := h2cServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
