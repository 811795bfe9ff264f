package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/net/http2"
)

// TestUpdateUnderLoad reloads 200 times while keep-alive clients (two on
// Go's HTTP/1.1 client, two on an h2c client, two strict HTTP/1.1
// clients that never retry) send requests without pause: the route moves between two clusters, one cluster's
// endpoints change and its timeouts change, a third cluster comes and
// goes. Every request must succeed, from one of the clusters the route
// pointed to, and both must have served.
func TestUpdateUnderLoad(t *testing.T) {
	a1 := nameOriginAddr(t, "A")
	a2 := nameOriginAddr(t, "A")
	b := nameOriginAddr(t, "B")
	yaml := func(i int) string {
		route, aAddr := "a", a1
		if i%2 == 1 {
			route = "b"
		}
		if i%3 == 0 {
			aAddr = a2 // a's endpoints change
		}
		y := reloadYAML(route, [2]string{"a", aAddr}) +
			fmt.Sprintf("  - name: b\n    discovery: { static: [%q] }\n    timeouts: { response: %dms }\n", b, 5000+i%7)
		if i%4 == 0 {
			y += fmt.Sprintf("  - name: c\n    discovery: { static: [%q] }\n", b)
		}
		return y
	}
	px := startMatrixProxy(t, yaml(0))
	runDiscovery(t, px)
	addr := px.Addr("public").String()

	h1 := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	h2c := &http.Client{Transport: &http2.Transport{AllowHTTP: true, DialTLSContext: func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}}}
	t.Cleanup(h1.CloseIdleConnections)
	h1Do := func(c *http.Client) func() (string, error) {
		return func() (string, error) {
			req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/", nil)
			resp, err := c.Do(req)
			if err != nil {
				return "", err
			}
			return readAnswer(resp)
		}
	}
	var served [2]atomic.Int64 // A, B
	var failures atomic.Int64
	var firstErr atomic.Value
	done := make(chan struct{})
	var wg sync.WaitGroup
	for _, do := range []func() (string, error){h1Do(h1), h1Do(h1), h1Do(h2c), h1Do(h2c), strictDo(t, addr), strictDo(t, addr)} {
		wg.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				body, err := do()
				switch {
				case err != nil:
					failures.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
				case body == "A":
					served[0].Add(1)
				case body == "B":
					served[1].Add(1)
				default:
					failures.Add(1)
					firstErr.CompareAndSwap(nil, fmt.Sprintf("body %q", body))
				}
			}
		})
	}
	for i := 1; i <= 200; i++ {
		if _, err := px.Update(loadYAML(t, yaml(i))); err != nil {
			close(done)
			wg.Wait()
			t.Fatalf("reload %d: %v", i, err)
		}
	}
	close(done)
	wg.Wait()
	if n := failures.Load(); n != 0 {
		t.Fatalf("%d requests failed across 200 reloads; the first: %v", n, firstErr.Load())
	}
	if served[0].Load() == 0 || served[1].Load() == 0 {
		t.Fatalf("served A %d, B %d times: both clusters must have served", served[0].Load(), served[1].Load())
	}
	t.Logf("200 reloads under load: %d requests from A, %d from B, none failed", served[0].Load(), served[1].Load())
}

// readAnswer reads and closes resp's body, an error unless the status is
// 200.
func readAnswer(resp *http.Response) (string, error) {
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%d %q %v", resp.StatusCode, body, err)
	}
	return string(body), nil
}

// strictDo returns a strict HTTP/1.1 client's request: over one keep-alive
// connection, never retried, a new connection only after an answer that
// said Connection: close. Unlike Go's client, which sends a request again
// on a new connection when a reused one turns out closed, it takes any
// failure for what a client would see.
func strictDo(t *testing.T, addr string) func() (string, error) {
	var c net.Conn
	var br *bufio.Reader
	t.Cleanup(func() {
		if c != nil {
			c.Close()
		}
	})
	return func() (string, error) {
		if c == nil {
			var err error
			if c, err = net.Dial("tcp", addr); err != nil {
				return "", err
			}
			br = bufio.NewReader(c)
		}
		if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: example.com\r\n\r\n"); err != nil {
			return "", fmt.Errorf("strict client: writing: %w", err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return "", fmt.Errorf("strict client: reading the answer: %w", err)
		}
		body, err := readAnswer(resp)
		if resp.Close {
			c.Close()
			c = nil
		}
		return body, err
	}
}

func nameOriginAddr(t *testing.T, name string) string {
	t.Helper()
	return hostPort(newOrigin(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, name)
	})))
}
