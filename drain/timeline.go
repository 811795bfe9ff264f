package drain

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ebb-proxy/ebb/config"
	"github.com/ebb-proxy/ebb/proxy/downstream"
)

// SampleInterval is how often the controller samples a drain for its
// timeline.
const SampleInterval = 100 * time.Millisecond

// maxSamples bounds a timeline's memory: once it holds this many samples,
// every other one is dropped and the interval between samples doubles, so
// a drain of any length is kept at the finest grain that fits.
const maxSamples = 2048

// Timeline records one drain as it goes: its phase changes and, every
// SampleInterval, its connections, requests and actions. The admin
// server shows it (JSON, an HTML page, a progress stream), `ebb drain
// -wait` follows it, and drain.report keeps it for postmortems. Only the
// controller records; anyone may read, at any time.
type Timeline struct {
	mu      sync.Mutex
	rep     Report        // guarded by mu
	seqs    []uint64      // guarded by mu: the number of each of rep.Samples, counting from 1
	total   uint64        // guarded by mu: the samples recorded so far
	every   time.Duration // guarded by mu: the grain samples are kept at
	changed chan struct{} // guarded by mu: closed and replaced at every record
}

// Report is a drain's timeline, as JSON and the HTML page show it. Times
// are milliseconds since the trigger.
type Report struct {
	// Started is when the drain was triggered; zero while serving.
	Started  time.Time `json:"started,omitzero"`
	Cause    string    `json:"cause,omitempty"`
	Settings Settings  `json:"settings"`
	// Phases lists each phase entered, in order, from announce.
	Phases []PhaseMark `json:"phases"`
	// Samples are in time order, one every IntervalMS at most, plus one
	// at every phase change and one at the end.
	Samples []Sample `json:"samples"`
	// Outcome is set once the drain has ended.
	Outcome *Outcome `json:"outcome,omitempty"`
}

// Settings are the drain settings in force, for reading a report alone.
type Settings struct {
	DelayMS     int64  `json:"delay_ms"`
	SpreadMS    int64  `json:"spread_ms"`
	TimeoutMS   int64  `json:"timeout_ms"`
	AcceptUntil string `json:"accept_until"`
	// IntervalMS is the grain of the samples kept.
	IntervalMS int64 `json:"interval_ms"`
}

// PhaseMark is the moment a phase began.
type PhaseMark struct {
	Phase string `json:"phase"`
	AtMS  int64  `json:"at_ms"`
}

// Sample is the state of a drain at one moment. The counters count from
// the trigger.
type Sample struct {
	AtMS  int64  `json:"t_ms"`
	Phase string `json:"phase"`
	// LeftMS is the time left before the deadline.
	LeftMS      int64       `json:"deadline_left_ms"`
	Connections Connections `json:"connections"`
	// InFlight counts the requests being served: one per active HTTP/1
	// connection, the open streams of each HTTP/2 one.
	InFlight int `json:"in_flight"`
	// EventStreams counts the event-stream responses being relayed (they
	// are among InFlight).
	EventStreams int64 `json:"event_streams"`
	// Requests counts the requests received since the trigger.
	Requests     int64        `json:"requests"`
	CloseSignals CloseSignals `json:"close_signals"`
	IdleCloses   int64        `json:"idle_closes"`
	ForcedCloses int64        `json:"forced_closes"`
	// Dials counts upstream connections opened (or tried).
	Dials int64 `json:"upstream_dials"`
	// Errors counts the 5xx responses ebb made itself (no endpoint, an
	// upstream that failed): each is an error a client saw.
	Errors int64 `json:"errors"`
}

// Connections are the open downstream connections by protocol and state.
type Connections struct {
	Total int `json:"total"`
	// HTTP1 and HTTP2 by state; WebSocket, the HTTP/1 connections
	// upgraded to WebSocket tunnels; Unknown, those that have not sent a
	// byte yet.
	HTTP1     States `json:"http1"`
	HTTP2     States `json:"http2"`
	WebSocket States `json:"websocket"`
	Unknown   States `json:"unknown"`
}

// States counts connections by state.
type States struct {
	New      int `json:"new,omitempty"`
	Active   int `json:"active,omitempty"`
	Idle     int `json:"idle,omitempty"`
	Upgraded int `json:"upgraded,omitempty"`
}

// Total is the number of connections in any state.
func (s States) Total() int { return s.New + s.Active + s.Idle + s.Upgraded }

// CloseSignals counts the close signals passed on: Connection: close
// (HTTP/1), two-phase GOAWAYs begun (HTTP/2), close frames with status
// 1001 sent to WebSocket clients, and event streams ended after an
// event.
type CloseSignals struct {
	HTTP1        int64 `json:"http1"`
	HTTP2        int64 `json:"http2"`
	WebSocket    int64 `json:"websocket"`
	EventStreams int64 `json:"event_streams"`
}

// Outcome is how a drain ended.
type Outcome struct {
	Reason       Reason `json:"reason"`
	ForcedCloses int    `json:"forced_closes"`
	TookMS       int64  `json:"took_ms"`
	// Summary is the paragraph the log shows.
	Summary string `json:"summary"`
}

// NewTimeline returns an empty timeline.
func NewTimeline() *Timeline {
	return &Timeline{every: SampleInterval, changed: make(chan struct{}),
		rep: Report{Phases: []PhaseMark{}, Samples: []Sample{}}}
}

// Report returns a copy of the timeline so far.
func (t *Timeline) Report() Report {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.rep
	r.Phases = slices.Clone(r.Phases)
	r.Samples = slices.Clone(r.Samples)
	r.Settings.IntervalMS = t.every.Milliseconds()
	if r.Outcome != nil {
		o := *r.Outcome
		r.Outcome = &o
	}
	return r
}

// Since returns the samples recorded after the first seen ones (those of
// them still kept: a reader far behind a long drain misses some), the
// number to pass next time, and the outcome once the drain has ended.
func (t *Timeline) Since(seen uint64) (ss []Sample, next uint64, out *Outcome) {
	t.mu.Lock()
	defer t.mu.Unlock()
	i, _ := slices.BinarySearch(t.seqs, seen+1)
	ss = slices.Clone(t.rep.Samples[i:])
	if t.rep.Outcome != nil {
		o := *t.rep.Outcome
		out = &o
	}
	return ss, t.total, out
}

// Changed returns a channel closed at the next record. Take it before
// Since, so that no record falls between the two.
func (t *Timeline) Changed() <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.changed
}

// notifyLocked wakes the readers waiting on Changed.
func (t *Timeline) notifyLocked() {
	close(t.changed)
	t.changed = make(chan struct{})
}

func (t *Timeline) begin(start time.Time, cause string, d config.Drain) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.rep.Started, t.rep.Cause = start, cause
	t.rep.Settings = Settings{DelayMS: d.Delay.Milliseconds(), SpreadMS: d.Spread.Milliseconds(),
		TimeoutMS: d.Timeout.Milliseconds(), AcceptUntil: d.AcceptUntil}
}

func (t *Timeline) phase(p Phase, at time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.rep.Phases = append(t.rep.Phases, PhaseMark{Phase: p.String(), AtMS: at.Milliseconds()})
}

// record adds s. Unless keep (a phase change, the end), a sample closer
// than the current grain to the one before is not kept.
func (t *Timeline) record(s Sample, keep bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ss := t.rep.Samples
	if n := len(ss); n > 0 && !keep && time.Duration(s.AtMS-ss[n-1].AtMS)*time.Millisecond < t.every-t.every/4 {
		return
	}
	if len(ss) >= maxSamples {
		// Keep the first, then every other one; the grain doubles.
		kept, seqs := ss[:1], t.seqs[:1]
		for i := 2; i < len(ss); i += 2 {
			kept, seqs = append(kept, ss[i]), append(seqs, t.seqs[i])
		}
		clear(ss[len(kept):])
		ss, t.seqs = kept, seqs
		t.every *= 2
	}
	t.total++
	t.rep.Samples = append(ss, s)
	t.seqs = append(t.seqs, t.total)
	t.notifyLocked()
}

// finish ends the timeline with o, its summary written from the first
// sample and last, and returns the summary.
func (t *Timeline) finish(o Outcome, last Sample) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	first := last
	if len(t.rep.Samples) > 0 {
		first = t.rep.Samples[0]
	}
	o.Summary = summary(&t.rep, o, first, last)
	t.rep.Outcome = &o
	t.notifyLocked()
	return o.Summary
}

// sample takes the registry's state at now, for a drain started at start.
func sample(r *downstream.Registry, now, start time.Time, timeout time.Duration) Sample {
	st := &r.Stats
	s := Sample{
		AtMS:  now.Sub(start).Milliseconds(),
		Phase: Phase(st.Phase.Load()).String(),
		CloseSignals: CloseSignals{HTTP1: st.CloseSignals[downstream.ProtoHTTP1].Load(),
			HTTP2:        st.CloseSignals[downstream.ProtoHTTP2].Load(),
			WebSocket:    st.CloseSignals[downstream.ProtoWebSocket].Load(),
			EventStreams: st.EventStreamEnds.Load()},
		EventStreams: st.EventStreams.Load(),
		Requests:     st.Requests.Load(),
		IdleCloses:   st.IdleCloses.Load(),
		ForcedCloses: st.ForcedCloses.Load(),
		Dials:        st.Dials.Load(),
		Errors:       st.Errors.Load(),
	}
	if left := start.Add(timeout).Sub(now); left > 0 {
		s.LeftMS = left.Milliseconds()
	}
	// The engines' stream counts are read outside the registry's lock.
	for _, c := range r.Conns() {
		var by *States
		switch c.Protocol() {
		case downstream.ProtoHTTP1:
			by = &s.Connections.HTTP1
		case downstream.ProtoHTTP2:
			by = &s.Connections.HTTP2
		case downstream.ProtoWebSocket:
			by = &s.Connections.WebSocket
		default:
			by = &s.Connections.Unknown
		}
		switch c.State() {
		case downstream.StateNew:
			by.New++
		case downstream.StateActive:
			by.Active++
			s.InFlight += c.InFlight()
		case downstream.StateIdle:
			by.Idle++
		case downstream.StateUpgraded:
			by.Upgraded++
		default:
			continue // closed since Conns
		}
		s.Connections.Total++
	}
	return s
}

// summary is the paragraph that tells how a drain went, for the log and
// the report: from the first sample (the trigger) and the last (the end).
func summary(rep *Report, o Outcome, first, last Sample) string {
	var b strings.Builder
	took := (time.Duration(o.TookMS) * time.Millisecond).Seconds()
	timeout := (time.Duration(rep.Settings.TimeoutMS) * time.Millisecond).Seconds()
	fmt.Fprintf(&b, "The drain (%s) ", rep.Cause)
	switch o.Reason {
	case ReasonDrained:
		fmt.Fprintf(&b, "ended drained after %.2fs of its %gs deadline: no connection left, and none arriving.", took, timeout)
	case ReasonAppGone:
		fmt.Fprintf(&b, "ended after %.2fs of its %gs deadline: the application was gone and no request in flight.", took, timeout)
	case ReasonDeadline:
		fmt.Fprintf(&b, "reached its %gs deadline: %d connections were closed by force (drain.timeout too short for them?).", timeout, o.ForcedCloses)
	default:
		fmt.Fprintf(&b, "was forced to end after %.2fs: %d connections were closed at once.", took, o.ForcedCloses)
	}
	fc := first.Connections
	fmt.Fprintf(&b, " At the trigger: %d connections (%d HTTP/1, %d HTTP/2, %d WebSocket, %d silent), %d requests in flight (%d event streams).",
		fc.Total, fc.HTTP1.Total(), fc.HTTP2.Total(), fc.WebSocket.Total(), fc.Unknown.Total(), first.InFlight, first.EventStreams)
	cs := last.CloseSignals
	fmt.Fprintf(&b, " Close signals: %d Connection: close, %d GOAWAY, %d WebSocket close (1001), %d event streams ended; %d idle connections closed, %d forced.",
		cs.HTTP1, cs.HTTP2, cs.WebSocket, cs.EventStreams, last.IdleCloses, last.ForcedCloses)
	fmt.Fprintf(&b, " During the drain: %d requests received, %d upstream connections dialled, %d errors made by ebb.",
		last.Requests, last.Dials, last.Errors)
	b.WriteString(" Phases:")
	for i, p := range rep.Phases {
		sep := ","
		if i == 0 {
			sep = ""
		}
		fmt.Fprintf(&b, "%s %s at %.2fs", sep, p.Phase, (time.Duration(p.AtMS) * time.Millisecond).Seconds())
	}
	b.WriteString(".")
	return b.String()
}
