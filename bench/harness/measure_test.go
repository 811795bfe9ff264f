package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const wrkOut = `Running 2s test @ http://127.0.0.1:18080/
  1 threads and 64 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency    12.50ms   10.79ms  80.72ms   85.51%
    Req/Sec     5.45k     1.84k    8.18k    60.00%
  Latency Distribution
     50%    9.44ms
     75%   15.17ms
     90%   25.15ms
     99%  800.00us
  10974 requests in 2.04s, 2.11MB read
  Socket errors: connect 1, read 2, write 3, timeout 4
  Non-2xx or 3xx responses: 5
Requests/sec:   5385.20
Transfer/sec:      1.04MB
`

const h2loadOut = `Application protocol: h2c
finished in 2.00s, 17430.00 req/s, 2.69MB/s
requests: 34860 total, 34988 started, 34860 done, 34858 succeeded, 2 failed, 1 errored, 3 timeout
status codes: 34850 2xx, 1 3xx, 2 4xx, 7 5xx
req/s           :    2120.15     2218.59     2178.48       37.38    62.50%
`

func TestParseWrk(t *testing.T) {
	got, err := parseWrk(wrkOut)
	if err != nil {
		t.Fatal(err)
	}
	want := loadFigures{rps: "5385.20", requests: "10974", p50: "9440.0", p99: "800.0", non2xx: "5", errors: "10"}
	if got != want {
		t.Errorf("parseWrk = %+v, want %+v", got, want)
	}
	if _, err := parseWrk("Running 2s test\n"); err == nil {
		t.Error("parseWrk of a run without a summary: no error")
	}
}

func TestWrkMicros(t *testing.T) {
	for in, want := range map[string]string{"12.00us": "12.0", "1.23ms": "1230.0", "2.00s": "2000000.0",
		"1.50m": "90000000.0", "0.10h": "360000000.0", "3.00d": "NaN"} {
		if got, err := wrkMicros(in); err != nil || got != want {
			t.Errorf("wrkMicros(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

func TestParseH2load(t *testing.T) {
	// 100 requests taking 1..100 µs, out of order: p50 is the 50th, p99
	// the 99th.
	var log strings.Builder
	for i := 100; i >= 1; i-- {
		fmt.Fprintf(&log, "1796665620090064\t200\t%d\n", i)
	}
	path := filepath.Join(t.TempDir(), "out.txt.log")
	if err := os.WriteFile(path, []byte(log.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := parseH2load(h2loadOut, path)
	if err != nil {
		t.Fatal(err)
	}
	want := loadFigures{rps: "17430.00", requests: "34860", p50: "50.0", p99: "99.0", non2xx: "10", errors: "4"}
	if got != want {
		t.Errorf("parseH2load = %+v, want %+v", got, want)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("the per-request log is still there (%v)", err)
	}
}

func TestPercentile(t *testing.T) {
	for _, c := range []struct {
		n    int
		q    float64
		want float64
	}{{1, 0.5, 1}, {1, 0.99, 1}, {2, 0.5, 1}, {3, 0.5, 2}, {4, 0.99, 4}, {10, 0.5, 5}, {1000, 0.99, 990}} {
		s := make([]float64, c.n)
		for i := range s {
			s[i] = float64(i + 1)
		}
		if got := percentile(s, c.q); got != c.want {
			t.Errorf("percentile(1..%d, %v) = %v, want %v", c.n, c.q, got, c.want)
		}
	}
}

func TestParseGRPC(t *testing.T) {
	got, err := parseGRPC("warming\nrequests=1 errors=0 seconds=0.1 rps=10 p50_us=1 p99_us=2 mean_us=1\n" +
		"requests=3083 errors=2 seconds=2.000 rps=1541.5 p50_us=499.9 p99_us=4380.8 mean_us=648.5\n")
	if err != nil {
		t.Fatal(err)
	}
	want := loadFigures{rps: "1541.5", requests: "3083", p50: "499.9", p99: "4380.8", non2xx: "0", errors: "2"}
	if got != want {
		t.Errorf("parseGRPC = %+v, want %+v", got, want)
	}
}

// TestMeasure checks the line a run adds to runs.tsv, and errors.txt's.
func TestMeasure(t *testing.T) {
	dir := t.TempDir()
	for k, v := range map[string]string{"WORK": dir, "CLK_TCK": "100", "DURATION": "10", "ROUNDS": "3", "PROXY_CPU": "0"} {
		t.Setenv(k, v)
	}
	out := filepath.Join(dir, "load.txt")
	if err := os.WriteFile(out, []byte(wrkOut), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"ebb", "direct"} {
		if err := measure([]string{"-variant", "small", "-round", "2", "-proxy", p, "-kind", "wrk", "-out", out,
			"-ticks", "500", "-cpu0-ticks", "530"}); err != nil {
			t.Fatal(err)
		}
	}
	// 500 ticks at 100 Hz over 10974 requests: 455.62 µs each; 30 ticks
	// of others over 10 s: 3.0 %.
	wantRuns := runsHeader + "\n" +
		"small\t2\tebb\t5385.20\t10974\t500\t455.62\t9440.0\t800.0\t5\t10\t3.0\n" +
		"small\t2\tdirect\t5385.20\t10974\t500\tNaN\t9440.0\t800.0\t5\t10\t3.0\n"
	wantErrors := "small round 2 ebb: 5 non-2xx responses, 10 errors\nsmall round 2 direct: 5 non-2xx responses, 10 errors\n"
	for file, want := range map[string]string{"runs.tsv": wantRuns, "errors.txt": wantErrors} {
		if got, err := os.ReadFile(filepath.Join(dir, file)); err != nil || string(got) != want {
			t.Errorf("%s = %q, %v; want %q", file, got, err, want)
		}
	}
}

func TestAttack(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("WORK", dir)
	t.Setenv("SLOW_HOLD", "30")
	out := filepath.Join(dir, "slowloris.txt")
	summary := "ready opened=1000 failed=0\nconns=1000 headers=500 bodies=500 open=0 headers_open=0 bodies_open=0 " +
		"headers_cut_p50_s=10.2 bodies_cut_p50_s=NaN answers=408:500,none:500\n"
	if err := os.WriteFile(out, []byte(summary), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := attack([]string{"-round", "1", "-proxy", "ebb", "-out", out}); err != nil {
		t.Fatal(err)
	}
	want := slowHeader + "\n1\tebb\t1000\t0\t0\t0\t10.2\tNaN\t408:500,none:500\n"
	if got, err := os.ReadFile(filepath.Join(dir, "slowloris.tsv")); err != nil || string(got) != want {
		t.Errorf("slowloris.tsv = %q, %v; want %q", got, err, want)
	}
}
