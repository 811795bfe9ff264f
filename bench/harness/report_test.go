package main

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// TestReport renders the reports of runs kept with KEEP_WORK=1 and
// compares each with its golden file:
//   - testdata/run (every part but h2up, every proxy and a base,
//     PROFILE=1, two rounds, so that medians fall between two figures)
//     against testdata/report.md.golden, the report bench/run.sh wrote of
//     that same run when it still rendered it with awk: the report has not
//     changed in a digit;
//   - testdata/run-h2up (PARTS=h2up with a base, two rounds) against
//     testdata/report-h2up.md.golden, the report that run wrote: the h2up
//     table, its headline and the header of a run without h2c;
//   - testdata/run-idleup (PARTS=idle-up, ebb, nginx and HAProxy) against
//     testdata/report-idleup.md.golden, the report that run wrote: the
//     idle-up table, every proxy holding its 1000 connections;
//   - testdata/run-openloop (PARTS=openloop DURATION=10 ROUNDS=2, ebb,
//     nginx and HAProxy) against testdata/report-openloop.md.golden, the
//     report that run wrote: the four open-loop tables, medians of two
//     rounds, ebb's ratios and the raw runs.
func TestReport(t *testing.T) {
	for _, c := range []struct{ env, run, golden string }{
		{"testdata/report.env", "testdata/run", "testdata/report.md.golden"},
		{"testdata/report-h2up.env", "testdata/run-h2up", "testdata/report-h2up.md.golden"},
		{"testdata/report-idleup.env", "testdata/run-idleup", "testdata/report-idleup.md.golden"},
		{"testdata/report-openloop.env", "testdata/run-openloop", "testdata/report-openloop.md.golden"},
	} {
		t.Run(c.run, func(t *testing.T) {
			b, err := os.ReadFile(c.env)
			if err != nil {
				t.Fatal(err)
			}
			for l := range strings.Lines(string(b)) {
				k, v, _ := strings.Cut(strings.TrimSuffix(l, "\n"), "\t")
				t.Setenv(k, v)
			}
			t.Setenv("WORK", c.run)
			var got strings.Builder
			if err := report(&got); err != nil {
				t.Fatal(err)
			}
			want, err := os.ReadFile(c.golden)
			if err != nil {
				t.Fatal(err)
			}
			if got.String() != string(want) {
				t.Errorf("report:\n%s\nwant (%s):\n%s", got.String(), c.golden, want)
			}
		})
	}
}

// TestIdleUpTableWithoutFigure: a proxy that did not hold exactly
// IDLE_UP_CONNS connections when its memory was read gets no figure, and
// the table says how many it held.
func TestIdleUpTableWithoutFigure(t *testing.T) {
	for k, v := range map[string]string{"IDLE_UP_CONNS": "1000", "IDLE_UP_CLIENTS": "10", "IDLE_UP_STREAMS": "100"} {
		t.Setenv(k, v)
	}
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	r := &run{}
	r.idleUpTable(p, []string{"ebb", "haproxy", "nginx"}, []string{"26416", "14920", "6124"}, []string{"56212", "20000", "24188"},
		[]string{"1000", "37", "1001"})
	for _, want := range []string{
		"| ebb | 25.8 MiB | 54.9 MiB | 1000 of 1000 | 29.8 KiB |\n",
		"| haproxy | 14.6 MiB | 19.5 MiB | 37 of 1000 | – (not all held) |\n",
		"| nginx | 6.0 MiB | 23.6 MiB | 1001 of 1000 | – (not all held) |\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("idle-up table has no %q:\n%s", want, b.String())
		}
	}
}

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		in   []string
		want string
	}{
		{nil, "NaN"},
		{[]string{"3.10"}, "3.10"},
		{[]string{"9", "10", "2.50"}, "9"},            // by value, as written
		{[]string{"41234.57", "41234.79"}, "41234.7"}, // a mean, six digits as awk prints it
		{[]string{"4", "6"}, "5"},
		{[]string{"12.34", "12.35"}, "12.345"},
	} {
		if got := median(c.in); got != c.want {
			t.Errorf("median(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestColumnT(t *testing.T) {
	got := columnT([][]string{{"a", "bbb", "c"}, {"xxxx", "", "z"}, {"q", "w"}, {"µs", "b", "c"}})
	want := "a     bbb  c\nxxxx       z\nq     w    \nµs    b    c\n"
	if got != want {
		t.Errorf("columnT:\n%q\nwant\n%q", got, want)
	}
}

// TestGomaxprocsKnob: the header names a GOMAXPROCS knob only when it was
// set.
func TestGomaxprocsKnob(t *testing.T) {
	t.Setenv("EBB_GOMAXPROCS", "")
	if got := gomaxprocs("EBB_GOMAXPROCS"); got != "" {
		t.Errorf("unset: %q, want nothing", got)
	}
	t.Setenv("BASE_GOMAXPROCS", "2")
	if got, want := gomaxprocs("BASE_GOMAXPROCS"), ", GOMAXPROCS=2 (BASE_GOMAXPROCS)"; got != want {
		t.Errorf("set: %q, want %q", got, want)
	}
}
