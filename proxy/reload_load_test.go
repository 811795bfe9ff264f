package proxy

import (
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
// Go's HTTP/1.1 client, two on an h2c client) send requests without
// pause: the route moves between two clusters, one cluster's
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
	var served [2]atomic.Int64 // A, B
	var failures atomic.Int64
	var firstErr atomic.Value
	done := make(chan struct{})
	var wg sync.WaitGroup
	for _, c := range []*http.Client{h1, h1, h2c, h2c} {
		wg.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/", nil)
				resp, err := c.Do(req)
				if err != nil {
					failures.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				body, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				switch {
				case err != nil || resp.StatusCode != 200:
					failures.Add(1)
					firstErr.CompareAndSwap(nil, fmt.Sprintf("%d %q %v", resp.StatusCode, body, err))
				case string(body) == "A":
					served[0].Add(1)
				case string(body) == "B":
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

func nameOriginAddr(t *testing.T, name string) string {
	t.Helper()
	return hostPort(newOrigin(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, name)
	})))
}
