package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"html"
	"image"
	"image/png"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ebb-proxy/ebb/admin"
	"github.com/ebb-proxy/ebb/drain"
	"github.com/ebb-proxy/ebb/examples/loadgen"
)

// progressSeen is what a client of /drain/progress read, once the stream
// has ended.
type progressSeen struct {
	samples []drain.Sample
	outcome *drain.Outcome
	err     error
}

// followProgress reads the drain's progress stream at url in the
// background: wait is closed at the first sample of the wait phase, the
// result is sent when the stream ends.
func followProgress(t *testing.T, url string) (wait <-chan struct{}, seen <-chan progressSeen) {
	t.Helper()
	resp, err := adminStream.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		resp.Body.Close()
		t.Fatalf("GET %s = %s", url, resp.Status)
	}
	w, s := make(chan struct{}), make(chan progressSeen, 1)
	go func() {
		defer resp.Body.Close()
		var p progressSeen
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			var l admin.ProgressLine
			if p.err = json.Unmarshal(sc.Bytes(), &l); p.err != nil {
				break
			}
			if l.Outcome != nil {
				p.outcome = l.Outcome
				continue
			}
			if l.Sample.Phase == "wait" && (len(p.samples) == 0 || p.samples[len(p.samples)-1].Phase != "wait") {
				close(w)
			}
			p.samples = append(p.samples, *l.Sample)
		}
		if p.err == nil {
			p.err = sc.Err()
		}
		s <- p
	}()
	return w, s
}

// adminStream reads streams from admin servers: no overall timeout (the
// stream lasts the drain), no connection kept.
var adminStream = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

// TestDrainReport is the drain an operator watches: ebb under keep-alive
// load from every client kind, `ebb drain -wait` run as a process, the
// progress stream read alongside; once the drain waits for the last
// connections, the load stops (the load balancer has moved its clients
// away). It checks that no client saw an error, that the stream carried
// the whole drain (each phase, connections of both protocols at the
// trigger, close signals of both, none left and no error at the end), that
// `ebb drain -wait` showed it as lines and ended with the summary the log
// has, and that the report written at exit (drain.report) is a page a
// real browser renders: checkReportInBrowser.
func TestDrainReport(t *testing.T) {
	t.Parallel()
	if !testing.Short() {
		browserPath(t) // fail now, not after the drain, without one
	}
	origin := newOrigin(t, mixedOrigin(false))
	report := filepath.Join(t.TempDir(), "drain.html")
	e := startEbb(t, singleClusterYAML(hostPort(origin))+scenarioDrain(15*time.Second,
		"  http2: { goaway_grace: 300ms }", fmt.Sprintf("  report: %q", report)))
	l := startLoad(t, loadSpec{addr: e.addr("public"), kinds: loadgen.Kinds, workers: 3,
		request: mixedRequest, warmOK: 150, limit: time.Minute})
	recv(t, l.Warm(), "the load to warm up")

	wait, seen := followProgress(t, e.adminURL("/drain/progress"))
	var out bytes.Buffer
	cli := exec.Command(ebbBin, "drain", "-admin", e.admin, "-wait", "-progress", "lines", "-timeout", "30s")
	cli.Stdout, cli.Stderr = &out, &out
	if err := cli.Start(); err != nil {
		t.Fatal(err)
	}
	cliDone := make(chan error, 1)
	go func() { cliDone <- cli.Wait() }()
	recv(t, wait, "the drain's wait phase on the progress stream")
	l.Stop()
	if err := recv(t, cliDone, "ebb drain -wait to return"); err != nil {
		t.Fatalf("ebb drain -wait: %v; its output:\n%s", err, out.String())
	}
	awaitExit(t, e, "ebb to exit after the drain")
	if code := e.exit(); code != 0 {
		t.Fatalf("ebb exited %d, want 0; its log:\n%s", code, e.logs())
	}
	checkDrainEnd(t, e, "drained")
	res := l.Results()
	if len(res.Fails) != 0 || res.OK == 0 {
		t.Errorf("%d of %d requests failed; the first:\n%s", len(res.Fails), res.Requests, formatFailures(res.Fails, l.Began(), 20))
	}

	p := recv(t, seen, "the progress stream to end")
	if p.err != nil || p.outcome == nil || p.outcome.Reason != drain.ReasonDrained || len(p.samples) < 8 {
		t.Fatalf("progress stream: %d samples, outcome %+v, err %v", len(p.samples), p.outcome, p.err)
	}
	first, last := p.samples[0], p.samples[len(p.samples)-1]
	var phases []string
	for _, s := range p.samples {
		if len(phases) == 0 || phases[len(phases)-1] != s.Phase {
			phases = append(phases, s.Phase)
		}
	}
	if got := strings.Join(phases, " "); got != "announce signal wait exit" {
		t.Errorf("phases on the stream: %s", got)
	}
	if first.Connections.HTTP1.Total() < 2 || first.Connections.HTTP2.Total() < 1 || first.LeftMS < 14000 {
		t.Errorf("first sample %+v: want HTTP/1 and HTTP/2 connections open at the trigger, 15s left", first)
	}
	if last.CloseSignals.HTTP1 < 1 || last.CloseSignals.HTTP2 < 1 || last.Errors != 0 || last.ForcedCloses != 0 ||
		last.Connections.Total != 0 || last.Requests < 1 {
		t.Errorf("last sample %+v: want close signals of both kinds, requests served, no error, nothing left", last)
	}
	sum := e.logRecords("drain summary")
	if len(sum) != 1 || sum[0]["summary"] != p.outcome.Summary {
		t.Errorf("the log's summary %v is not the stream's %q", sum, p.outcome.Summary)
	}

	text := out.String()
	t.Logf("ebb drain -wait -progress lines:\n%s", text)
	for _, want := range []string{"ebb at " + e.admin + ": accepted (drain)\n", "drain signal ", "drain wait ", "drain exit ",
		p.outcome.Summary + "\n", "ebb at " + e.admin + ": drain ended: drained after ", "(ebb exits 0)\n",
		"ebb at " + e.admin + ": exited\n"} {
		if !strings.Contains(text, want) {
			t.Errorf("ebb drain -wait's output lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "\x1b") {
		t.Errorf("ebb drain -wait -progress lines wrote escape sequences:\n%q", text)
	}

	page, err := os.ReadFile(report)
	if err != nil {
		t.Fatalf("drain.report: %v; ebb's log:\n%s", err, e.logs())
	}
	if !bytes.HasPrefix(page, []byte("<!DOCTYPE html>")) || !bytes.Contains(page, []byte(html.EscapeString(p.outcome.Summary))) {
		t.Fatalf("drain.report does not hold the page with the summary:\n%.400s", page)
	}
	if recs := e.logRecords("drain report written"); len(recs) != 1 || recs[0]["path"] != report {
		t.Errorf("\"drain report written\" lines %v", recs)
	}
	checkReportInBrowser(t, browserPath(t), report, p.samples)
}

// Each series of the report's charts, and its color: the browser test
// looks for both.
var reportSeries = map[string]string{
	"http1": "#1f77b4", "http2": "#ff7f0e", "websocket": "#637939", "event_streams": "#e7969c",
	"unknown": "#7f7f7f", "in_flight": "#2ca02c",
	"close_http1": "#9467bd", "close_http2": "#8c564b", "close_websocket": "#843c39", "ended_event_streams": "#7b4173",
	"idle_closes": "#17becf", "forced_closes": "#e377c2",
	"upstream_dials": "#bcbd22", "errors": "#d62728", "requests_per_second": "#393b79",
}

// checkReportInBrowser renders the report page in headless Chromium. The
// DOM it parsed must hold each series as a polyline with a point per
// sample; the screenshot must not be blank (a tenth of its pixels not
// white, many colors), must show each series' legend swatch in its color
// (14×10 pixels), and must show the lines of the series that moved (the
// connections of both protocols, both kinds of close signal, the requests
// per second) beyond their swatches.
func checkReportInBrowser(t *testing.T, browser, page string, samples []drain.Sample) {
	t.Helper()
	url := "file://" + page
	common := []string{"--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--force-device-scale-factor=1"}
	dom, err := exec.Command(browser, append(common, "--dump-dom", url)...).Output()
	if err != nil {
		t.Fatalf("%s --dump-dom: %v", browser, err)
	}
	points := regexp.MustCompile(`<polyline data-series="([a-z0-9_]+)" data-points="(\d+)" stroke="(#[0-9a-f]{6})" points="([^"]*)"`)
	found := map[string]bool{}
	for _, m := range points.FindAllSubmatch(dom, -1) {
		name, color := string(m[1]), string(m[3])
		n, _ := strconv.Atoi(string(m[2]))
		if reportSeries[name] != color || n != len(samples) || len(strings.Fields(string(m[4]))) != n {
			t.Errorf("series %s in the DOM: color %s, %d points (%d drawn), want %s and %d", name, color, n,
				len(strings.Fields(string(m[4]))), reportSeries[name], len(samples))
		}
		found[name] = true
	}
	for name := range reportSeries {
		if !found[name] {
			t.Errorf("series %s is not in the DOM the browser parsed", name)
		}
	}

	shot := filepath.Join(filepath.Dir(page), "drain.png")
	if dir := os.Getenv("EBB_KEEP_REPORT"); dir != "" {
		defer func() { exec.Command("cp", page, shot, dir).Run() }()
	}
	args := append(common, "--window-size=1100,1500", "--screenshot="+shot, url)
	if out, err := exec.Command(browser, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s --screenshot: %v\n%s", browser, err, out)
	}
	f, err := os.Open(shot)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("the screenshot: %v", err)
	}
	counts, total, white := pixelCounts(img)
	if b := img.Bounds(); b.Dx() != 1100 || b.Dy() != 1500 {
		t.Errorf("screenshot of %v, want 1100×1500", b)
	}
	if white > total*9/10 || len(counts) < 50 {
		t.Fatalf("the screenshot is blank: %d of %d pixels white, %d colors", white, total, len(counts))
	}
	moved := map[string]bool{"http1": true, "http2": true, "close_http1": true, "close_http2": true, "requests_per_second": true}
	for name, hex := range reportSeries {
		want := 14 * 10 // the legend swatch
		if moved[name] {
			want += 60 // and its line
		}
		if got := counts[hex]; got < want {
			t.Errorf("series %s: %d pixels of %s in the screenshot, want at least %d", name, got, hex, want)
		}
	}
}

// pixelCounts counts an image's pixels by color (#rrggbb), and its white
// ones.
func pixelCounts(img image.Image) (counts map[string]int, total, white int) {
	counts = map[string]int{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			c := fmt.Sprintf("#%02x%02x%02x", r>>8, g>>8, bl>>8)
			counts[c]++
			if c == "#ffffff" {
				white++
			}
			total++
		}
	}
	return counts, total, white
}

// browserPath finds Debian's headless Chromium (e2e/deps.sh installs it):
// chromium-headless-shell, or chromium (see tool).
func browserPath(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("chromium-headless-shell"); err == nil && !testing.Short() {
		return p
	}
	return tool(t, "chromium")
}
