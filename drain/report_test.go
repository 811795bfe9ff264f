package drain

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// sampleReport is a drain of 120 connections that ends drained after 6s.
func sampleReport() Report {
	r := Report{Started: time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC), Cause: "signal terminated",
		Settings: Settings{DelayMS: 1000, SpreadMS: 3000, TimeoutMS: 30000, AcceptUntil: "exit", IntervalMS: 100},
		Phases:   []PhaseMark{{"announce", 0}, {"signal", 1000}, {"wait", 4000}, {"exit", 6000}}}
	for t := int64(0); t <= 6000; t += 100 {
		left := 0
		if t < 5500 {
			left = int(100 - t*100/5500)
		}
		s := Sample{AtMS: t, LeftMS: 30000 - t, InFlight: left / 4, Requests: t / 2, Dials: t / 1000,
			Connections: Connections{Total: left + left/2, HTTP1: States{Idle: left}, HTTP2: States{Active: left / 2}}}
		if t >= 1000 {
			s.CloseSignals = CloseSignals{HTTP1: min((t-1000)/30, 100), HTTP2: min((t-1000)/60, 50)}
			s.IdleCloses = min((t-1000)/40, 80)
		}
		r.Samples = append(r.Samples, s)
	}
	r.Outcome = &Outcome{Reason: ReasonDrained, TookMS: 6000, Summary: "The drain (signal terminated) ended drained after 6.00s."}
	return r
}

// TestReportHTML checks the page: self-contained (no script, no external
// reference), one polyline per series with a point per sample, phase
// bands, the summary, and the refresh only while a drain runs.
func TestReportHTML(t *testing.T) {
	rep := sampleReport()
	var b bytes.Buffer
	if err := rep.WriteHTML(&b); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	for _, bad := range []string{"<script", "src=", "href=", "@import", "url("} {
		if strings.Contains(page, bad) {
			t.Errorf("the page holds %q: it must need nothing but itself", bad)
		}
	}
	if strings.Contains(page, `http-equiv="refresh"`) {
		t.Error("a finished drain's page refreshes itself")
	}
	if !strings.Contains(page, rep.Outcome.Summary) {
		t.Error("the page lacks the summary")
	}
	for _, p := range panels {
		for _, s := range p.Series {
			re := regexp.MustCompile(fmt.Sprintf(`<polyline data-series="%s" data-points="(\d+)" stroke="%s" points="([^"]*)"`, s.Name, s.Color))
			m := re.FindStringSubmatch(page)
			if m == nil {
				t.Errorf("no polyline for %s", s.Name)
				continue
			}
			if want := fmt.Sprint(len(rep.Samples)); m[1] != want || len(strings.Fields(m[2])) != len(rep.Samples) {
				t.Errorf("%s: %s points declared, %d drawn; want %s", s.Name, m[1], len(strings.Fields(m[2])), want)
			}
		}
	}
	if n := strings.Count(page, `class="phase"`); n != len(rep.Phases)*len(panels) {
		t.Errorf("%d phase bands, want %d", n, len(rep.Phases)*len(panels))
	}
	// The legend gives each series' largest value; the y axis of the
	// requests panel is scaled to its (500 per second).
	if !strings.Contains(page, "HTTP/1 connections (max 100)") || !strings.Contains(page, "requests per second (max 500)") || !strings.Contains(page, ">250</text>") {
		t.Error("the connections panel's legend or axis is off")
	}

	rep.Outcome = nil
	b.Reset()
	if err := rep.WriteHTML(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), `http-equiv="refresh"`) {
		t.Error("a running drain's page does not refresh itself")
	}
	b.Reset()
	if err := NewTimeline().Report().WriteHTML(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "No drain has begun") || strings.Contains(b.String(), "<polyline") {
		t.Error("the page before any drain does not say so")
	}
}

func TestNiceMax(t *testing.T) {
	for v, want := range map[float64]float64{0: 1, 0.5: 1, 1: 1, 1.5: 2, 3: 5, 7: 10, 150: 200, 2001: 5000} {
		if got := niceMax(v); got != want {
			t.Errorf("niceMax(%g) = %g, want %g", v, got, want)
		}
	}
}

// TestReportWriteFile: JSON for a .json path, the page otherwise, and no
// temporary file left behind.
func TestReportWriteFile(t *testing.T) {
	dir := t.TempDir()
	rep := sampleReport()
	for _, name := range []string{"drain.json", "drain.html"} {
		path := filepath.Join(dir, name)
		if err := rep.WriteFile(path); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if name == "drain.json" {
			var got Report
			if err := json.Unmarshal(b, &got); err != nil || len(got.Samples) != len(rep.Samples) || got.Outcome.Reason != ReasonDrained {
				t.Errorf("%s: %v, %d samples", name, err, len(got.Samples))
			}
		} else if !bytes.HasPrefix(b, []byte("<!DOCTYPE html>")) {
			t.Errorf("%s does not hold the page: %.40q", name, b)
		}
	}
	if err := rep.WriteFile(filepath.Join(dir, "missing", "drain.html")); err == nil {
		t.Error("writing into a missing directory did not fail")
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 2 {
		t.Errorf("%d files in the directory, want the 2 reports", len(ents))
	}
}

// TestRequestRate: the requests-per-second series is steady across a
// sample taken a millisecond after another (a phase change).
func TestRequestRate(t *testing.T) {
	ss := []Sample{{AtMS: 0, Requests: 0}, {AtMS: 100, Requests: 50}, {AtMS: 200, Requests: 100}, {AtMS: 201, Requests: 100}, {AtMS: 300, Requests: 150}}
	var rate func([]Sample, int) float64
	for _, s := range panels[2].Series {
		if s.Name == "requests_per_second" {
			rate = s.value
		}
	}
	for n, want := range []float64{500, 500, 500, 50 * 1000.0 / 101, 50 * 1000.0 / 99} {
		if got := rate(ss, n); got != want {
			t.Errorf("rate at sample %d = %g, want %g", n, got, want)
		}
	}
}
