package drain

import (
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ebb-proxy/ebb/proxy/downstream"
)

// TestTimelineRecordsDrain runs one drain in fake time and checks what its
// timeline holds: a sample every SampleInterval with the connections by
// protocol and state, the requests in flight (an HTTP/2 connection's open
// streams), the deadline left; each phase with its time; the counters at
// the end; the outcome and its summary.
func TestTimelineRecordsDrain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBubble(t, drainConfig(2*time.Second, 2*time.Second, 30*time.Second))
		tl := b.ctl.Timeline()
		if ss, _, _ := tl.Since(0); len(ss) != 0 {
			t.Fatal("a timeline holds a sample before any drain")
		}
		var idle []*downstream.Conn
		for range 2 {
			c := b.conn(downstream.ProtoHTTP1, true)
			c.SetState(downstream.StateIdle)
			idle = append(idle, c)
		}
		h2 := b.conn(downstream.ProtoHTTP2, true)
		h2.SetState(downstream.StateActive)
		h2.CountStreams(func() int { return 3 })
		b.reg.Stats.Requests.Add(7)

		changed := tl.Changed()
		b.ctl.Trigger("test")
		b.sleepUntil(time.Second)
		select {
		case <-changed:
		default:
			t.Fatal("Changed was not closed by the drain's first samples")
		}
		ss, seen, out := tl.Since(0)
		if len(ss) != 11 || seen != 11 || out != nil {
			t.Fatalf("during the drain: %d samples (%d seen), outcome %v; want 11, none", len(ss), seen, out)
		}
		s := ss[len(ss)-1]
		if s.AtMS != 1000 || s.Phase != "announce" || s.LeftMS != 29000 {
			t.Fatalf("sample at 1s: at %d ms, phase %s, %d ms left; want 1000, announce, 29000", s.AtMS, s.Phase, s.LeftMS)
		}
		c := s.Connections
		if c.Total != 3 || c.HTTP1.Idle != 2 || c.HTTP2.Active != 1 || c.Unknown.Total() != 0 || s.InFlight != 3 {
			t.Fatalf("sample at 1s: %+v, %d in flight; want 2 idle HTTP/1, 1 active HTTP/2, 3 in flight", c, s.InFlight)
		}
		b.sleepUntil(1200 * time.Millisecond)
		if ss, seen, _ := tl.Since(seen); len(ss) != 2 || seen != 13 || ss[0].AtMS != 1100 {
			t.Fatalf("Since(11) after 1.2s: %+v (%d seen), want the samples at 1.1s and 1.2s", ss, seen)
		}

		// The idle HTTP/1 connections are closed a second after their
		// moments (by 4.4s); the HTTP/2 one is left for the test to close.
		b.sleepUntil(5 * time.Second)
		for _, c := range idle {
			if !isClosed(c) {
				t.Fatal("an idle HTTP/1 connection is still open at 5s")
			}
		}
		b.reg.Stats.Errors.Add(1)
		h2.Close()
		res, at := b.result()
		if res.Reason != ReasonDrained || at != 5*time.Second {
			t.Fatalf("drain ended %+v at %v, want drained at 5s", res, at)
		}

		rep := tl.Report()
		var phases []string
		for _, p := range rep.Phases {
			phases = append(phases, p.Phase+"@"+time.Duration(p.AtMS*int64(time.Millisecond)).String())
		}
		if got, want := strings.Join(phases, " "), "announce@0s signal@2s wait@4s exit@5s"; got != want {
			t.Fatalf("phases %q, want %q", got, want)
		}
		if rep.Cause != "test" || rep.Settings.TimeoutMS != 30000 || rep.Settings.DelayMS != 2000 || rep.Settings.IntervalMS != 100 {
			t.Fatalf("report header: cause %q, settings %+v", rep.Cause, rep.Settings)
		}
		for i := 1; i < len(rep.Samples); i++ {
			if rep.Samples[i].AtMS < rep.Samples[i-1].AtMS {
				t.Fatalf("samples out of order at %d: %d ms after %d ms", i, rep.Samples[i].AtMS, rep.Samples[i-1].AtMS)
			}
		}
		// 0..5s every 100 ms, and one more at each of the three phase
		// changes that fall on a tick and at the end.
		if n := len(rep.Samples); n < 51 || n > 55 {
			t.Fatalf("%d samples over 5s, want 51 to 55", n)
		}
		last := rep.Samples[len(rep.Samples)-1]
		if last.Phase != "exit" || last.Connections.Total != 0 || last.IdleCloses != 2 || last.Errors != 1 || last.Requests != 7 {
			t.Fatalf("last sample %+v", last)
		}
		if rep.Outcome == nil || rep.Outcome.Reason != ReasonDrained || rep.Outcome.TookMS != 5000 {
			t.Fatalf("outcome %+v", rep.Outcome)
		}
		for _, want := range []string{"The drain (test) ended drained after 5.00s of its 30s deadline",
			"3 connections (2 HTTP/1, 1 HTTP/2, 0 WebSocket, 0 silent), 3 requests in flight (0 event streams)",
			"2 idle connections closed, 0 forced", "1 errors made by ebb",
			"announce at 0.00s, signal at 2.00s, wait at 4.00s, exit at 5.00s."} {
			if !strings.Contains(rep.Outcome.Summary, want) {
				t.Errorf("summary lacks %q:\n%s", want, rep.Outcome.Summary)
			}
		}
	})
}

// TestTimelineThinning: a drain longer than maxSamples intervals keeps at
// most maxSamples samples, the first and every phase change among them,
// evenly spaced at a doubled grain.
func TestTimelineThinning(t *testing.T) {
	tl := NewTimeline()
	const n = 3 * maxSamples
	for i := range n {
		tl.record(Sample{AtMS: int64(i) * 100}, false)
		// A sample too close to the last one is not kept...
		tl.record(Sample{AtMS: int64(i)*100 + 10}, false)
	}
	// ...unless it marks a moment.
	tl.record(Sample{AtMS: n*100 - 50, Phase: "exit"}, true)
	rep := tl.Report()
	if len(rep.Samples) > maxSamples {
		t.Fatalf("%d samples kept, want at most %d", len(rep.Samples), maxSamples)
	}
	if rep.Settings.IntervalMS != 400 {
		t.Fatalf("grain %d ms after %d samples, want 400", rep.Settings.IntervalMS, n)
	}
	if rep.Samples[0].AtMS != 0 || rep.Samples[len(rep.Samples)-1].Phase != "exit" {
		t.Fatalf("first %+v, last %+v", rep.Samples[0], rep.Samples[len(rep.Samples)-1])
	}
	for i := 1; i < len(rep.Samples)-1; i++ {
		gap := rep.Samples[i].AtMS - rep.Samples[i-1].AtMS
		if gap < 200 || gap > 400 {
			t.Fatalf("samples %d and %d are %d ms apart, want 200 to 400", i-1, i, gap)
		}
	}
}
