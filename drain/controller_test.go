package drain

import (
	"context"
	"io"
	"log/slog"
	"net"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ebb-proxy/ebb/config"
)

// fakeServer stands in for the proxy: Shutdown waits until released or
// until its context ends, as the real one does.
type fakeServer struct {
	release  chan struct{}
	shutdown chan struct{}
	closed   chan struct{}
}

func newFakeServer() *fakeServer {
	return &fakeServer{release: make(chan struct{}), shutdown: make(chan struct{}), closed: make(chan struct{})}
}

func (s *fakeServer) Shutdown(ctx context.Context) error {
	close(s.shutdown)
	select {
	case <-s.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *fakeServer) Close() error {
	close(s.closed)
	return nil
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// run starts ctl.Run and returns the channel its result arrives on.
func run(ctl *Controller) <-chan Result {
	done := make(chan Result, 1)
	go func() {
		res, _ := ctl.Run(context.Background())
		done <- res
	}()
	return done
}

func TestControllerDrains(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newFakeServer()
		ctl := NewController(config.Drain{Timeout: 25 * time.Second}, NewRegistry(), srv, quiet())
		done := run(ctl)
		synctest.Wait()
		if ok, _ := ctl.Triggered(); ok {
			t.Fatal("triggered before any trigger")
		}
		ctl.Trigger("test")
		<-srv.shutdown
		time.Sleep(3 * time.Second) // fake time: the stop takes 3s
		close(srv.release)
		res := <-done
		if res.Reason != ReasonDrained || !res.Clean() || res.Forced != 0 || res.Took != 3*time.Second {
			t.Fatalf("result = %+v", res)
		}
		select {
		case <-srv.closed:
			t.Fatal("a clean drain closed the server by force")
		default:
		}
	})
}

func TestControllerDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newFakeServer()
		reg := NewRegistry()
		a, b := net.Pipe()
		defer b.Close()
		c := reg.Track(a, "l")
		ctl := NewController(config.Drain{Timeout: 25 * time.Second}, reg, srv, quiet())
		done := run(ctl)
		ctl.Trigger("test")
		ctl.Trigger("again") // does not restart the timeline
		res := <-done
		<-srv.closed
		if res.Reason != ReasonDeadline || res.Clean() || res.Forced != 1 || res.Took != 25*time.Second {
			t.Fatalf("result = %+v", res)
		}
		c.Close()
	})
}

func TestControllerForce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newFakeServer()
		ctl := NewController(config.Drain{Timeout: 25 * time.Second}, NewRegistry(), srv, quiet())
		done := run(ctl)
		ctl.Trigger("signal SIGTERM")
		<-srv.shutdown
		time.Sleep(time.Second) // fake time (synctest): the clock advances when all wait
		ctl.Force("signal SIGTERM")
		res := <-done
		<-srv.closed
		if res.Reason != ReasonForced || res.Took != time.Second {
			t.Fatalf("result = %+v", res)
		}
	})
}

func TestControllerWaitsForUpgradedConnections(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newFakeServer()
		close(srv.release) // the engines stop at once...
		reg := NewRegistry()
		a, b := net.Pipe()
		defer b.Close()
		c := reg.Track(a, "l") // ...but a hijacked connection lives on
		c.SetState(StateUpgraded)
		ctl := NewController(config.Drain{Timeout: 25 * time.Second}, reg, srv, quiet())
		done := run(ctl)
		ctl.Trigger("test")
		time.Sleep(5 * time.Second) // fake time (synctest)
		synctest.Wait()
		select {
		case res := <-done:
			t.Fatalf("finished with an upgraded connection open: %+v", res)
		default:
		}
		c.Close()
		res := <-done
		if res.Reason != ReasonDrained || res.Took != 5*time.Second {
			t.Fatalf("result = %+v", res)
		}
	})
}

func TestRegistry(t *testing.T) {
	reg := NewRegistry()
	if err := reg.WaitEmpty(context.Background()); err != nil {
		t.Fatal(err)
	}
	a1, b1 := net.Pipe()
	a2, b2 := net.Pipe()
	defer b1.Close()
	defer b2.Close()
	c1 := reg.Track(a1, "public")
	c2 := reg.Track(a2, "public")
	c1.SetProtocol(ProtoHTTP1)
	c1.SetState(StateActive)
	c2.SetState(StateIdle)
	if reg.Len() != 2 {
		t.Fatalf("Len = %d", reg.Len())
	}
	counts := map[State]int{}
	for _, c := range reg.Counts() {
		counts[c.State] += c.N
	}
	if counts[StateActive] != 1 || counts[StateIdle] != 1 {
		t.Fatalf("counts = %v", counts)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	if err := reg.WaitEmpty(ctx); err == nil {
		t.Fatal("WaitEmpty returned with connections open")
	}
	c1.Close()
	c1.Close() // twice is fine
	c1.SetState(StateActive)
	if c1.State() != StateClosed {
		t.Fatal("a closed connection changed state")
	}
	if n := reg.CloseAll(); n != 1 {
		t.Fatalf("CloseAll closed %d", n)
	}
	if err := reg.WaitEmpty(context.Background()); err != nil || reg.Len() != 0 {
		t.Fatalf("not empty after CloseAll: %v, %d", err, reg.Len())
	}
}

func TestWriteDeadlineRenewsOnlyWhenNear(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := net.Pipe()
		defer a.Close()
		defer b.Close()
		rec := &deadlineConn{Conn: a}
		var d WriteDeadline
		d.Renew(rec, 10*time.Second) // first write: set
		time.Sleep(4 * time.Second)  // fake time
		d.Renew(rec, 10*time.Second) // 6s left: kept
		time.Sleep(2 * time.Second)  // fake time
		d.Renew(rec, 10*time.Second) // 4s left: moved
		if rec.sets != 2 {
			t.Fatalf("deadline set %d times, want 2", rec.sets)
		}
		if want := time.Now().Add(10 * time.Second); !rec.last.Equal(want) {
			t.Fatalf("deadline %v, want %v", rec.last, want)
		}
	})
}

type deadlineConn struct {
	net.Conn
	sets int
	last time.Time
}

func (c *deadlineConn) SetWriteDeadline(t time.Time) error {
	c.sets++
	c.last = t
	return nil
}
