package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const openLoopOut = `latseries: first error: read tcp 127.0.0.1:40000->127.0.0.1:18080: i/o timeout
openloop proto=h1 conns=64 target_rps=2000 seconds=10 scheduled=20000 dropped=3 done=19990 non2xx=2 errors=7 rps=1999.0 p50_us=250.1 p90_us=400.2 p99_us=900.3 max_us=2000.4 lag_p50_us=50.0 lag_p99_us=80.5
`

const perfOut = `# started on Mon Dec  7 23:16:41 2026

211000,,raw_syscalls:sys_enter,10003612,100.00,,
59000,,context-switches,10003612,100.00,5.898,K/sec
1400.50,msec,task-clock,1400500000,100.00,0.140,CPUs utilized
`

func TestParseOpenLoop(t *testing.T) {
	got, err := parseOpenLoop(openLoopOut)
	if err != nil {
		t.Fatal(err)
	}
	want := openLoopFigures{conns: "64", scheduled: "20000", dropped: "3", done: "19990", non2xx: "2", errors: "7", rps: "1999.0",
		p50: "250.1", p90: "400.2", p99: "900.3", max: "2000.4", lagP99: "80.5"}
	if got != want {
		t.Errorf("parseOpenLoop = %+v, want %+v", got, want)
	}
	if _, err := parseOpenLoop("latseries: connection refused\n"); err == nil {
		t.Error("parseOpenLoop of output without its line: no error")
	}
	if _, err := parseOpenLoop("openloop proto=h1 conns=64 done=5\n"); err == nil {
		t.Error("parseOpenLoop of a line without percentiles: no error")
	}
}

func TestParsePerfStat(t *testing.T) {
	got, err := parsePerfStat(perfOut)
	if err != nil {
		t.Fatal(err)
	}
	if want := (perfCounts{syscalls: 211000, ctxsw: 59000, taskClockMS: 1400.50}); got != want {
		t.Errorf("parsePerfStat = %+v, want %+v", got, want)
	}
	// A task that never ran is counted as nothing.
	idle := "<not counted>,,raw_syscalls:sys_enter,0,100.00,,\n<not counted>,,context-switches,0,100.00,,\n<not counted>,msec,task-clock,0,100.00,,\n"
	if got, err := parsePerfStat(idle); err != nil || got != (perfCounts{}) {
		t.Errorf("parsePerfStat(idle) = %+v, %v; want zeros", got, err)
	}
	for name, text := range map[string]string{
		"not supported": strings.Replace(perfOut, "211000,", "<not supported>,", 1),
		"missing":       strings.Replace(perfOut, "context-switches", "cpu-migrations", 1),
		"garbage":       strings.Replace(perfOut, "211000,", "21x,", 1),
	} {
		if _, err := parsePerfStat(text); err == nil {
			t.Errorf("parsePerfStat (%s): no error", name)
		}
	}
}

// runOpenLoop runs the harness's openloop command in a new work directory,
// which it returns, on the generator's output out and perf's (none if
// empty), with env set besides WORK, CLK_TCK=100, DURATION=10 and ROUNDS=2.
func runOpenLoop(t *testing.T, env map[string]string, out, perf string, args ...string) (dir string) {
	t.Helper()
	dir = t.TempDir()
	for k, v := range map[string]string{"WORK": dir, "CLK_TCK": "100", "DURATION": "10", "ROUNDS": "2"} {
		t.Setenv(k, v)
	}
	for k, v := range env {
		t.Setenv(k, v)
	}
	outFile := filepath.Join(dir, "out.txt")
	if err := os.WriteFile(outFile, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	args = append(args, "-out", outFile)
	if perf != "" {
		perfFile := outFile + ".perf"
		if err := os.WriteFile(perfFile, []byte(perf), 0o644); err != nil {
			t.Fatal(err)
		}
		args = append(args, "-perf", perfFile)
	}
	if err := openLoopRun(args); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestOpenLoopRun: one run's line in openloop.tsv, per request over the
// requests answered, and its shortfall in errors.txt.
func TestOpenLoopRun(t *testing.T) {
	dir := runOpenLoop(t, nil, openLoopOut, perfOut,
		"-proto", "h1", "-neighbour", "on", "-rate", "2000", "-round", "1", "-proxy", "ebb", "-ticks", "140", "-cpu0-ticks", "640")
	b, err := os.ReadFile(filepath.Join(dir, "openloop.tsv"))
	if err != nil {
		t.Fatal(err)
	}
	// 1.4 s of CPU (and of task-clock) over 19990 requests: 70.04 µs.
	want := openLoopHeader + "\n" +
		"h1\ton\t2000\t1\tebb\t19990\t1999.0\t3\t2\t7\t64\t140\t70.04\t70.06\t10.56\t2.95\t250.1\t400.2\t900.3\t2000.4\t80.5\t50.0\n"
	if string(b) != want {
		t.Errorf("openloop.tsv:\n%q\nwant\n%q", b, want)
	}
	e, err := os.ReadFile(filepath.Join(dir, "errors.txt"))
	if err != nil {
		t.Fatal(err)
	}
	wantErr := "openloop h1 2000 req/s neighbour on round 1 ebb: 2 non-2xx responses, 7 errors, 3 requests dropped\n"
	if string(e) != wantErr {
		t.Errorf("errors.txt: %q, want %q", e, wantErr)
	}
}

// TestOpenLoopRunWithoutPerf: without perf (OPENLOOP_PERF=0) the counts
// it would give are NaN, and the table shows dashes for them.
func TestOpenLoopRunWithoutPerf(t *testing.T) {
	dir := runOpenLoop(t, map[string]string{"PROXY_CPU": "0", "OPENLOOP_CONNS": "64"},
		strings.Replace(openLoopOut, "dropped=3", "dropped=0", 1), "",
		"-proto", "h1", "-neighbour", "off", "-rate", "2000", "-round", "1", "-proxy", "ebb", "-ticks", "140", "-cpu0-ticks", "140")
	b, err := os.ReadFile(filepath.Join(dir, "openloop.tsv"))
	if err != nil {
		t.Fatal(err)
	}
	want := "h1\toff\t2000\t1\tebb\t19990\t1999.0\t0\t2\t7\t64\t140\t70.04\tNaN\tNaN\tNaN\t250.1\t400.2\t900.3\t2000.4\t80.5\t0.0\n"
	if !strings.HasSuffix(string(b), want) {
		t.Errorf("openloop.tsv:\n%q\nwant a last line\n%q", b, want)
	}
	r := &run{}
	if r.openLoop, err = readTable(filepath.Join(dir, "openloop.tsv")); err != nil {
		t.Fatal(err)
	}
	var got strings.Builder
	r.openLoopTables(func(format string, a ...any) { fmt.Fprintf(&got, format, a...) })
	if row := "| 2000 | 70.0 | – | – | 250 µs / 400 µs / 900 µs |\n"; !strings.Contains(got.String(), row) {
		t.Errorf("open-loop table has no %q:\n%s", row, got.String())
	}
}

// TestOpenLoopRunShortRate: a run without errors whose achieved rate is
// under 99 % of the schedule's gets a line in errors.txt too.
func TestOpenLoopRunShortRate(t *testing.T) {
	line := "openloop proto=h2c conns=1 target_rps=5000 seconds=10 scheduled=50000 dropped=0 done=49000 non2xx=0 errors=0 " +
		"rps=4900.0 p50_us=250.1 p90_us=400.2 p99_us=900.3 max_us=2000.4 lag_p50_us=50.0 lag_p99_us=80.5\n"
	dir := runOpenLoop(t, nil, line, perfOut,
		"-proto", "h2c", "-neighbour", "off", "-rate", "5000", "-round", "2", "-proxy", "nginx", "-ticks", "100", "-cpu0-ticks", "100")
	e, err := os.ReadFile(filepath.Join(dir, "errors.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "openloop h2c 5000 req/s neighbour off round 2 nginx: 4900.0 req/s achieved, under 99 % of 5000\n"; string(e) != want {
		t.Errorf("errors.txt: %q, want %q", e, want)
	}
}
