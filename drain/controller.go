package drain

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/ebb-proxy/ebb/config"
	"github.com/ebb-proxy/ebb/proxy/downstream"
)

// Server is what the controller acts on: the proxy, in practice.
type Server interface {
	// StopAccepting closes the inbound listeners' sockets (see
	// drain.accept_until); outbound listeners keep accepting.
	StopAccepting()
	// Close stops everything now: every listener, every connection left,
	// the upstream pools.
	Close() error
}

// Phase is where the drain is on its timeline (DRAIN.md).
type Phase int32

// Phases, in order.
const (
	// PhaseServing: no trigger yet.
	PhaseServing Phase = iota
	// PhaseAnnounce: T .. T+delay; /ready says 503, nothing else changes.
	PhaseAnnounce
	// PhaseSignal: T+delay .. T+delay+spread; each connection gets its
	// close signal at its own moment.
	PhaseSignal
	// PhaseWait: every connection has had its signal; ebb waits for one of
	// the exit conditions.
	PhaseWait
	// PhaseExit: ebb is closing what is left and exiting.
	PhaseExit
)

func (p Phase) String() string {
	switch p {
	case PhaseServing:
		return "serving"
	case PhaseAnnounce:
		return "announce"
	case PhaseSignal:
		return "signal"
	case PhaseWait:
		return "wait"
	}
	return "exit"
}

// Reason says why the drain ended.
type Reason string

// Reasons.
const (
	// ReasonDrained: no connection left, min_duration passed, and no new
	// connection for quiet.
	ReasonDrained Reason = "drained"
	// ReasonAppGone: the watched application is gone and no request is in
	// flight.
	ReasonAppGone Reason = "app_gone"
	// ReasonDeadline: drain.timeout passed and what was left was closed.
	ReasonDeadline Reason = "deadline"
	// ReasonForced: a second signal or /shutdown?now asked for an
	// immediate stop.
	ReasonForced Reason = "forced"
)

// Result is the outcome of a drain.
type Result struct {
	Reason Reason
	// Forced is the number of connections closed by force.
	Forced int
	// Took is the time from the trigger to the end.
	Took time.Duration
}

// Clean reports whether the drain ended without closing anything by force;
// ebb exits 0 exactly then.
func (r Result) Clean() bool { return r.Reason == ReasonDrained || r.Reason == ReasonAppGone }

// minScan is the shortest time between two looks at every connection
// prompted by connections changing state.
const minScan = 10 * time.Millisecond

// Controller runs the drain timeline. Trigger, AppGone and Force may be
// called from any goroutine, any number of times; the first of them starts
// the drain.
type Controller struct {
	cfg config.Drain
	reg *downstream.Registry
	srv Server
	log *slog.Logger
	tl  *Timeline

	mu        sync.Mutex
	trigger   chan struct{} // closed by the first trigger
	force     chan struct{} // closed by the first Force
	appGone   chan struct{} // closed by the first AppGone
	triggered time.Time     // guarded by mu
	cause     string        // guarded by mu
}

// NewController returns a controller for the connections of reg, acting on
// srv.
func NewController(cfg config.Drain, reg *downstream.Registry, srv Server, log *slog.Logger) *Controller {
	return &Controller{cfg: cfg, reg: reg, srv: srv, log: log, tl: NewTimeline(),
		trigger: make(chan struct{}), force: make(chan struct{}), appGone: make(chan struct{})}
}

// Trigger starts the drain, naming its cause for the log. Later calls do
// not restart it.
func (c *Controller) Trigger(cause string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	select {
	case <-c.trigger:
		return
	default:
	}
	c.triggered = time.Now()
	c.cause = cause
	close(c.trigger)
}

// AppGone reports that the watched application has exited: it starts the
// drain if it has not started, and lets ebb exit as soon as no request is
// in flight.
func (c *Controller) AppGone(why string) {
	c.Trigger("application gone: " + why)
	c.mu.Lock()
	defer c.mu.Unlock()
	select {
	case <-c.appGone:
	default:
		close(c.appGone)
	}
}

// Force skips to the forced close. It also triggers the drain if needed.
func (c *Controller) Force(cause string) {
	c.Trigger(cause)
	c.mu.Lock()
	defer c.mu.Unlock()
	select {
	case <-c.force:
	default:
		close(c.force)
	}
}

// Triggered reports whether the drain has started, and when.
func (c *Controller) Triggered() (bool, time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	select {
	case <-c.trigger:
		return true, c.triggered
	default:
		return false, time.Time{}
	}
}

// Timeline returns the drain's timeline: empty until the trigger, then
// filled as the drain goes.
func (c *Controller) Timeline() *Timeline { return c.tl }

// Phase returns the drain's phase.
func (c *Controller) Phase() Phase { return Phase(c.reg.Stats.Phase.Load()) }

// Deadline returns when the drain will force what is left closed, if it
// has started.
func (c *Controller) Deadline() (time.Time, bool) {
	ok, at := c.Triggered()
	if !ok {
		return time.Time{}, false
	}
	return at.Add(c.cfg.Timeout), true
}

// run is one drain: its state lives here, owned by Run's goroutine.
type run struct {
	*Controller
	start    time.Time
	queue    []*downstream.Conn // connections waiting for their moment, in order
	moments  time.Time          // when the signal phase began
	signaled int                // how many of queue have had their moment
	// The tunnels' window (drain.websocket.close: at_deadline): the
	// WebSockets open when it begins, each closed at its own moment of
	// it, from tunnelsAt on.
	tunnels      []*downstream.Conn
	tunnelsAt    time.Time
	tunnelsEnded int
	appGone      bool
}

// Run waits for the trigger, then runs the timeline of DRAIN.md until one
// of the exit conditions, and returns how the drain ended. ctx ending
// before the trigger returns ctx's error. Run owns no goroutine: every
// wait is a timer or a channel in one select.
func (c *Controller) Run(ctx context.Context) (Result, error) {
	select {
	case <-c.trigger:
	case <-ctx.Done():
		return Result{}, ctx.Err()
	}
	_, start := c.Triggered()
	c.mu.Lock()
	cause := c.cause
	c.mu.Unlock()
	r := &run{Controller: c, start: start}
	d := c.cfg

	changed, unwatch := c.reg.Watch()
	defer unwatch()
	// Both sides of a WebSocket answer within 2×grace: at most half the
	// deadline.
	c.reg.CloseTunnels(d.WebSocket.Close == config.WebSocketAtDeadline, min(d.WebSocket.Grace, d.Timeout/4))
	c.tl.begin(start, cause, d)
	c.log.Info("drain started", "cause", cause, "connections", c.reg.Len(),
		"delay", d.Delay.String(), "spread", d.Spread.String(), "timeout", d.Timeout.String())
	// The announce phase began at the trigger, when /ready began to say
	// 503 (Deadline), however late this goroutine runs.
	r.enter(PhaseAnnounce, start)
	if d.AcceptUntil == config.AcceptUntilImmediately {
		c.srv.StopAccepting()
	}

	deadline := time.NewTimer(time.Until(start.Add(d.Timeout)))
	defer deadline.Stop()
	// step moves the timeline: the end of the announce phase, then each
	// connection's moment, then the end of the signal phase.
	step := time.NewTimer(time.Until(start.Add(d.Delay)))
	defer step.Stop()
	// tunnels steps the tunnels' window (at_deadline only): it begins
	// spread + 2×grace before the deadline, so that the last close
	// handshake ends before it, and never before the signal phase.
	tunnels := time.NewTimer(time.Hour)
	tunnels.Stop()
	defer tunnels.Stop()
	if c.reg.TunnelsAtDeadline() {
		at := start.Add(d.Timeout - d.Spread - 2*c.reg.TunnelGrace())
		if sig := start.Add(d.Delay); at.Before(sig) {
			at = sig
		}
		tunnels.Reset(time.Until(at))
	}
	// wake re-examines the exit conditions and idle connections when one
	// of them may have become due.
	wake := time.NewTimer(time.Hour)
	wake.Stop()
	defer wake.Stop()
	// sample records the timeline between the moments that change it.
	sample := time.NewTicker(SampleInterval)
	defer sample.Stop()
	appGone := c.appGone
	var lastScan time.Time
	for {
		select {
		case now := <-sample.C:
			r.record(now, false)
			continue
		case <-c.force:
			return r.finish(ReasonForced), nil
		case <-deadline.C:
			return r.finish(ReasonDeadline), nil
		case <-step.C:
			if next, ok := r.step(time.Now()); ok {
				step.Reset(time.Until(next))
			}
		case <-tunnels.C:
			if next, ok := r.stepTunnels(time.Now()); ok {
				tunnels.Reset(time.Until(next))
			}
			continue
		case <-appGone:
			r.appGone, appGone = true, nil
		case <-changed:
			// Connections change state with every request: under load,
			// look at them at most every minScan (but at once when the
			// last one has gone).
			if since := time.Since(lastScan); since < minScan && c.reg.Len() > 0 {
				wake.Reset(minScan - since)
				continue
			}
		case <-wake.C:
		}
		now := time.Now()
		lastScan = now
		next := r.closeIdle(now)
		reason, ok, due := r.exitCondition(now)
		if ok {
			return r.finish(reason), nil
		}
		if !due.IsZero() && (next.IsZero() || due.Before(next)) {
			next = due
		}
		if !next.IsZero() {
			wake.Reset(time.Until(next))
		}
	}
}

// record adds a sample of the drain at now to the timeline; keep says it
// marks a moment (a phase change, the end) and is kept whatever the grain.
func (r *run) record(now time.Time, keep bool) Sample {
	s := sample(r.reg, now, r.start, r.cfg.Timeout)
	r.tl.record(s, keep)
	return s
}

// enter moves to phase p, which began at at, marks it on the timeline and
// logs it with the counts so far.
func (r *run) enter(p Phase, at time.Time) {
	r.reg.Stats.Phase.Store(int32(p))
	r.tl.phase(p, at.Sub(r.start))
	r.record(time.Now(), true)
	st := &r.reg.Stats
	r.log.Info("drain phase", "phase", p.String(), "since_trigger", time.Since(r.start).Round(time.Millisecond).String(),
		"connections", r.reg.Len(), "in_flight", r.reg.Active(),
		"close_signals_http1", st.CloseSignals[downstream.ProtoHTTP1].Load(),
		"close_signals_http2", st.CloseSignals[downstream.ProtoHTTP2].Load(),
		"close_signals_websocket", st.CloseSignals[downstream.ProtoWebSocket].Load(), "event_streams_ended", st.EventStreamEnds.Load(),
		"idle_closes", st.IdleCloses.Load(), "requests", st.Requests.Load(), "dials", st.Dials.Load())
}

// step advances the timeline at now and returns when it must be called
// next, if ever.
func (r *run) step(now time.Time) (time.Time, bool) {
	d := r.cfg
	if r.Phase() == PhaseAnnounce {
		// The signal phase: every connection open now gets a moment,
		// uniformly spread over the window in a random order; from now on,
		// new connections get theirs at once (downstream.Registry.Track).
		r.enter(PhaseSignal, now)
		if d.AcceptUntil == config.AcceptUntilAfterDelay {
			r.srv.StopAccepting()
		}
		r.reg.SignalArrivals()
		for _, c := range r.reg.Conns() {
			if c.Drainable && !c.CloseRequested() {
				r.queue = append(r.queue, c)
			}
		}
		rand.Shuffle(len(r.queue), func(i, j int) { r.queue[i], r.queue[j] = r.queue[j], r.queue[i] })
		r.moments = now
	}
	// Connection i of n has its moment at i/n of the window.
	n := len(r.queue)
	for r.signaled < n {
		at := r.moments.Add(d.Spread * time.Duration(r.signaled) / time.Duration(n))
		if at.After(now) {
			return at, true
		}
		r.queue[r.signaled].Signal(now)
		r.queue[r.signaled] = nil // done with it: let a closed one go
		r.signaled++
	}
	if end := r.moments.Add(d.Spread); end.After(now) {
		return end, true
	}
	r.queue = nil
	r.enter(PhaseWait, now)
	return time.Time{}, false
}

// stepTunnels advances the tunnels' window at now (at_deadline): at its
// start every WebSocket open is given a moment, spread like the signal
// phase's over drain.spread, and those opened from then on are closed at
// once (downstream.Conn.Tunnel). It returns when it must be called next, if ever.
func (r *run) stepTunnels(now time.Time) (time.Time, bool) {
	if r.tunnelsAt.IsZero() {
		r.tunnelsAt = now
		r.reg.OpenTunnelWindow()
		for _, c := range r.reg.Conns() {
			if c.Drainable && c.CloseRequested() && c.IsTunnel() {
				r.tunnels = append(r.tunnels, c)
			}
		}
		rand.Shuffle(len(r.tunnels), func(i, j int) { r.tunnels[i], r.tunnels[j] = r.tunnels[j], r.tunnels[i] })
		r.log.Info("drain: closing WebSockets", "websockets", len(r.tunnels), "over", r.cfg.Spread.String())
	}
	n := len(r.tunnels)
	for r.tunnelsEnded < n {
		at := r.tunnelsAt.Add(r.cfg.Spread * time.Duration(r.tunnelsEnded) / time.Duration(n))
		if at.After(now) {
			return at, true
		}
		r.tunnels[r.tunnelsEnded].EndTunnel()
		r.tunnels[r.tunnelsEnded] = nil
		r.tunnelsEnded++
	}
	r.tunnels = nil
	return time.Time{}, false
}

// closeIdle closes the HTTP/1 connections (and those that have not said
// anything yet) that have been idle for drain.http1.idle_close past their
// moment: it asks each one's reading goroutine, which sends a FIN if no
// request has begun (downstream.Registry.CloseIdle). It returns when it
// must be called next, or zero.
func (r *run) closeIdle(now time.Time) time.Time {
	ic := r.cfg.HTTP1.IdleClose
	if r.Phase() < PhaseSignal || ic == config.Never {
		return time.Time{}
	}
	return r.reg.CloseIdle(now, time.Duration(ic))
}

// exitCondition reports whether ebb may exit now, and why; if not, due is
// when that may change without any connection coming or going (zero: only
// then).
func (r *run) exitCondition(now time.Time) (reason Reason, ok bool, due time.Time) {
	if r.appGone && r.reg.Active() == 0 {
		return ReasonAppGone, true, time.Time{}
	}
	if r.reg.Len() > 0 {
		return "", false, time.Time{}
	}
	// Drained: nothing open, min_duration passed, no new connection for
	// quiet.
	due = r.start.Add(r.cfg.EffectiveMinDuration())
	if q := r.reg.LastArrival().Add(r.cfg.Quiet); q.After(due) {
		due = q
	}
	if !now.Before(due) {
		return ReasonDrained, true, time.Time{}
	}
	return "", false, due
}

// finish closes what is left and ends the drain.
func (r *run) finish(reason Reason) Result {
	res := Result{Reason: reason}
	r.enter(PhaseExit, time.Now())
	if !res.Clean() {
		res.Forced = r.reg.Len()
		r.reg.Stats.ForcedCloses.Add(int64(res.Forced))
	}
	r.srv.Close()
	now := time.Now()
	res.Took = now.Sub(r.start)
	last := r.record(now, true)
	r.log.Info("drain finished", "reason", string(res.Reason), "forced_closes", res.Forced,
		"took", res.Took.Round(time.Millisecond).String())
	text := r.tl.finish(Outcome{Reason: res.Reason, ForcedCloses: res.Forced, TookMS: res.Took.Milliseconds()}, last)
	r.log.Info("drain summary", "summary", text)
	return res
}
