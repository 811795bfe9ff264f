package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/net/http2"
)

// runInflight is the idle-up part's client (-inflight N): N GETs of path
// in flight at once through the proxy at target, over h2c, perConn on
// each connection (the last may have fewer): the same connections for
// every proxy, whatever its own stream limit, since what a proxy keeps of
// them is in the figure too. Each request but the first is sent once the
// origin at gate (-origin) holds the one before (see origin.go), so that
// the proxy knows, before it places a request, that none of the
// connections it opened takes a second stream. It prints "held N" once
// the origin holds them all (and has let them go), and "done N bytes=B"
// once every answer has come whole.
func runInflight(ctx context.Context, w io.Writer, target, gate, path string, n, perConn int) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// A Transport per client connection: each opens a second one only
	// past the proxy's stream limit, above perConn.
	trs := make([]*http2.Transport, (n+perConn-1)/perConn)
	for i := range trs {
		trs[i] = h2cTransport()
		defer trs[i].CloseIdleConnections()
	}
	gateTr := h2cTransport()
	defer gateTr.CloseIdleConnections()
	sizes := make([]int64, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	defer wg.Wait()
	for i := range n {
		tr := trs[i/perConn]
		wg.Go(func() { sizes[i], errs[i] = get(ctx, tr, "http://"+target+path) })
		if i == n-1 {
			break
		}
		if err := awaitHeld(ctx, gateTr, gate, i+1); err != nil {
			return fmt.Errorf("request %d of %d: %w", i+1, n, err)
		}
	}
	wg.Wait()
	fmt.Fprintf(w, "held %d\n", n)
	var total int64
	for i := range n {
		if errs[i] != nil {
			return fmt.Errorf("request %d of %d: %w", i+1, n, errs[i])
		}
		total += sizes[i]
	}
	fmt.Fprintf(w, "done %d bytes=%d\n", n, total)
	return nil
}

// h2cTransport is an HTTP/2 client with prior knowledge, over plain TCP
// where the Transport would make a TLS connection.
func h2cTransport() *http2.Transport {
	return &http2.Transport{
		AllowHTTP: true,
		DialTLSContext: func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		},
	}
}

// get makes one GET and reads its answer, which must be a 200; it
// returns the body's size.
func get(ctx context.Context, tr *http2.Transport, url string) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("status %d", resp.StatusCode)
	}
	return n, err
}

// awaitHeld returns once the origin at gate holds k requests: its /stats
// answers when it does, or when it has waited as long as it holds a
// request.
func awaitHeld(ctx context.Context, tr *http2.Transport, gate string, k int) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+gate+"/stats?held="+strconv.Itoa(k), nil)
	if err != nil {
		return err
	}
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return fmt.Errorf("asking the origin: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("asking the origin: %w", err)
	}
	stats := keyValues(string(b))
	if held, _ := strconv.Atoi(stats["held"]); held < k {
		return fmt.Errorf("the origin holds %s requests, not %d (%s)", stats["held"], k, strings.TrimSpace(string(b)))
	}
	return nil
}

// keyValues parses a line of key=value words.
func keyValues(line string) map[string]string {
	m := map[string]string{}
	for _, w := range strings.Fields(line) {
		k, v, _ := strings.Cut(w, "=")
		m[k] = v
	}
	return m
}
