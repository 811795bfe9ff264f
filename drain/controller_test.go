package drain

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ebb-proxy/ebb/config"

	"github.com/ebb-proxy/ebb/proxy/downstream"
)

// fakeServer stands in for the proxy: it records when the controller stops
// accepting and closes, and Close closes every connection, as the proxy's
// does.
type fakeServer struct {
	reg *downstream.Registry

	mu            sync.Mutex
	stoppedAt     time.Time // guarded by mu
	closedAt      time.Time // guarded by mu
	stopAccepting int       // guarded by mu
}

func (s *fakeServer) StopAccepting() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopAccepting++
	s.stoppedAt = time.Now()
}

func (s *fakeServer) Close() error {
	s.mu.Lock()
	s.closedAt = time.Now()
	s.mu.Unlock()
	s.reg.CloseAll()
	return nil
}

func (s *fakeServer) stopped() (int, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopAccepting, s.stoppedAt
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// drainConfig is the default drain with the given timeline.
func drainConfig(delay, spread, timeout time.Duration) config.Drain {
	return config.Drain{
		Delay: delay, Spread: spread, Quiet: time.Second, Timeout: timeout,
		AcceptUntil: config.AcceptUntilExit,
		HTTP1:       config.DrainHTTP1{IdleClose: config.IdleClose(time.Second)},
		HTTP2:       config.DrainHTTP2{GoawayGrace: time.Second},
	}
}

// bubble is one controller under test, in a synctest bubble.
type bubble struct {
	t     *testing.T
	reg   *downstream.Registry
	srv   *fakeServer
	ctl   *Controller
	done  chan Result
	start time.Time // the bubble's start: times are checked against it
}

func newBubble(t *testing.T, cfg config.Drain) *bubble {
	reg := downstream.NewRegistry()
	srv := &fakeServer{reg: reg}
	b := &bubble{t: t, reg: reg, srv: srv, ctl: NewController(cfg, reg, srv, quiet()), done: make(chan Result, 1), start: time.Now()}
	go func() {
		res, _ := b.ctl.Run(context.Background())
		b.done <- res
	}()
	return b
}

// conn tracks a new connection of the given protocol, read by a stand-in
// for its engine: it waits for requests, and closes the connection when a
// read fails, as engines do (an idle close is the reader's to send). The
// peer end is closed with the test.
func (b *bubble) conn(proto downstream.Protocol, drainable bool) *downstream.Conn {
	a, z := net.Pipe()
	c := b.reg.Track(a, "l", drainable, nil)
	c.SetProtocol(proto)
	var engine sync.WaitGroup
	engine.Go(func() {
		defer c.Close()
		var err error
		if proto == downstream.ProtoUnknown {
			_, err = c.Peek([]byte("PRI"))
		}
		var buf [64]byte
		for err == nil {
			_, err = c.Read(buf[:])
		}
		// The drain's ask for an idle close never reaches the engine.
		if errors.Is(err, os.ErrDeadlineExceeded) {
			b.t.Errorf("the engine's read of a %v connection timed out", proto)
		}
	})
	b.t.Cleanup(func() {
		z.Close()
		engine.Wait()
	})
	return c
}

// at is the time elapsed in the bubble.
func (b *bubble) at() time.Duration { return time.Since(b.start) }

// sleepUntil lets fake time run to d after the bubble's start.
func (b *bubble) sleepUntil(d time.Duration) {
	time.Sleep(time.Until(b.start.Add(d))) // fake time: moves the bubble's clock
	synctest.Wait()
}

// result waits for the drain's end and returns it with its time.
func (b *bubble) result() (Result, time.Duration) {
	res := <-b.done
	return res, b.at()
}

func isClosed(c *downstream.Conn) bool { return c.State() == downstream.StateClosed }

// TestTimelineSpreadsSignals checks the announce and signal phases: nothing
// during the delay, then each drainable connection its own moment, evenly
// over the spread in a random order; outbound connections none; phases
// reported in order.
func TestTimelineSpreadsSignals(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBubble(t, drainConfig(5*time.Second, 4*time.Second, 30*time.Second))
		var mu sync.Mutex
		var moments []time.Duration
		var conns []*downstream.Conn
		for range 4 {
			c := b.conn(downstream.ProtoHTTP2, true)
			c.OnSignal(func() {
				mu.Lock()
				moments = append(moments, b.at())
				mu.Unlock()
			})
			conns = append(conns, c)
		}
		outbound := b.conn(downstream.ProtoHTTP2, false)
		outbound.OnSignal(func() { t.Error("an outbound connection got a close signal") })

		b.ctl.Trigger("test")
		synctest.Wait()
		if p := b.ctl.Phase(); p != PhaseAnnounce {
			t.Fatalf("phase right after the trigger: %v, want announce", p)
		}
		b.sleepUntil(5*time.Second - time.Millisecond)
		mu.Lock()
		early := len(moments)
		mu.Unlock()
		if early != 0 || b.ctl.Phase() != PhaseAnnounce {
			t.Fatalf("during the delay: %d signals, phase %v", early, b.ctl.Phase())
		}
		b.sleepUntil(5 * time.Second)
		if p := b.ctl.Phase(); p != PhaseSignal {
			t.Fatalf("phase at T+delay: %v, want signal", p)
		}
		b.sleepUntil(9 * time.Second)
		want := []time.Duration{5 * time.Second, 6 * time.Second, 7 * time.Second, 8 * time.Second}
		mu.Lock()
		got := slices.Clone(moments)
		mu.Unlock()
		if !slices.Equal(got, want) {
			t.Fatalf("moments %v, want %v", got, want)
		}
		if p := b.ctl.Phase(); p != PhaseWait {
			t.Fatalf("phase after the spread: %v, want wait", p)
		}
		if n := b.reg.Stats.CloseSignals[downstream.ProtoHTTP2].Load(); n != 0 {
			t.Fatalf("the controller counted %d GOAWAYs itself; the engine counts them", n)
		}
		for _, c := range conns {
			c.Close()
		}
		outbound.Close()
		res, at := b.result()
		// The last connection arrived at 0s: quiet (1s) is long past;
		// min_duration is delay+spread (9s).
		if res.Reason != ReasonDrained || at != 9*time.Second {
			t.Fatalf("drain ended with %+v at %v, want drained at 9s", res, at)
		}
	})
}

// TestNewConnectionsSignalledAtOnce: a connection arriving during the
// announce phase gets a moment like the others; one arriving after the
// delay gets its signal at once, and an engine registering its signal
// action later runs it at once.
func TestNewConnectionsSignalledAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBubble(t, drainConfig(2*time.Second, 0, 30*time.Second))
		b.ctl.Trigger("test")
		b.sleepUntil(time.Second)
		early := b.conn(downstream.ProtoHTTP1, true)
		if early.CloseRequested() {
			t.Fatal("a connection arriving during the announce phase was signalled at once")
		}
		b.sleepUntil(2 * time.Second)
		if !early.CloseRequested() {
			t.Fatal("the announce phase's connection got no signal at T+delay (spread 0)")
		}
		late := b.conn(downstream.ProtoHTTP2, true)
		if !late.CloseRequested() {
			t.Fatal("a connection arriving after T+delay was not signalled at once")
		}
		ran := false
		late.OnSignal(func() { ran = true })
		if !ran {
			t.Fatal("OnSignal on a signalled connection did not run at once")
		}
		b.ctl.Force("test")
		b.result()
	})
}

// TestIdleHTTP1Close: an idle HTTP/1 connection is closed idle_close after
// its moment; one busy at its moment idle_close after it goes idle; with
// idle_close never, only the deadline closes it.
func TestIdleHTTP1Close(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBubble(t, drainConfig(time.Second, 0, 30*time.Second))
		idle := b.conn(downstream.ProtoHTTP1, true)
		idle.SetState(downstream.StateIdle)
		busy := b.conn(downstream.ProtoHTTP1, true)
		busy.SetState(downstream.StateActive)
		silent := b.conn(downstream.ProtoUnknown, true) // has not sent a byte
		b.ctl.Trigger("test")
		// The moment is at 1s (no spread); idle_close is 1s.
		b.sleepUntil(2*time.Second - time.Millisecond)
		if isClosed(idle) {
			t.Fatal("the idle connection was closed before idle_close past its moment")
		}
		b.sleepUntil(2 * time.Second)
		if !isClosed(idle) || !isClosed(silent) {
			t.Fatal("an idle or silent connection was still open idle_close past its moment")
		}
		if isClosed(busy) {
			t.Fatal("a connection serving a request was closed")
		}
		b.sleepUntil(5 * time.Second)
		busy.SetState(downstream.StateIdle) // its response went out (with Connection: close)
		b.sleepUntil(6*time.Second - time.Millisecond)
		if isClosed(busy) {
			t.Fatal("closed before being idle for idle_close")
		}
		b.sleepUntil(6 * time.Second)
		if !isClosed(busy) {
			t.Fatal("still open after being idle for idle_close past its moment")
		}
		if n := b.reg.Stats.IdleCloses.Load(); n != 3 {
			t.Fatalf("%d idle closes counted, want 3", n)
		}
		res, at := b.result()
		// Last arrival at 0s; min_duration 1s; the last close at 6s.
		if res.Reason != ReasonDrained || at != 6*time.Second {
			t.Fatalf("drain ended with %+v at %v, want drained at 6s", res, at)
		}
	})
}

func TestIdleCloseNever(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := drainConfig(0, 0, 10*time.Second)
		cfg.HTTP1.IdleClose = config.Never
		b := newBubble(t, cfg)
		idle := b.conn(downstream.ProtoHTTP1, true)
		idle.SetState(downstream.StateIdle)
		b.ctl.Trigger("test")
		b.sleepUntil(10*time.Second - time.Millisecond)
		if isClosed(idle) {
			t.Fatal("idle_close: never, but the idle connection was closed before the deadline")
		}
		res, at := b.result()
		if res.Reason != ReasonDeadline || res.Forced != 1 || res.Clean() || at != 10*time.Second {
			t.Fatalf("drain ended with %+v at %v, want deadline at 10s with 1 forced close", res, at)
		}
		if !isClosed(idle) || b.reg.Stats.ForcedCloses.Load() != 1 {
			t.Fatal("the deadline did not close the connection and count it")
		}
	})
}

// TestDrainedWaitsForQuiet: ebb exits once nothing is open, min_duration
// has passed, and no connection has arrived for quiet.
func TestDrainedWaitsForQuiet(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := drainConfig(0, 0, 30*time.Second)
		cfg.Quiet = 3 * time.Second
		minDuration := 2 * time.Second
		cfg.MinDuration = &minDuration
		b := newBubble(t, cfg)
		b.ctl.Trigger("test")
		b.sleepUntil(time.Second)
		c := b.conn(downstream.ProtoHTTP2, true) // arrives at 1s: quiet until 4s
		b.sleepUntil(1500 * time.Millisecond)
		c.Close()
		res, at := b.result()
		if res.Reason != ReasonDrained || !res.Clean() || at != 4*time.Second {
			t.Fatalf("drain ended with %+v at %v, want drained at 4s (last arrival 1s + quiet 3s, past min_duration 2s)", res, at)
		}
	})
}

// TestAppGoneWaitsForInFlight: once the application is gone, ebb exits as
// soon as no request is in flight, idle connections or not.
func TestAppGoneWaitsForInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBubble(t, drainConfig(0, 2*time.Second, 30*time.Second))
		idle := b.conn(downstream.ProtoHTTP1, false)
		idle.SetState(downstream.StateIdle)
		busy := b.conn(downstream.ProtoHTTP2, true)
		busy.SetState(downstream.StateActive)
		b.sleepUntil(time.Second)
		b.ctl.AppGone("test")
		b.sleepUntil(4 * time.Second)
		select {
		case res := <-b.done:
			t.Fatalf("ended with %+v while a request was in flight", res)
		default:
		}
		busy.SetState(downstream.StateIdle)
		res, at := b.result()
		if res.Reason != ReasonAppGone || !res.Clean() || at != 4*time.Second {
			t.Fatalf("drain ended with %+v at %v, want app_gone at 4s", res, at)
		}
		if !isClosed(idle) || !isClosed(busy) {
			t.Fatal("connections left open at the exit")
		}
	})
}

// TestForceAndDeadline: a forced stop and the deadline close what is
// left, counted, with a result that is not clean.
func TestForceAndDeadline(t *testing.T) {
	for _, force := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			b := newBubble(t, drainConfig(0, time.Second, 20*time.Second))
			b.conn(downstream.ProtoHTTP1, true).SetState(downstream.StateUpgraded) // a WebSocket: kept until then
			b.ctl.Trigger("test")
			want, wantAt := ReasonDeadline, 20*time.Second
			if force {
				b.sleepUntil(3 * time.Second)
				b.ctl.Force("test")
				want, wantAt = ReasonForced, 3*time.Second
			}
			res, at := b.result()
			if res.Reason != want || res.Forced != 1 || res.Clean() || at != wantAt {
				t.Fatalf("drain ended with %+v at %v, want %s at %v with 1 forced close", res, at, want, wantAt)
			}
		})
	}
}

// TestAcceptUntil: listeners stop accepting at the trigger, at the end of
// the delay, or only at the exit.
func TestAcceptUntil(t *testing.T) {
	for _, tc := range []struct {
		until string
		at    time.Duration // when StopAccepting is called; -1: never before exit
	}{
		{config.AcceptUntilImmediately, 0},
		{config.AcceptUntilAfterDelay, 3 * time.Second},
		{config.AcceptUntilExit, -1},
	} {
		t.Run(tc.until, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg := drainConfig(3*time.Second, time.Second, 20*time.Second)
				cfg.AcceptUntil = tc.until
				b := newBubble(t, cfg)
				b.ctl.Trigger("test")
				res, _ := b.result()
				if res.Reason != ReasonDrained {
					t.Fatalf("drain ended with %+v", res)
				}
				n, at := b.srv.stopped()
				switch {
				case tc.at < 0 && n != 0:
					t.Fatalf("StopAccepting called %d times with accept_until: exit", n)
				case tc.at >= 0 && (n != 1 || at.Sub(b.start) != tc.at):
					t.Fatalf("StopAccepting called %d times, at %v; want once at %v", n, at.Sub(b.start), tc.at)
				}
			})
		})
	}
}

func TestNoTriggerNoDrain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		reg := downstream.NewRegistry()
		ctl := NewController(drainConfig(0, 0, time.Second), reg, &fakeServer{reg: reg}, quiet())
		done := make(chan error, 1)
		go func() {
			_, err := ctl.Run(ctx)
			done <- err
		}()
		time.Sleep(time.Hour) // fake time: nothing happens without a trigger
		synctest.Wait()
		if ok, _ := ctl.Triggered(); ok || ctl.Phase() != PhaseServing {
			t.Fatal("drain started without a trigger")
		}
		cancel()
		if err := <-done; err != context.Canceled {
			t.Fatalf("Run returned %v, want context.Canceled", err)
		}
	})
}
