package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// run is what the report is rendered from: the tables the run wrote to
// its work directory and the knobs and facts run.sh exported.
type run struct {
	runs, slow, rss, idle table
	openLoop              table
	variants              []variant
	errors                []string
	spans                 map[string]string // tracing ebb -> spans its sink counted
	proxies, parts        map[string]bool
}

// variant is a line of variants.tsv: what run.sh measured, in its order.
type variant struct {
	name, kind, label string
	targets           []string
}

func (v variant) has(p string) bool { return slices.Contains(v.targets, p) }

// ebbKinds are ebb with one feature on, measured against the plain ebb.
var ebbKinds = []struct{ name, what string }{
	{"ebb-log", "the access log's cost"},
	{"ebb-trace100", "tracing at 100 %"},
	{"ebb-trace1", "tracing at 1 %"},
}

// loadRun reads what the run left in its work directory.
func loadRun() (*run, error) {
	r := &run{spans: map[string]string{}, proxies: proxies(), parts: parts()}
	for _, t := range []struct {
		dst  *table
		name string
	}{{&r.runs, "runs.tsv"}, {&r.slow, "slowloris.tsv"}, {&r.rss, "rss.tsv"}, {&r.idle, "idle.tsv"},
		{&r.openLoop, "openloop.tsv"}} {
		var err error
		if *t.dst, err = readTable(work(t.name)); err != nil {
			return nil, err
		}
	}
	vt, err := readTable(work("variants.tsv"))
	if err != nil {
		return nil, err
	}
	for _, row := range vt.rows {
		if len(row) != 4 {
			return nil, fmt.Errorf("variants.tsv: %q has %d fields, want 4", row, len(row))
		}
		r.variants = append(r.variants, variant{row[0], row[1], row[2], strings.Fields(row[3])})
	}
	if b, err := os.ReadFile(work("errors.txt")); err == nil && len(b) > 0 {
		r.errors = strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	} else if err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	for _, p := range []string{"ebb-trace100", "ebb-trace1"} {
		b, err := os.ReadFile(work("sink-"+p, "out.log"))
		if os.IsNotExist(err) {
			continue // not measured
		} else if err != nil {
			return nil, err
		}
		l, ok := lastLine(string(b), "spans=")
		if !ok {
			return nil, fmt.Errorf("otlp-sink for %s printed no count:\n%s", p, b)
		}
		r.spans[p] = keyValues(l)["spans"]
	}
	return r, nil
}

// col is the median over rounds of one column of runs.tsv.
func (r *run) col(v, p, c string) string {
	return median(r.runs.column(c, func(m map[string]string) bool { return m["variant"] == v && m["proxy"] == p }))
}

// slowCol is the median of a column of slowloris.tsv, NaN (nothing cut)
// left out.
func (r *run) slowCol(p, c string) string {
	return median(r.slow.column(c, func(m map[string]string) bool { return m["proxy"] == p && m[c] != "NaN" }))
}

// rssOf is a proxy's peak RSS after a variant, "–" if not read (direct).
func (r *run) rssOf(v, p string) string {
	k := r.rss.column("peak_rss_kb", func(m map[string]string) bool { return m["variant"] == v && m["proxy"] == p })
	if len(k) == 0 {
		return "–"
	}
	return fmt.Sprintf("%.1f MiB", num(k[len(k)-1])/1024)
}

// slowTargets are the proxies attacked, in run.sh's order (round 1's).
func (r *run) slowTargets() []string {
	return r.slow.column("proxy", func(m map[string]string) bool { return m["round"] == "1" })
}

// report renders the report to w.
func report(w io.Writer) error {
	r, err := loadRun()
	if err != nil {
		return err
	}
	calib, err := parseLoad("wrk", work("calibration.txt"))
	if err != nil {
		return err
	}
	b := bufio.NewWriter(w)
	p := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	r.header(p, calib.rps)
	for _, v := range r.variants {
		p("\n## %s\n\n", v.label)
		if v.kind == "grpc" {
			r.grpcTable(p, v)
		} else {
			r.table(p, v)
		}
	}
	r.headlines(p)
	r.spanCounts(p)
	r.idleTables(p)
	r.slowTable(p)
	r.openLoopTables(p)
	p("\n## Errors\n\n")
	if len(r.errors) == 0 {
		p("The load generators reported no non-2xx responses and no errors.\n")
	}
	for _, e := range r.errors {
		p("- %s\n", e)
	}
	if len(r.runs.rows) > 0 {
		p("\n## Raw runs\n\n```\n%s```\n", columnT(append([][]string{r.runs.cols}, r.runs.rows...)))
	}
	if len(r.slowTargets()) > 0 {
		p("\nSlowloris attacks (open: slow connections still open at the end; cut times: medians, seconds after they opened):\n\n")
		p("```\n%s```\n", columnT(append([][]string{r.slow.cols}, r.slow.rows...)))
	}
	if len(r.openLoop.rows) > 0 {
		p("\nOpen-loop runs (per request: over the requests answered; task_clock: perf's count of the proxy's CPU time; " +
			"lag: how late the generator issued the requests, after their scheduled instants):\n\n")
		p("```\n%s```\n", columnT(append([][]string{r.openLoop.cols}, r.openLoop.rows...)))
	}
	return b.Flush()
}

// gomaxprocs says how a GOMAXPROCS knob set the runtime's, if it did
// (otherwise the runtime chose: one P per CPU the process may run on).
// The knobs are newer than some recorded runs, so unset means empty.
func gomaxprocs(knob string) string {
	if v := os.Getenv(knob); v != "" {
		return ", GOMAXPROCS=" + v + " (" + knob + ")"
	}
	return ""
}

func (r *run) header(p func(string, ...any), calibRPS string) {
	proxyCPU, loadCPU := env("PROXY_CPU"), env("LOAD_CPU")
	p("# ebb benchmark, %s\n\n", env("REPORT_DATE"))
	p("- ebb %s%s, %s%s\n", env("EBB_COMMIT"), env("EBB_DIRTY"), env("GO_VERSION"), gomaxprocs("EBB_GOMAXPROCS"))
	if r.proxies["base"] {
		p("- base: ebb built from %s (%s)%s\n", env("BASE"), env("BASE_COMMIT"), gomaxprocs("BASE_GOMAXPROCS"))
	}
	tools := env("NGINX_VERSION") + ", wrk " + env("WRK_VERSION")
	if r.proxies["haproxy"] {
		tools += ", HAProxy " + env("HAPROXY_VERSION")
	}
	if r.parts["h2c"] || r.parts["h2up"] {
		tools += ", h2load " + env("H2LOAD_VERSION")
	}
	if r.parts["grpc"] {
		tools += ", grpc-go " + env("GRPC_VERSION")
	}
	if r.parts["openloop"] && env("PERF_VERSION") != "" {
		tools += ", perf " + env("PERF_VERSION")
	}
	p("- %s\n", tools)
	p("- %s CPUs (%s), kernel %s\n", env("NCPU"), env("CPU_MODEL"), env("KERNEL"))
	origins := "nginx"
	if r.parts["h2up"] {
		origins += ", HTTP/1.1; h2c for h2up"
	}
	if r.parts["idle-up"] {
		origins += "; bench/idle-h2 -origin, h2c, for idle-up"
	}
	if r.parts["grpc"] {
		origins += "; the gRPC server for gRPC"
	}
	h2 := fmt.Sprintf("h2load -t1 -c%s -m%s", env("H2_CONNS"), env("H2_STREAMS"))
	loads := fmt.Sprintf("`taskset -c %s wrk -t1`", loadCPU)
	if r.parts["h2c"] {
		loads += fmt.Sprintf(", `%s` and `-c%s -m1`", h2, env("H2_WIDE_CONNS"))
	}
	if r.parts["h2tls"] {
		loads += fmt.Sprintf(", `%s https://`", h2)
	}
	if r.parts["h2up"] && !r.parts["h2c"] {
		loads += fmt.Sprintf(", `%s`", h2)
	}
	if r.parts["idle"] || r.parts["idle-h1"] {
		loads += ", bench/idle-h2"
	}
	if r.parts["idle-up"] {
		loads += fmt.Sprintf(", `bench/idle-h2 -inflight %s -streams %s`", env("IDLE_UP_CONNS"), env("IDLE_UP_STREAMS"))
	}
	if r.parts["slowloris"] {
		loads += ", bench/slowloris"
	}
	if r.parts["grpc"] {
		loads += ", the gRPC client"
	}
	if r.parts["openloop"] {
		loads += fmt.Sprintf(", `bench/latseries -rate` (%s req/s, %s)", strings.Join(strings.Fields(env("OPENLOOP_RATES")), ", "),
			strings.Join(strings.Fields(env("OPENLOOP_PROTOS")), ", "))
	}
	p("- proxy on CPU %s; origin (%s) and %s on CPU %s\n", proxyCPU, origins, loads, loadCPU)
	p("- parts: %s; %ss per run, %s interleaved rounds, %ss warm-up; figures are medians over rounds\n",
		env("PARTS_RUN"), env("DURATION"), env("ROUNDS"), env("WARMUP"))
	// Other processes' share of the proxy's CPU over the measured runs.
	other := r.runs.column("cpu0_other_pct", func(map[string]string) bool { return true })
	otherMax := 0.0
	for _, o := range other {
		otherMax = max(otherMax, num(o))
	}
	if med := median(other); med != "NaN" {
		p("- other processes on CPU %s during the measured runs: median %s%%, max %s%%\n", proxyCPU, med, awkNumber(otherMax))
	}
	if otherMax > 5 {
		p("- **warning: the machine was not quiet; req/s and latency are disturbed (µs CPU/req less so)**\n")
	}
	p("- calibration, wrk straight to the origin (%s B, %s conns, wrk on CPU %s): %.0f req/s; CPU steal during the run: %s\n",
		env("SMALL_BYTES"), env("CONNS"), proxyCPU, num(calibRPS), env("STEAL"))
	p("- µs CPU/req: the proxy's utime+stime during the run over the requests completed; peak RSS: VmHWM (nginx: worker) after the variant\n")
}

// grpcTable is a gRPC variant's table: calls direct and through each proxy.
func (r *run) grpcTable(p func(string, ...any), v variant) {
	p("| path | calls/s | vs direct | µs CPU/call | p50 | p99 | peak RSS |\n")
	p("|---|---:|---:|---:|---:|---:|---:|\n")
	direct := r.col(v.name, "direct", "rps")
	for _, t := range []string{"direct", "ebb", "nginx", "haproxy"} {
		if !v.has(t) {
			continue
		}
		name, cpu := "through "+t, fixed(r.col(v.name, t, "cpu_us_per_req"), 2)
		if t == "direct" {
			name, cpu = "direct", "–"
		}
		rps := r.col(v.name, t, "rps")
		p("| %s | %s | %s | %s | %s | %s | %s |\n", name, fixed(rps, 0), ratio(rps, direct), cpu,
			fmtUS(r.col(v.name, t, "p50_us")), fmtUS(r.col(v.name, t, "p99_us")), r.rssOf(v.name, t))
	}
	p("\n")
	for _, t := range []string{"ebb", "nginx", "haproxy"} {
		if !v.has(t) {
			continue
		}
		d50 := num(r.col(v.name, t, "p50_us")) - num(r.col(v.name, "direct", "p50_us"))
		d99 := num(r.col(v.name, t, "p99_us")) - num(r.col(v.name, "direct", "p99_us"))
		p("%s adds %+.0f µs at p50, %+.0f µs at p99.  \n", t, d50, d99)
	}
}

// table is an HTTP variant's table, one line per proxy.
func (r *run) table(p func(string, ...any), v variant) {
	p("| proxy | req/s | vs nginx | vs HAProxy | µs CPU/req | p50 | p99 | peak RSS |\n")
	p("|---|---:|---:|---:|---:|---:|---:|---:|\n")
	var ngx, hap string
	if v.has("nginx") {
		ngx = r.col(v.name, "nginx", "rps")
	}
	if v.has("haproxy") {
		hap = r.col(v.name, "haproxy", "rps")
	}
	for _, t := range v.targets {
		rps := r.col(v.name, t, "rps")
		p("| %s | %s | %s | %s | %s | %s | %s | %s |\n", t, fixed(rps, 0), ratio(rps, ngx), ratio(rps, hap),
			fixed(r.col(v.name, t, "cpu_us_per_req"), 2), fmtUS(r.col(v.name, t, "p50_us")), fmtUS(r.col(v.name, t, "p99_us")),
			r.rssOf(v.name, t))
	}
}

// headlines are ebb's ratios against the others (µs CPU/req: above 1,
// ebb costs more), for h1's 64-byte variant and the HTTP/2 ones.
func (r *run) headlines(p func(string, ...any)) {
	if !r.proxies["ebb"] {
		return
	}
	byName := map[string]variant{}
	for _, v := range r.variants {
		byName[v.name] = v
	}
	for _, name := range []string{"small", "h2c", "h2c-wide", "h2tls", "h2up"} {
		v, ok := byName[name]
		if !ok {
			continue
		}
		p("\n## Headline, %s\n\n", v.label)
		others := []struct{ proxy, name string }{{"nginx", "nginx"}, {"haproxy", "HAProxy"}, {"fasthttp", "fasthttp-bare"},
			{"base", "base (" + env("BASE_COMMIT") + ")"}}
		for _, o := range others {
			if v.has(o.proxy) {
				p("ebb/%s: %s in req/s, %s in µs CPU/req  \n", o.name, r.ratio(v, "ebb", o.proxy, "rps"), r.ratio(v, "ebb", o.proxy, "cpu_us_per_req"))
			}
		}
		for _, k := range ebbKinds {
			if v.has(k.name) {
				p("%s/ebb (%s): %s in req/s, %s in µs CPU/req  \n", k.name, k.what, r.ratio(v, k.name, "ebb", "rps"), r.ratio(v, k.name, "ebb", "cpu_us_per_req"))
			}
		}
	}
	if f := env("PROFILE_FILE"); f != "" {
		p("\nebb's CPU and allocation profile under the h2c load: `results/%s`.\n", filepath.Base(f))
	}
}

// ratio is a's median of column c over b's.
func (r *run) ratio(v variant, a, b, c string) string {
	return ratio(r.col(v.name, a, c), r.col(v.name, b, c))
}

func (r *run) spanCounts(p func(string, ...any)) {
	if len(r.spans) == 0 {
		return
	}
	p("\n## Spans exported\n\n")
	p("A sampled request makes two spans (server, client). The batch span processor drops what its queue has no room for.\n\n")
	for _, t := range []string{"ebb-trace100", "ebb-trace1"} {
		n, ok := r.spans[t]
		if !ok {
			continue
		}
		reqs := 0.0
		for _, q := range r.runs.column("requests", func(m map[string]string) bool { return m["proxy"] == t }) {
			reqs += num(q)
		}
		p("- %s: %s spans reached bench/otlp-sink over all its runs (warm-ups and checks included), for %d requests in its measured runs\n", t, n, int64(reqs))
	}
}

// idleTables give what an idle connection costs each proxy: a client
// connection (idle, idle-h1) or an upstream one (idle-up).
func (r *run) idleTables(p func(string, ...any)) {
	for _, part := range []struct{ name, conns, title string }{
		{"idle", "IDLE_CONNS", "Memory per idle HTTP/2 connection, %s connections (bench/idle-h2)"},
		{"idle-h1", "IDLE_H1_CONNS", "Memory per idle HTTP/1.1 keep-alive connection, %s connections (bench/idle-h2 -proto h1)"},
		{"idle-up", "IDLE_UP_CONNS", "Memory per idle upstream HTTP/2 connection, %s connections (bench/idle-h2 -inflight, -origin)"},
	} {
		in := func(m map[string]string) bool { return m["part"] == part.name }
		targets := r.idle.column("proxy", in)
		if len(targets) == 0 {
			continue
		}
		before, after := r.idle.column("vmrss_before_kb", in), r.idle.column("vmrss_after_kb", in)
		p("\n## "+part.title+"\n\n", env(part.conns))
		if part.name == "idle-up" {
			r.idleUpTable(p, targets, before, after, r.idle.column("held", in))
			continue
		}
		p("| proxy | VmRSS before | with the connections | per connection |\n")
		p("|---|---:|---:|---:|\n")
		n := float64(envInt(part.conns))
		for i, t := range targets {
			a, b := num(before[i]), num(after[i])
			p("| %s | %.1f MiB | %.1f MiB | %.1f KiB |\n", t, a/1024, b/1024, (b-a)/n)
		}
	}
}

// idleUpTable is the idle-up part's table. A proxy gets a figure only if
// the origin counted exactly IDLE_UP_CONNS connections open when its
// memory was read: with fewer (it closed some, or multiplexed), or more,
// the growth is not that of IDLE_UP_CONNS idle connections.
func (r *run) idleUpTable(p func(string, ...any), targets, before, after, held []string) {
	n := envInt("IDLE_UP_CONNS")
	p("%d requests in flight at once through the proxy (%s client connections, %s streams each) to an h2c origin that allows one stream "+
		"per connection (SETTINGS_MAX_CONCURRENT_STREAMS 1) and answers none until all are in flight: the proxy opens %d upstream connections, "+
		"which then sit idle in its pool. VmRSS (nginx: its worker's) fresh, and 1 s after the answers (the client gone); "+
		"the upstream connections still open then, as the origin counts them. The growth also holds what the proxy kept of the %d requests "+
		"(memory freed but not given back to the system).\n\n",
		n, env("IDLE_UP_CLIENTS"), env("IDLE_UP_STREAMS"), n, n)
	p("| proxy | VmRSS before | with the connections | upstream connections open | per connection |\n")
	p("|---|---:|---:|---:|---:|\n")
	for i, t := range targets {
		a, b := num(before[i]), num(after[i])
		h, per := "?", "– (not all held)"
		if i < len(held) {
			h = held[i]
		}
		if h == strconv.Itoa(n) {
			per = fmt.Sprintf("%.1f KiB", (b-a)/float64(n))
		}
		p("| %s | %.1f MiB | %.1f MiB | %s of %d | %s |\n", t, a/1024, b/1024, h, n, per)
	}
}

// slowTable gives, per proxy, the normal client alone and attacked and
// what became of the slow connections.
func (r *run) slowTable(p func(string, ...any)) {
	targets := r.slowTargets()
	if len(targets) == 0 {
		return
	}
	hold := env("SLOW_HOLD")
	p("\n## Slowloris: %s slow connections for %ss, a client at %s connections (bench/slowloris, wrk)\n\n", env("SLOW_CONNS"), hold, env("SLOW_CLIENT_CONNS"))
	p("Half the slow connections send a request head a header line every 5 s and never end it, half a POST body (Content-Length: 65536) a byte a second. The client's latency alone, then during the attack's first %ss; the slow connections the proxy still held when the attack ended (of those opened), and when it cut the others (median, seconds after they opened).\n\n", env("DURATION"))
	p("| proxy | req/s alone | req/s attacked | p99 alone | p99 attacked | slow conns open at %ss | heads cut after | bodies cut after | answers to the attack (last round) |\n", hold)
	p("|---|---:|---:|---:|---:|---:|---:|---:|---|\n")
	for _, t := range targets {
		answers := r.slow.column("answers", func(m map[string]string) bool { return m["proxy"] == t })
		p("| %s | %s | %s | %s | %s | %s of %s | %s | %s | %s |\n", t,
			fixed(r.col("slow-base", t, "rps"), 0), fixed(r.col("slow-attack", t, "rps"), 0),
			fmtUS(r.col("slow-base", t, "p99_us")), fmtUS(r.col("slow-attack", t, "p99_us")),
			r.slowCol(t, "open"), r.slowCol(t, "opened"),
			fmtS(r.slowCol(t, "heads_cut_p50_s")), fmtS(r.slowCol(t, "bodies_cut_p50_s")),
			strings.ReplaceAll(answers[len(answers)-1], ",", ", "))
	}
}
