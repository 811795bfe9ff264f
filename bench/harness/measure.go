package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
)

// runsHeader is runs.tsv's first line: one line per measured run follows.
const runsHeader = "variant\tround\tproxy\trps\trequests\tcpu_ticks\tcpu_us_per_req\tp50_us\tp99_us\tnon2xx\tsocket_errors\tcpu0_other_pct"

// slowHeader is slowloris.tsv's first line: one line per attack follows.
const slowHeader = "round\tproxy\topened\topen\theads_open\tbodies_open\theads_cut_p50_s\tbodies_cut_p50_s\tanswers"

// loadFigures is what a load generator's output gives. The numbers stay
// as the tools printed them (req/s, requests) or as the report has always
// written them (latencies in µs, one decimal).
type loadFigures struct {
	rps, requests, p50, p99, non2xx, errors string
}

// measure parses one measured run's output and appends its line to
// runs.tsv (and, if the load generator saw errors, one to errors.txt);
// it prints what run.sh logs.
func measure(args []string) error {
	fs := flag.NewFlagSet("measure", flag.ContinueOnError)
	variant := fs.String("variant", "", "variant")
	round := fs.Int("round", 0, "round, from 1")
	proxy := fs.String("proxy", "", "proxy measured, or direct")
	kind := fs.String("kind", "", "load generator: wrk, h2load or grpc")
	out := fs.String("out", "", "the load generator's output")
	ticks := fs.Int64("ticks", 0, "the proxy's CPU time during the run, in clock ticks")
	cpu0 := fs.Int64("cpu0-ticks", 0, "CPU time of the proxy's CPU during the run, all processes, in clock ticks")
	if err := fs.Parse(args); err != nil {
		return err
	}
	f, err := parseLoad(*kind, *out)
	if err != nil {
		return err
	}
	hz, dur := float64(envInt("CLK_TCK")), float64(envInt("DURATION"))
	cpuUS := "NaN" // no proxy, no CPU
	if *proxy != "direct" {
		n, _ := strconv.ParseFloat(f.requests, 64)
		us := 0.0
		if n > 0 {
			us = float64(*ticks) * 1e6 / hz / n
		}
		cpuUS = fmt.Sprintf("%.2f", us)
	}
	other := max(*cpu0-*ticks, 0)
	otherPct := fmt.Sprintf("%.1f", 100*float64(other)/hz/dur)
	line := strings.Join([]string{*variant, strconv.Itoa(*round), *proxy, f.rps, f.requests, strconv.FormatInt(*ticks, 10),
		cpuUS, f.p50, f.p99, f.non2xx, f.errors, otherPct}, "\t")
	if err := appendLine(work("runs.tsv"), runsHeader, line); err != nil {
		return err
	}
	fmt.Printf("round %d/%s %s: %s req/s, %s µs CPU/req, p50 %s µs, p99 %s µs, others on CPU %s: %s%%\n",
		*round, env("ROUNDS"), *proxy, f.rps, cpuUS, f.p50, f.p99, env("PROXY_CPU"), otherPct)
	if f.non2xx != "0" || f.errors != "0" {
		e := fmt.Sprintf("%s round %d %s: %s non-2xx responses, %s errors", *variant, *round, *proxy, f.non2xx, f.errors)
		if err := appendLine(work("errors.txt"), "", e); err != nil {
			return err
		}
		fmt.Printf("WARNING: %s: %s non-2xx responses, %s errors (output: %s)\n", *proxy, f.non2xx, f.errors, *out)
	}
	return nil
}

// appendLine appends line to the file at path, which starts with header
// (if not empty) when this creates it.
func appendLine(path, header, line string) error {
	_, err := os.Stat(path)
	fresh := errors.Is(err, os.ErrNotExist)
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if fresh && header != "" {
		line = header + "\n" + line
	}
	_, err = fmt.Fprintln(f, line)
	return errors.Join(err, f.Close())
}

// parseLoad parses the output of one run of kind's load generator.
func parseLoad(kind, path string) (loadFigures, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return loadFigures{}, err
	}
	text := string(b)
	var f loadFigures
	switch kind {
	case "wrk":
		f, err = parseWrk(text)
	case "h2load":
		f, err = parseH2load(text, path+".log")
	case "grpc":
		f, err = parseGRPC(text)
	default:
		return f, fmt.Errorf("unknown load generator %q", kind)
	}
	if err != nil {
		return f, fmt.Errorf("parsing %s output %s: %w\n%s", kind, path, err, text)
	}
	return f, nil
}

// parseWrk parses wrk --latency's summary:
//
//	Latency Distribution
//	   50%  1.23ms
//	   ...
//	  123456 requests in 10.00s, 12.34MB read
//	  Socket errors: connect 0, read 0, write 0, timeout 0
//	  Non-2xx or 3xx responses: 5
//	Requests/sec:  12345.67
func parseWrk(text string) (loadFigures, error) {
	var f loadFigures
	var p50, p99 string
	non2xx, sockErr := 0, 0
	for l := range strings.Lines(text) {
		w := strings.Fields(l)
		switch {
		case len(w) >= 2 && w[0] == "Requests/sec:":
			f.rps = w[1]
		case len(w) >= 3 && w[1] == "requests" && w[2] == "in":
			f.requests = w[0]
		case len(w) >= 2 && w[0] == "50%":
			p50 = w[1]
		case len(w) >= 2 && w[0] == "99%":
			p99 = w[1]
		case strings.Contains(l, "Non-2xx or 3xx responses:"):
			non2xx, _ = strconv.Atoi(w[len(w)-1])
		case strings.Contains(l, "Socket errors:"):
			// "Socket errors: connect 0, read 0, write 0, timeout 0"
			for i := 3; i < len(w); i += 2 {
				n, _ := strconv.Atoi(strings.TrimSuffix(w[i], ","))
				sockErr += n
			}
		}
	}
	if f.rps == "" || f.requests == "" || p50 == "" || p99 == "" {
		return f, errors.New("no req/s, request count or percentiles")
	}
	var err1, err2 error
	f.p50, err1 = wrkMicros(p50)
	f.p99, err2 = wrkMicros(p99)
	f.non2xx, f.errors = strconv.Itoa(non2xx), strconv.Itoa(sockErr)
	return f, errors.Join(err1, err2)
}

// wrkMicros turns a wrk duration (12.00us, 1.23ms, 2.00s, 1.00m) into µs,
// one decimal.
func wrkMicros(v string) (string, error) {
	i := strings.IndexFunc(v, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	if i <= 0 {
		return "", fmt.Errorf("latency %q has no unit", v)
	}
	n, err := strconv.ParseFloat(v[:i], 64)
	if err != nil {
		return "", fmt.Errorf("latency %q: %w", v, err)
	}
	unit := map[string]float64{"us": 1, "ms": 1e3, "s": 1e6, "m": 6e7, "h": 3.6e9}
	m, ok := unit[v[i:]]
	if !ok {
		return "NaN", nil // a unit wrk does not print: the report shows it
	}
	return fmt.Sprintf("%.1f", n*m), nil
}

// parseH2load parses h2load's summary, and the percentiles from its
// per-request log at logPath (tab-separated: start time, status, µs to
// the end of the response), which it then removes: it is large.
//
//	finished in 5.00s, 41234.20 req/s, 3.12MB/s
//	requests: N total, N started, N done, N succeeded, N failed, N errored, N timeout
//	status codes: N 2xx, N 3xx, N 4xx, N 5xx
func parseH2load(text, logPath string) (loadFigures, error) {
	var f loadFigures
	fields := func(prefix string) []string { l, _ := lastLine(text, prefix); return strings.Fields(l) }
	fin, reqs, codes := fields("finished in"), fields("requests:"), fields("status codes:")
	if len(fin) < 4 || len(reqs) < 14 || len(codes) < 9 {
		return f, errors.New("no summary")
	}
	num := func(s string) int { n, _ := strconv.Atoi(strings.TrimSuffix(s, ",")); return n }
	f.rps = fin[3]
	done := num(reqs[5])
	f.requests = strconv.Itoa(done)
	f.errors = strconv.Itoa(num(reqs[11]) + num(reqs[13]))
	f.non2xx = strconv.Itoa(num(codes[4]) + num(codes[6]) + num(codes[8]))
	if done <= 0 {
		return f, errors.New("h2load completed no request")
	}
	lat, err := h2loadLatencies(logPath)
	if err != nil {
		return f, err
	}
	f.p50, f.p99 = fmt.Sprintf("%.1f", percentile(lat, 0.50)), fmt.Sprintf("%.1f", percentile(lat, 0.99))
	return f, os.Remove(logPath)
}

// h2loadLatencies reads the third column of h2load's log, sorted.
func h2loadLatencies(path string) ([]float64, error) {
	file, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer file.Close()
	var lat []float64
	sc := bufio.NewScanner(file)
	for sc.Scan() {
		cols := strings.Split(sc.Text(), "\t")
		if len(cols) < 3 {
			continue
		}
		n, err := strconv.ParseFloat(cols[2], 64)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		lat = append(lat, n)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(lat) == 0 {
		return nil, fmt.Errorf("%s is empty", path)
	}
	slices.Sort(lat)
	return lat, nil
}

// percentile is the nearest-rank q-quantile of sorted (rounded half up,
// at least the first).
func percentile(sorted []float64, q float64) float64 {
	i := max(int(math.Floor(q*float64(len(sorted))+0.5)), 1)
	return sorted[i-1]
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

// lastLine returns the last line of text that starts with prefix.
func lastLine(text, prefix string) (string, bool) {
	var last string
	found := false
	for l := range strings.Lines(text) {
		if strings.HasPrefix(l, prefix) {
			last, found = strings.TrimRight(l, "\n"), true
		}
	}
	return last, found
}

// parseGRPC parses bench/grpc-bench's last line:
// "requests=N errors=N seconds=S rps=R p50_us=P p99_us=P mean_us=M".
func parseGRPC(text string) (loadFigures, error) {
	l, ok := lastLine(text, "requests=")
	if !ok {
		return loadFigures{}, errors.New("no requests= line")
	}
	m := keyValues(l)
	return loadFigures{rps: m["rps"], requests: m["requests"], p50: m["p50_us"], p99: m["p99_us"], non2xx: "0", errors: m["errors"]}, nil
}

// attack parses one slowloris attack's summary and appends it to
// slowloris.tsv; it prints what run.sh logs.
func attack(args []string) error {
	fs := flag.NewFlagSet("attack", flag.ContinueOnError)
	round := fs.Int("round", 0, "round, from 1")
	proxy := fs.String("proxy", "", "proxy attacked")
	out := fs.String("out", "", "bench/slowloris's output")
	if err := fs.Parse(args); err != nil {
		return err
	}
	b, err := os.ReadFile(*out)
	if err != nil {
		return err
	}
	l, ok := lastLine(string(b), "conns=")
	if !ok {
		return fmt.Errorf("cannot parse slowloris output %s:\n%s", *out, b)
	}
	m := keyValues(l)
	n := func(k string) int { v, _ := strconv.Atoi(m[k]); return v }
	row := []string{strconv.Itoa(*round), *proxy, strconv.Itoa(n("headers") + n("bodies")), strconv.Itoa(n("open")),
		strconv.Itoa(n("headers_open")), strconv.Itoa(n("bodies_open")), m["headers_cut_p50_s"], m["bodies_cut_p50_s"], m["answers"]}
	if err := appendLine(work("slowloris.tsv"), slowHeader, strings.Join(row, "\t")); err != nil {
		return err
	}
	fmt.Printf("%s under attack: %s of %s slow connections open after %s s (heads %s, bodies %s); cut after %s s (heads), %s s (bodies) at the median; answers %s\n",
		*proxy, row[3], row[2], env("SLOW_HOLD"), row[4], row[5], row[6], row[7], row[8])
	return nil
}
