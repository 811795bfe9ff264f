package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"
)

// clientKind is one kind of client of the load.
type clientKind struct {
	name    string
	workers int
	// vip picks the VIP the kind sends to: HTTP/1.1 or h2c.
	h2c       bool
	keepAlive bool
}

// The load: keep-alive HTTP/1.1 and HTTP/2 clients, as services calling
// services do, and new HTTP/1.1 clients, each with one request on a new
// connection, as browsers and short-lived jobs arrive.
var clientKinds = []clientKind{
	{name: "HTTP/1.1 keep-alive", workers: 4, keepAlive: true},
	{name: "HTTP/2 keep-alive", workers: 4, h2c: true, keepAlive: true},
	{name: "HTTP/1.1 new connections", workers: 2},
}

// load sends GET requests back to back until stopped, and counts what
// the clients saw: an error is a transport error or an answer that is not
// the origin's 200.
type load struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	ok     map[string]int      // guarded by mu: by kind
	errs   map[string]int      // guarded by mu: by kind
	sample map[string][]string // guarded by mu: the first errors, by kind
}

func startLoad(h1, h2 string) *load {
	ctx, cancel := context.WithCancel(context.Background())
	l := &load{ctx: ctx, cancel: cancel, ok: map[string]int{}, errs: map[string]int{}, sample: map[string][]string{}}
	for _, k := range clientKinds {
		var p http.Protocols
		addr := h1
		if k.h2c {
			p.SetUnencryptedHTTP2(true)
			addr = h2
		} else {
			p.SetHTTP1(true)
		}
		tr := &http.Transport{Protocols: &p, DisableKeepAlives: !k.keepAlive, MaxIdleConnsPerHost: k.workers,
			ResponseHeaderTimeout: 10 * time.Second}
		c := &http.Client{Transport: tr, Timeout: 15 * time.Second}
		for w := range k.workers {
			l.wg.Go(func() {
				defer tr.CloseIdleConnections()
				for i := 0; ctx.Err() == nil; i++ {
					l.one(c, k.name, fmt.Sprintf("http://%s/w%d/%d", addr, w, i))
				}
			})
		}
	}
	return l
}

func (l *load) one(c *http.Client, kind, url string) {
	req, _ := http.NewRequestWithContext(l.ctx, http.MethodGet, url, nil)
	resp, err := c.Do(req)
	if err == nil {
		var body []byte
		body, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		if err == nil && (resp.StatusCode != 200 || !strings.HasPrefix(string(body), "hello from ")) {
			err = fmt.Errorf("%s: %.60q", resp.Status, body)
		}
	}
	if l.ctx.Err() != nil {
		return // stopped: not the server's doing
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		l.errs[kind]++
		if len(l.sample[kind]) < 3 {
			l.sample[kind] = append(l.sample[kind], fmt.Sprintf("%s %s: %v", time.Now().Format("15:04:05.000"), url, err))
		}
		return
	}
	l.ok[kind]++
}

// stop ends the load and waits for its workers.
func (l *load) stop() {
	l.cancel()
	l.wg.Wait()
}

// okCount is the number of requests answered so far.
func (l *load) okCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, v := range l.ok {
		n += v
	}
	return n
}

// report returns the number of client errors and a line per kind.
func (l *load) report() (int, []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	total := 0
	var lines []string
	for _, k := range clientKinds {
		total += l.errs[k.name]
		lines = append(lines, fmt.Sprintf("%-26s %7d ok, %5d errors", k.name+":", l.ok[k.name], l.errs[k.name]))
	}
	var samples []string
	for _, k := range clientKinds {
		for _, s := range l.sample[k.name] {
			samples = append(samples, "    "+k.name+": "+s)
		}
	}
	sort.Strings(samples)
	return total, append(lines, samples...)
}
