package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestOpenLoop runs a short schedule against a local origin over each
// protocol: every request scheduled is sent and answered, over the
// connections promised (h1: all of them, each used; h2c: one).
func TestOpenLoop(t *testing.T) {
	for _, proto := range []string{"h1", "h2c"} {
		t.Run(proto, func(t *testing.T) {
			var served, h2 atomic.Int64
			var peers sync.Map // remote address -> true
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				served.Add(1)
				peers.Store(r.RemoteAddr, true)
				if r.ProtoMajor == 2 {
					h2.Add(1)
				}
				fmt.Fprint(w, strings.Repeat("x", 64))
			}))
			if proto == "h2c" {
				srv.Config.Protocols = new(http.Protocols)
				srv.Config.Protocols.SetHTTP1(true)
				srv.Config.Protocols.SetUnencryptedHTTP2(true)
			}
			srv.Start()
			defer srv.Close()
			cfg := openLoopConfig{target: strings.TrimPrefix(srv.URL, "http://"), path: "/", proto: proto, conns: 4, rate: 400,
				dur: 250 * time.Millisecond}
			line, err := openLoop(cfg)
			if err != nil {
				t.Fatal(err)
			}
			m := map[string]string{}
			for _, w := range strings.Fields(line) {
				k, v, _ := strings.Cut(w, "=")
				m[k] = v
			}
			conns := "4"
			if proto == "h2c" {
				conns = "1"
			}
			for k, want := range map[string]string{"proto": proto, "conns": conns, "target_rps": "400", "scheduled": "100", "dropped": "0",
				"done": "100", "non2xx": "0", "errors": "0", "rps": "400.0"} {
				if m[k] != want {
					t.Errorf("%s=%s, want %s (%s)", k, m[k], want, line)
				}
			}
			// h2c: the first request, which opens the connection, is not
			// the schedule's.
			wantServed, wantH2 := int64(100), int64(0)
			if proto == "h2c" {
				wantServed, wantH2 = 101, 101
			}
			if served.Load() != wantServed || h2.Load() != wantH2 {
				t.Errorf("origin served %d requests, %d over HTTP/2; want %d, %d", served.Load(), h2.Load(), wantServed, wantH2)
			}
			n := 0
			peers.Range(func(any, any) bool { n++; return true })
			if strconv.Itoa(n) != conns {
				t.Errorf("requests came over %d connections, want %s", n, conns)
			}
		})
	}
}

func TestOpenLoopSummary(t *testing.T) {
	var tl tally
	for i := 1; i <= 100; i++ {
		tl.samples = append(tl.samples, sample{latency: time.Duration(i) * time.Microsecond, lag: time.Duration(101-i) * time.Microsecond / 10})
	}
	tl.non2xx, tl.errored = 2, 3
	got := openLoopSummary(openLoopConfig{proto: "h1", rate: 50, dur: 2 * time.Second}, 105, 2, tl, 8)
	want := "openloop proto=h1 conns=8 target_rps=50 seconds=2 scheduled=105 dropped=2 done=100 non2xx=2 errors=3 rps=50.0 " +
		"p50_us=50.0 p90_us=90.0 p99_us=99.0 max_us=100.0 lag_p50_us=5.0 lag_p99_us=9.9"
	if got != want {
		t.Errorf("openLoopSummary:\n%s\nwant\n%s", got, want)
	}
}
