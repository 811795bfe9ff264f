package drain

import (
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

//go:embed report.html.tmpl
var reportHTML string

var reportTmpl = template.Must(template.New("report").Parse(reportHTML))

// The chart's geometry, in SVG user units: each panel is chartW wide and
// chartH high, its plot inset by the margins.
const (
	chartW     = 1000
	chartH     = 220
	plotLeft   = 64
	plotRight  = 16
	plotTop    = 10
	plotBottom = 30
	plotW      = chartW - plotLeft - plotRight
	plotH      = chartH - plotTop - plotBottom
)

// series is one line of a panel: its name (the data-series attribute the
// tests look for), its legend label, its color, and its value per sample.
type series struct {
	Name, Label, Color string
	value              func(ss []Sample, n int) float64
}

// The panels and their series. Colors are distinct at a glance and in a
// screenshot: each appears nowhere else on the page.
var panels = []struct {
	Title  string
	Series []series
}{
	{"Open connections and requests in flight", []series{
		{"http1", "HTTP/1 connections", "#1f77b4", func(ss []Sample, n int) float64 { return float64(ss[n].Connections.HTTP1.Total()) }},
		{"http2", "HTTP/2 connections", "#ff7f0e", func(ss []Sample, n int) float64 { return float64(ss[n].Connections.HTTP2.Total()) }},
		{"websocket", "WebSockets", "#637939", func(ss []Sample, n int) float64 { return float64(ss[n].Connections.WebSocket.Total()) }},
		{"event_streams", "event streams", "#e7969c", func(ss []Sample, n int) float64 { return float64(ss[n].EventStreams) }},
		{"unknown", "silent connections", "#7f7f7f", func(ss []Sample, n int) float64 { return float64(ss[n].Connections.Unknown.Total()) }},
		{"in_flight", "requests in flight", "#2ca02c", func(ss []Sample, n int) float64 { return float64(ss[n].InFlight) }},
	}},
	{"What the drain did (cumulative)", []series{
		{"close_http1", "Connection: close sent", "#9467bd", func(ss []Sample, n int) float64 { return float64(ss[n].CloseSignals.HTTP1) }},
		{"close_http2", "GOAWAY begun", "#8c564b", func(ss []Sample, n int) float64 { return float64(ss[n].CloseSignals.HTTP2) }},
		{"close_websocket", "WebSocket close (1001) sent", "#843c39", func(ss []Sample, n int) float64 { return float64(ss[n].CloseSignals.WebSocket) }},
		{"ended_event_streams", "event streams ended", "#7b4173", func(ss []Sample, n int) float64 { return float64(ss[n].CloseSignals.EventStreams) }},
		{"idle_closes", "idle connections closed", "#17becf", func(ss []Sample, n int) float64 { return float64(ss[n].IdleCloses) }},
		{"forced_closes", "closed by force", "#e377c2", func(ss []Sample, n int) float64 { return float64(ss[n].ForcedCloses) }},
		{"upstream_dials", "upstream dials", "#bcbd22", func(ss []Sample, n int) float64 { return float64(ss[n].Dials) }},
		{"errors", "errors made by ebb", "#d62728", func(ss []Sample, n int) float64 { return float64(ss[n].Errors) }},
	}},
	{"Requests received per second", []series{
		{"requests_per_second", "requests per second", "#393b79", func(ss []Sample, n int) float64 {
			// The rate since the sample at least half an interval before
			// (samples at phase changes fall between the others); at the
			// first sample, that of the one that follows it.
			n = max(n, min(1, len(ss)-1))
			j := n - 1
			for j > 0 && ss[n].AtMS-ss[j].AtMS < SampleInterval.Milliseconds()/2 {
				j--
			}
			if j < 0 || ss[n].AtMS <= ss[j].AtMS {
				return 0
			}
			return float64(ss[n].Requests-ss[j].Requests) * 1000 / float64(ss[n].AtMS-ss[j].AtMS)
		}},
	}},
}

// Phase band colors, light enough that the lines stay readable.
var phaseColors = map[string]string{
	"announce": "#fff6d5", "signal": "#e3f1ff", "wait": "#e9f7e4", "exit": "#f4e6f4",
}

type pageData struct {
	G       geometry
	Report  Report
	Running bool // a drain is going: the page refreshes itself
	Panels  []panelData
	Phases  []phaseRow
	TookS   string
}

// geometry is the panels' layout, for the template.
type geometry struct{ W, H, Left, Right, Top, Bottom, PlotH int }

var geom = geometry{W: chartW, H: chartH, Left: plotLeft, Right: chartW - plotRight,
	Top: plotTop, Bottom: chartH - plotBottom, PlotH: plotH}

type panelData struct {
	Title  string
	Bands  []band
	Ticks  []tick
	XTicks []tick
	Lines  []line
}

type band struct {
	X, W         float64
	Color, Phase string
	Label        string // empty when the band is too narrow for it
}

type tick struct {
	Pos   float64
	Label string
}

type line struct {
	Name, Label, Color string
	Points             string
	Count              int
	Max                string
}

type phaseRow struct {
	Phase string
	At    string
}

// WriteHTML writes the report as one self-contained HTML page: a summary,
// the settings and phases, and SVG charts of the samples with the phases
// as bands. It needs nothing but the page (no script, font or image).
// Until the drain has ended it refreshes itself every second.
func (r Report) WriteHTML(w io.Writer) error {
	d := pageData{G: geom, Report: r, Running: r.Outcome == nil}
	if r.Outcome != nil {
		d.TookS = seconds(r.Outcome.TookMS)
	}
	for _, p := range r.Phases {
		d.Phases = append(d.Phases, phaseRow{p.Phase, seconds(p.AtMS)})
	}
	if len(r.Samples) > 0 {
		end := r.Samples[len(r.Samples)-1].AtMS
		if end <= 0 {
			end = 1
		}
		x := func(ms int64) float64 { return plotLeft + float64(ms)*plotW/float64(end) }
		for _, p := range panels {
			pd := panelData{Title: p.Title, XTicks: timeTicks(end, x)}
			for j, ph := range r.Phases {
				to := end
				if j+1 < len(r.Phases) {
					to = r.Phases[j+1].AtMS
				}
				b := band{X: x(ph.AtMS), W: x(to) - x(ph.AtMS), Color: phaseColors[ph.Phase], Phase: ph.Phase, Label: ph.Phase}
				if b.W < 40 {
					b.Label = "" // no room: the phase table names it
				}
				pd.Bands = append(pd.Bands, b)
			}
			vals := make([][]float64, len(p.Series))
			top := 0.0
			for k, s := range p.Series {
				vals[k] = make([]float64, len(r.Samples))
				for n := range r.Samples {
					v := s.value(r.Samples, n)
					vals[k][n] = v
					top = max(top, v)
				}
			}
			ymax := niceMax(top)
			for _, v := range []float64{0, ymax / 2, ymax} {
				pd.Ticks = append(pd.Ticks, tick{Pos: plotTop + plotH - v*plotH/ymax, Label: strconv.FormatFloat(v, 'f', -1, 64)})
			}
			for k, s := range p.Series {
				var pts strings.Builder
				m := 0.0
				for n, v := range vals[k] {
					if n > 0 {
						pts.WriteByte(' ')
					}
					fmt.Fprintf(&pts, "%.1f,%.1f", x(r.Samples[n].AtMS), plotTop+plotH-v*plotH/ymax)
					m = max(m, v)
				}
				pd.Lines = append(pd.Lines, line{Name: s.Name, Label: s.Label, Color: s.Color, Points: pts.String(),
					Count: len(vals[k]), Max: strconv.FormatFloat(m, 'f', -1, 64)})
			}
			d.Panels = append(d.Panels, pd)
		}
	}
	return reportTmpl.Execute(w, d)
}

// WriteFile writes the report to path (drain.report): as JSON when path
// ends in .json, else as the HTML page. The file appears whole or not at
// all: it is written next to path, then renamed.
func (r Report) WriteFile(path string) (err error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if strings.EqualFold(filepath.Ext(path), ".json") {
		enc := json.NewEncoder(f)
		enc.SetIndent("", "  ")
		err = enc.Encode(r)
	} else {
		err = r.WriteHTML(f)
	}
	if err = errors.Join(err, f.Chmod(0o644)); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// niceMax rounds v up to 1, 2 or 5 times a power of ten (at least 1), for
// a y axis whose ticks read well.
func niceMax(v float64) float64 {
	m := 1.0
	for {
		for _, f := range []float64{1, 2, 5} {
			if f*m >= v {
				return f * m
			}
		}
		m *= 10
	}
}

// timeTicks returns the x axis's ticks, at a round number of seconds.
func timeTicks(endMS int64, x func(int64) float64) []tick {
	step := int64(niceMax(float64(endMS) / 8))
	step = max(step, 100)
	var ts []tick
	for t := int64(0); t <= endMS; t += step {
		ts = append(ts, tick{Pos: x(t), Label: seconds(t) + "s"})
	}
	return ts
}

func seconds(ms int64) string {
	return strconv.FormatFloat((time.Duration(ms) * time.Millisecond).Seconds(), 'f', -1, 64)
}
