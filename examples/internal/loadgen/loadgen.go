// Package loadgen is the load the examples send through ebb: clients of
// several kinds sending requests back to back until stopped, counting
// what they saw. An error is a transport error or an answer that is not
// the origin's: a 200 with its greeting, or with the body sent.
package loadgen

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"
)

// Kind is one kind of client.
type Kind struct {
	Name      string
	Workers   int
	URL       string // where to send, http://host:port
	H2C       bool   // HTTP/2 in cleartext (prior knowledge); else HTTP/1.1
	KeepAlive bool   // reuse connections; else a new one per request
	// Echo: POST a body to /echo and expect it back; else GET / and
	// expect "hello from ".
	Echo bool
}

// Load is a running load.
type Load struct {
	kinds  []Kind
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	bodies [][]byte

	mu     sync.Mutex
	ok     map[string]int      // guarded by mu: by kind
	errs   map[string]int      // guarded by mu: by kind
	sample map[string][]string // guarded by mu: the first errors, by kind
}

// Start starts the workers of every kind.
func Start(kinds []Kind) *Load {
	ctx, cancel := context.WithCancel(context.Background())
	l := &Load{kinds: kinds, ctx: ctx, cancel: cancel, ok: map[string]int{}, errs: map[string]int{}, sample: map[string][]string{}}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{1 << 10, 7 << 10, 20 << 10} {
		b := make([]byte, n)
		for i := range b {
			b[i] = 'a' + byte(rng.IntN(26))
		}
		l.bodies = append(l.bodies, b)
	}
	for _, k := range kinds {
		var p http.Protocols
		if k.H2C {
			p.SetUnencryptedHTTP2(true)
		} else {
			p.SetHTTP1(true)
		}
		tr := &http.Transport{Protocols: &p, DisableKeepAlives: !k.KeepAlive, MaxIdleConnsPerHost: k.Workers,
			ResponseHeaderTimeout: 10 * time.Second}
		c := &http.Client{Transport: tr, Timeout: 15 * time.Second}
		for w := range k.Workers {
			l.wg.Go(func() {
				defer tr.CloseIdleConnections()
				for i := 0; ctx.Err() == nil; i++ {
					l.one(c, k, w, i)
				}
			})
		}
	}
	return l
}

// one sends request i of worker w of kind k and counts what came back.
func (l *Load) one(c *http.Client, k Kind, w, i int) {
	url := fmt.Sprintf("%s/?w=%d&i=%d", k.URL, w, i)
	var req *http.Request
	var want []byte
	if k.Echo {
		want = l.bodies[(w+i)%len(l.bodies)]
		url = fmt.Sprintf("%s/echo?w=%d&i=%d", k.URL, w, i)
		req, _ = http.NewRequestWithContext(l.ctx, http.MethodPost, url, bytes.NewReader(want))
		req.Header.Set("Content-Type", "application/octet-stream")
	} else {
		req, _ = http.NewRequestWithContext(l.ctx, http.MethodGet, url, nil)
	}
	resp, err := c.Do(req)
	if err == nil {
		var body []byte
		body, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		switch {
		case err != nil:
		case resp.StatusCode != http.StatusOK:
			err = fmt.Errorf("%s: %.60q", resp.Status, body)
		case k.Echo && !bytes.Equal(body, want):
			err = fmt.Errorf("echo: %d bytes back for %d sent", len(body), len(want))
		case !k.Echo && !strings.HasPrefix(string(body), "hello from "):
			err = fmt.Errorf("not the origin's greeting: %.60q", body)
		}
	}
	if l.ctx.Err() != nil {
		return // stopped: not the server's doing
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		l.errs[k.Name]++
		if len(l.sample[k.Name]) < 3 {
			l.sample[k.Name] = append(l.sample[k.Name], fmt.Sprintf("%s %s %s: %v", time.Now().Format("15:04:05.000"), req.Method, url, err))
		}
		return
	}
	l.ok[k.Name]++
}

// Stop ends the load and waits for its workers. Requests cut short by
// Stop are not counted.
func (l *Load) Stop() {
	l.cancel()
	l.wg.Wait()
}

// Counts returns the requests answered and the errors so far.
func (l *Load) Counts() (ok, errs int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, v := range l.ok {
		ok += v
	}
	for _, v := range l.errs {
		errs += v
	}
	return ok, errs
}

// Report returns the number of client errors and a line per kind, then
// the first errors of each.
func (l *Load) Report() (int, []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	total := 0
	var lines []string
	for _, k := range l.kinds {
		total += l.errs[k.Name]
		lines = append(lines, fmt.Sprintf("%-26s %7d ok, %5d errors", k.Name+":", l.ok[k.Name], l.errs[k.Name]))
	}
	var samples []string
	for _, k := range l.kinds {
		for _, s := range l.sample[k.Name] {
			samples = append(samples, "    "+k.Name+": "+s)
		}
	}
	sort.Strings(samples)
	return total, append(lines, samples...)
}
