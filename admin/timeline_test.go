package admin

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ebb-proxy/ebb/config"
	"github.com/ebb-proxy/ebb/drain"
	"github.com/ebb-proxy/ebb/proxy/downstream"
)

// noServer is a drain.Server with nothing to stop.
type noServer struct{}

func (noServer) StopAccepting() {}
func (noServer) Close() error   { return nil }

// TestDrainTimeline follows a real drain controller's drain (no
// connections, a 600 ms announce phase) through the three timeline
// endpoints: the progress stream opened before the trigger gets each
// sample, in order, then the outcome, and ends; the JSON and the page
// show the drain before, and after.
func TestDrainTimeline(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg := config.Drain{Delay: 600 * time.Millisecond, Quiet: 100 * time.Millisecond, Timeout: 10 * time.Second,
		AcceptUntil: config.AcceptUntilExit, HTTP1: config.DrainHTTP1{IdleClose: config.IdleClose(time.Second)}}
	ctl := drain.NewController(cfg, downstream.NewRegistry(), noServer{}, quiet)
	s, err := Start(Options{Address: "127.0.0.1:0", Readiness: &flag{}, Config: func() any { return nil },
		Drain: ctl.Trigger, Timeline: ctl.Timeline(), Log: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	defer http.DefaultClient.CloseIdleConnections()
	base := "http://" + s.Addr().String()

	if code, body := get(t, base+"/drain/timeline"); code != 200 || !strings.Contains(body, `"samples": []`) || strings.Contains(body, "started") {
		t.Fatalf("GET /drain/timeline before a drain = %d %s", code, body)
	}
	resp, err := http.Get(base + "/drain/report")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if ct, csp := resp.Header.Get("Content-Type"), resp.Header.Get("Content-Security-Policy"); ct != "text/html; charset=utf-8" || !strings.HasPrefix(csp, "default-src 'none'") {
		t.Errorf("GET /drain/report: Content-Type %q, Content-Security-Policy %q", ct, csp)
	}
	if !strings.Contains(string(page), "No drain has begun") || !strings.Contains(string(page), `http-equiv="refresh"`) {
		t.Errorf("the report page before a drain:\n%s", page)
	}

	stream, err := http.Get(base + "/drain/progress")
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Body.Close()
	if ct := stream.Header.Get("Content-Type"); ct != "application/x-ndjson" {
		t.Errorf("GET /drain/progress: Content-Type %q", ct)
	}
	done := make(chan drain.Result, 1)
	go func() {
		res, _ := ctl.Run(context.Background())
		done <- res
	}()
	post, err := http.Post(base+"/drain", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	post.Body.Close()
	if post.StatusCode != 202 {
		t.Fatalf("POST /drain = %d", post.StatusCode)
	}

	var samples []drain.Sample
	var out *drain.Outcome
	sc := bufio.NewScanner(stream.Body)
	for sc.Scan() {
		var l ProgressLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		if out != nil {
			t.Fatalf("a line after the outcome: %s", sc.Text())
		}
		switch {
		case l.Sample != nil:
			samples = append(samples, *l.Sample)
		case l.Outcome != nil:
			out = l.Outcome
		default:
			t.Fatalf("a line with neither a sample nor the outcome: %s", sc.Text())
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	res := <-done
	if out == nil || out.Reason != drain.ReasonDrained || res.Reason != drain.ReasonDrained {
		t.Fatalf("outcome %+v, result %+v; want drained", out, res)
	}
	if !strings.Contains(out.Summary, "ended drained") {
		t.Errorf("summary %q", out.Summary)
	}
	// 600 ms of announce: a sample at 0 and about every 100 ms, then the
	// signal, wait and exit phases, each marked by a sample.
	if len(samples) < 9 {
		t.Fatalf("%d samples streamed: %+v", len(samples), samples)
	}
	order := map[string]int{"announce": 1, "signal": 2, "wait": 3, "exit": 4}
	for i, s := range samples {
		if order[s.Phase] == 0 || s.LeftMS <= 0 || s.LeftMS > 10000 {
			t.Fatalf("sample %d: %+v", i, s)
		}
		if i > 0 && (s.AtMS < samples[i-1].AtMS || order[s.Phase] < order[samples[i-1].Phase]) {
			t.Fatalf("sample %d out of order: %+v after %+v", i, s, samples[i-1])
		}
	}
	if samples[0].Phase != "announce" || samples[len(samples)-1].Phase != "exit" {
		t.Errorf("streamed from %s to %s, want announce to exit", samples[0].Phase, samples[len(samples)-1].Phase)
	}

	code, body := get(t, base+"/drain/timeline")
	var rep drain.Report
	if err := json.Unmarshal([]byte(body), &rep); code != 200 || err != nil {
		t.Fatalf("GET /drain/timeline = %d %v", code, err)
	}
	if rep.Outcome == nil || len(rep.Phases) != 4 || rep.Settings.DelayMS != 600 {
		t.Errorf("the timeline after the drain: %+v", rep)
	}
	if len(rep.Samples) != len(samples) {
		t.Errorf("%d samples streamed, %d in the timeline: the stream must carry every one", len(samples), len(rep.Samples))
	}
	if _, page := get(t, base+"/drain/report"); strings.Contains(page, `http-equiv="refresh"`) || !strings.Contains(page, `<polyline data-series="http1"`) {
		t.Errorf("the report page after the drain:\n%s", page)
	}
	// A progress stream opened after the drain gets the whole drain at
	// once, and its end.
	if code, body := get(t, base+"/drain/progress"); code != 200 || strings.Count(body, "\n") != len(rep.Samples)+1 || !strings.HasSuffix(body, "}}\n") || !strings.Contains(body, `{"outcome":{"reason":"drained"`) {
		t.Errorf("GET /drain/progress after the drain = %d %q", code, body)
	}
}
