package main

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
)

// openLoopHeader is openloop.tsv's first line: one line per measured run
// of the openloop part follows. Figures per request are over the
// requests answered; latencies in µs from the instant the generator
// issued each request, lag from the instant scheduled to that one.
const openLoopHeader = "proto\tneighbour\trate\tround\tproxy\tdone\trps\tdropped\tnon2xx\terrors\tconns\tcpu_ticks\tcpu_us_per_req\t" +
	"task_clock_us_per_req\tsyscalls_per_req\tctxsw_per_req\tp50_us\tp90_us\tp99_us\tmax_us\tlag_p99_us\tcpu0_other_pct"

// openLoopFigures is what bench/latseries -rate prints, as printed.
type openLoopFigures struct {
	conns, scheduled, dropped, done, non2xx, errors, rps string
	p50, p90, p99, max, lagP99                           string
}

// parseOpenLoop parses bench/latseries -rate's last line:
//
//	openloop proto=h1 conns=64 target_rps=2000 seconds=10 scheduled=20000 dropped=0 done=20000 non2xx=0 errors=0
//	rps=2000.0 p50_us=250.1 p90_us=400.2 p99_us=900.3 max_us=2000.4 lag_p50_us=50.0 lag_p99_us=80.0
//
// (one line).
func parseOpenLoop(text string) (openLoopFigures, error) {
	l, ok := lastLine(text, "openloop ")
	if !ok {
		return openLoopFigures{}, errors.New("no openloop line")
	}
	m := keyValues(l)
	f := openLoopFigures{conns: m["conns"], scheduled: m["scheduled"], dropped: m["dropped"], done: m["done"], non2xx: m["non2xx"],
		errors: m["errors"], rps: m["rps"], p50: m["p50_us"], p90: m["p90_us"], p99: m["p99_us"], max: m["max_us"], lagP99: m["lag_p99_us"]}
	for k, v := range map[string]string{"conns": f.conns, "scheduled": f.scheduled, "dropped": f.dropped, "done": f.done,
		"non2xx": f.non2xx, "errors": f.errors, "rps": f.rps, "p50_us": f.p50, "p90_us": f.p90, "p99_us": f.p99} {
		if v == "" {
			return f, fmt.Errorf("the openloop line has no %s", k)
		}
	}
	return f, nil
}

// perfCounts are perf stat's counts for one run.
type perfCounts struct {
	syscalls, ctxsw float64
	taskClockMS     float64
}

// parsePerfStat parses perf stat -x, output (value, unit, event, ...):
//
//	123456,,raw_syscalls:sys_enter,10003612,100.00,,
//	34567,,context-switches,10003612,100.00,1.234,K/sec
//	1234.56,msec,task-clock,1234560000,100.00,0.123,CPUs utilized
//
// "<not counted>" is a task that never ran during the count: none. An
// event that is missing or "<not supported>" is an error: the figure
// would be silently wrong.
func parsePerfStat(text string) (perfCounts, error) {
	var c perfCounts
	seen := map[string]bool{}
	for l := range strings.Lines(text) {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		f := strings.Split(l, ",")
		if len(f) < 3 {
			continue
		}
		var v float64
		switch f[0] {
		case "<not counted>":
		case "<not supported>":
			return c, fmt.Errorf("perf: %s is not supported", f[2])
		default:
			var err error
			if v, err = strconv.ParseFloat(f[0], 64); err != nil {
				return c, fmt.Errorf("perf: %q: %w", l, err)
			}
		}
		switch f[2] {
		case "raw_syscalls:sys_enter":
			c.syscalls = v
		case "context-switches":
			c.ctxsw = v
		case "task-clock":
			c.taskClockMS = v
		default:
			continue
		}
		seen[f[2]] = true
	}
	for _, e := range []string{"raw_syscalls:sys_enter", "context-switches", "task-clock"} {
		if !seen[e] {
			return c, fmt.Errorf("perf stat counted no %s", e)
		}
	}
	return c, nil
}

// openLoopRun parses one measured run of the openloop part, appends its
// line to openloop.tsv and, if it fell short, one to errors.txt; it
// prints what run.sh logs.
func openLoopRun(args []string) error {
	fs := flag.NewFlagSet("openloop", flag.ContinueOnError)
	proto := fs.String("proto", "", "h1 or h2c")
	nb := fs.String("neighbour", "", "off or on: a busy loop on the proxy's CPU")
	rate := fs.Int("rate", 0, "the requests a second scheduled")
	round := fs.Int("round", 0, "round, from 1")
	proxy := fs.String("proxy", "", "proxy measured")
	out := fs.String("out", "", "bench/latseries -rate's output")
	perfOut := fs.String("perf", "", "perf stat -x, output; none: not counted (OPENLOOP_PERF=0)")
	ticks := fs.Int64("ticks", 0, "the proxy's CPU time during the run, in clock ticks")
	cpu0 := fs.Int64("cpu0-ticks", 0, "CPU time of the proxy's CPU during the run, all processes, in clock ticks")
	if err := fs.Parse(args); err != nil {
		return err
	}
	b, err := os.ReadFile(*out)
	if err != nil {
		return err
	}
	f, err := parseOpenLoop(string(b))
	if err != nil {
		return fmt.Errorf("parsing %s: %w\n%s", *out, err, b)
	}
	pc := perfCounts{syscalls: math.NaN(), ctxsw: math.NaN(), taskClockMS: math.NaN()}
	if *perfOut != "" {
		pb, err := os.ReadFile(*perfOut)
		if err != nil {
			return err
		}
		if pc, err = parsePerfStat(string(pb)); err != nil {
			return fmt.Errorf("parsing %s: %w\n%s", *perfOut, err, pb)
		}
	}
	hz, dur := float64(envInt("CLK_TCK")), float64(envInt("DURATION"))
	done := num(f.done)
	per := func(x float64, prec int) string {
		if done <= 0 || math.IsNaN(x) {
			return "NaN"
		}
		return strconv.FormatFloat(x/done, 'f', prec, 64)
	}
	other := max(*cpu0-*ticks, 0)
	row := []string{*proto, *nb, strconv.Itoa(*rate), strconv.Itoa(*round), *proxy, f.done, f.rps, f.dropped, f.non2xx, f.errors, f.conns,
		strconv.FormatInt(*ticks, 10), per(float64(*ticks)*1e6/hz, 2), per(pc.taskClockMS*1e3, 2), per(pc.syscalls, 2), per(pc.ctxsw, 2),
		f.p50, f.p90, f.p99, f.max, f.lagP99, fmt.Sprintf("%.1f", 100*float64(other)/hz/dur)}
	if err := appendLine(work("openloop.tsv"), openLoopHeader, strings.Join(row, "\t")); err != nil {
		return err
	}
	fmt.Printf("round %d/%s %s %s %d req/s, neighbour %s: %s req/s, %s µs CPU/req, %s syscalls/req, %s ctx sw/req, p50 %s µs, p90 %s µs, p99 %s µs\n",
		*round, env("ROUNDS"), *proxy, *proto, *rate, *nb, f.rps, row[12], row[14], row[15], f.p50, f.p90, f.p99)
	var short []string
	if f.non2xx != "0" || f.errors != "0" || f.dropped != "0" {
		short = append(short, fmt.Sprintf("%s non-2xx responses, %s errors, %s requests dropped", f.non2xx, f.errors, f.dropped))
	}
	if num(f.rps) < 0.99*float64(*rate) {
		short = append(short, fmt.Sprintf("%s req/s achieved, under 99 %% of %d", f.rps, *rate))
	}
	if len(short) > 0 {
		e := fmt.Sprintf("openloop %s %d req/s neighbour %s round %d %s: %s", *proto, *rate, *nb, *round, *proxy, strings.Join(short, "; "))
		if err := appendLine(work("errors.txt"), "", e); err != nil {
			return err
		}
		fmt.Printf("WARNING: %s (output: %s)\n", e, *out)
	}
	return nil
}

// openLoopTables give the openloop part: a table per protocol and
// neighbour setting, a line per rate, each proxy's medians over rounds.
func (r *run) openLoopTables(p func(string, ...any)) {
	if len(r.openLoop.rows) == 0 {
		return
	}
	var proxies []string // in run.sh's order: round 1's, first rate's
	for _, t := range r.openLoop.column("proxy", func(m map[string]string) bool { return m["round"] == "1" }) {
		if !slices.Contains(proxies, t) {
			proxies = append(proxies, t)
		}
	}
	var rates []string
	for _, x := range r.openLoop.column("rate", func(map[string]string) bool { return true }) {
		if !slices.Contains(rates, x) {
			rates = append(rates, x)
		}
	}
	slices.SortFunc(rates, func(a, b string) int { return cmpNum(num(a), num(b)) })
	p("\n## Open loop: the proxy at fixed rates (bench/latseries -rate)\n\n")
	p("Requests on a fixed schedule whether or not the earlier ones are answered: HTTP/1.1 over %s keep-alive connections taken in turn, "+
		"h2c over one connection (%s streams at most). Per request: the proxy's CPU time (utime+stime from /proc), its system calls "+
		"and context switches (`perf stat -e raw_syscalls:sys_enter,context-switches`, nginx: its worker); latencies from the instant "+
		"the generator issued each request (a wait for a free connection included). With a neighbour: a busy loop (`sh -c 'while :; do :; done'`) pinned to CPU %s beside the proxy, "+
		"at the same priority. Medians over rounds.\n",
		env("OPENLOOP_CONNS"), env("OPENLOOP_CONNS"), env("PROXY_CPU"))
	for _, proto := range []string{"h1", "h2c"} {
		for _, nb := range []string{"off", "on"} {
			in := func(m map[string]string) bool { return m["proto"] == proto && m["neighbour"] == nb }
			if len(r.openLoop.column("proxy", in)) == 0 {
				continue
			}
			r.openLoopTable(p, proto, nb, rates, proxies)
		}
	}
}

func (r *run) openLoopTable(p func(string, ...any), proto, nb string, rates, proxies []string) {
	title := map[string]string{"h1": "HTTP/1.1", "h2c": "h2c"}[proto]
	with := map[string]string{"off": "alone on CPU " + env("PROXY_CPU"), "on": "with a CPU neighbour"}[nb]
	p("\n### %s, %s\n\n", title, with)
	olCol := func(t, rate, c string) string {
		return median(r.openLoop.column(c, func(m map[string]string) bool {
			return m["proto"] == proto && m["neighbour"] == nb && m["proxy"] == t && m["rate"] == rate
		}))
	}
	// A figure perf did not count (OPENLOOP_PERF=0) is a dash.
	fig := func(s string, prec int) string {
		if s == "NaN" {
			return "–"
		}
		return fixed(s, prec)
	}
	head, rule := "| req/s |", "|---:|"
	for _, t := range proxies {
		head += fmt.Sprintf(" %s µs CPU/req | syscalls/req | ctx sw/req | p50 / p90 / p99 |", t)
		rule += "---:|---:|---:|---:|"
	}
	p("%s\n%s\n", head, rule)
	for _, rate := range rates {
		line := "| " + rate + " |"
		for _, t := range proxies {
			line += fmt.Sprintf(" %s | %s | %s | %s / %s / %s |", fixed(olCol(t, rate, "cpu_us_per_req"), 1),
				fig(olCol(t, rate, "syscalls_per_req"), 2), fig(olCol(t, rate, "ctxsw_per_req"), 2),
				fmtUS(olCol(t, rate, "p50_us")), fmtUS(olCol(t, rate, "p90_us")), fmtUS(olCol(t, rate, "p99_us")))
		}
		p("%s\n", line)
	}
	// ebb against its peers, rate by rate: the targets are in
	// these terms (CPU per request against nginx's, latency against the
	// better peer's).
	if !slices.Contains(proxies, "ebb") {
		return
	}
	p("\n")
	for _, rate := range rates {
		var parts []string
		for _, t := range []string{"nginx", "haproxy"} {
			if slices.Contains(proxies, t) {
				parts = append(parts, fmt.Sprintf("CPU/req %s× %s's", ratio(olCol("ebb", rate, "cpu_us_per_req"), olCol(t, rate, "cpu_us_per_req")), t))
			}
		}
		best := func(c string) string {
			b := ""
			for _, t := range []string{"nginx", "haproxy"} {
				if v := olCol(t, rate, c); slices.Contains(proxies, t) && (b == "" || num(v) < num(b)) {
					b = v
				}
			}
			return ratio(olCol("ebb", rate, c), b)
		}
		if slices.Contains(proxies, "nginx") || slices.Contains(proxies, "haproxy") {
			parts = append(parts, fmt.Sprintf("p50 %s×, p90 %s×, p99 %s× the better peer's", best("p50_us"), best("p90_us"), best("p99_us")))
		}
		if len(parts) > 0 {
			p("ebb at %s req/s: %s.  \n", rate, strings.Join(parts, ", "))
		}
	}
	// What else ran on the proxy's CPU: near 0 alone, the neighbour's
	// share with it. Alone, a run where something else took more than
	// 5 % of the CPU was disturbed (another process on the machine), and
	// its figures, which the medians take in, are not the proxy's alone.
	in := func(m map[string]string) bool { return m["proto"] == proto && m["neighbour"] == nb }
	p("Other processes on CPU %s during these runs: median %s%%.\n", env("PROXY_CPU"), median(r.openLoop.column("cpu0_other_pct", in)))
	if nb != "off" {
		return
	}
	var disturbed []string
	others, rounds, proxies, rates := r.openLoop.column("cpu0_other_pct", in), r.openLoop.column("round", in),
		r.openLoop.column("proxy", in), r.openLoop.column("rate", in)
	for i, o := range others {
		if num(o) > 5 {
			disturbed = append(disturbed, fmt.Sprintf("round %s %s at %s req/s (%s%%)", rounds[i], proxies[i], rates[i], o))
		}
	}
	if len(disturbed) > 0 {
		p("**Warning: the machine was not quiet: other processes took more than 5 %% of CPU %s in %d of these runs: %s. "+
			"Their figures are disturbed, and so are the medians that take them in.**\n", env("PROXY_CPU"), len(disturbed),
			strings.Join(disturbed, ", "))
	}
}
