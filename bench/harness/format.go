package main

import (
	"fmt"
	"math"
	"math/big"
	"os"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// table is a tab-separated file with a header line.
type table struct {
	cols []string
	rows [][]string
}

// readTable reads path; a file that does not exist is an empty table (the
// parts that write it did not run).
func readTable(path string) (table, error) {
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return table{}, nil
	}
	if err != nil {
		return table{}, err
	}
	var t table
	for l := range strings.Lines(string(b)) {
		cells := strings.Split(strings.TrimSuffix(l, "\n"), "\t")
		if t.cols == nil {
			t.cols = cells
			continue
		}
		t.rows = append(t.rows, cells)
	}
	return t, nil
}

// column returns the values of column name in the rows where keep holds.
func (t table) column(name string, keep func(row map[string]string) bool) []string {
	k := slices.Index(t.cols, name)
	var out []string
	for _, r := range t.rows {
		m := map[string]string{}
		for i, c := range t.cols {
			if i < len(r) {
				m[c] = r[i]
			}
		}
		if keep(m) && k < len(r) {
			out = append(out, r[k])
		}
	}
	return out
}

// num reads a figure as awk would: the number it starts with, 0 if none.
func num(s string) float64 {
	s = strings.TrimSpace(s)
	for end := len(s); end > 0; end-- {
		if f, err := strconv.ParseFloat(s[:end], 64); err == nil {
			return f
		}
	}
	return 0
}

// median is the median of the figures: the middle one as written, or the
// mean of the two middle ones as awk prints a number; "NaN" for none.
// (The report has always been rendered from these strings: keeping them
// keeps its figures to the digit.)
func median(vals []string) string {
	if len(vals) == 0 {
		return "NaN"
	}
	v := slices.Clone(vals)
	slices.SortStableFunc(v, func(a, b string) int { return cmpNum(num(a), num(b)) })
	n := len(v)
	if n%2 == 1 {
		return v[n/2]
	}
	return awkNumber((num(v[n/2-1]) + num(v[n/2])) / 2)
}

func cmpNum(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// awkNumber formats x as awk's print does: an integer as one, anything
// else with six significant digits (OFMT).
func awkNumber(x float64) string {
	if x == math.Trunc(x) && math.Abs(x) < 1<<53 {
		return strconv.FormatFloat(x, 'f', 0, 64)
	}
	return fmt.Sprintf("%.6g", x)
}

// fixed writes a figure with prec decimals as the report always has, from
// bash's printf, which reads it as a long double (x86-64: a 64-bit
// mantissa) before rounding: a median of two figures written to two
// decimals ends in 5, and a float64 rounds some of those ties the other
// way.
func fixed(s string, prec int) string {
	f, _, err := big.ParseFloat(strings.TrimSpace(s), 10, 64, big.ToNearestEven)
	if err != nil {
		return fmt.Sprintf("%.*f", prec, num(s))
	}
	return f.Text('f', prec)
}

// ratio is a/b to two decimals, "–" without b.
func ratio(a, b string) string {
	if b == "" || num(b) == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f", num(a)/num(b))
}

// fmtUS writes a latency in µs: "123 µs", "1.23 ms".
func fmtUS(s string) string {
	x := num(s)
	if x >= 1000 {
		return fmt.Sprintf("%.2f ms", x/1000)
	}
	return fmt.Sprintf("%.0f µs", x)
}

// fmtS writes seconds, "–" for none (NaN: nothing cut).
func fmtS(s string) string {
	if s == "NaN" {
		return "–"
	}
	return fmt.Sprintf("%.1f s", num(s))
}

// columnT aligns tab-separated lines as column -t -s '\t' (util-linux)
// does: every cell but the last column's padded to its column's width,
// two spaces between cells.
func columnT(lines [][]string) string {
	var width []int
	for _, r := range lines {
		for i, c := range r {
			if i == len(width) {
				width = append(width, 0)
			}
			width[i] = max(width[i], utf8.RuneCountInString(c))
		}
	}
	var b strings.Builder
	for _, r := range lines {
		for i, c := range r {
			b.WriteString(c)
			if i < len(width)-1 {
				b.WriteString(strings.Repeat(" ", width[i]-utf8.RuneCountInString(c)) + "  ")
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}
