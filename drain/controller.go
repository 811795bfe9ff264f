package drain

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/ebb-proxy/ebb/config"
)

// Server is what the controller stops: the proxy, in practice.
type Server interface {
	// Shutdown stops accepting and lets open work finish, until ctx ends.
	Shutdown(ctx context.Context) error
	// Close stops everything now.
	Close() error
}

// Reason says why the controller finished.
type Reason string

// Reasons.
const (
	// ReasonDrained: every connection finished before the deadline.
	ReasonDrained Reason = "drained"
	// ReasonDeadline: drain.timeout passed and what was left was closed.
	ReasonDeadline Reason = "deadline"
	// ReasonForced: a second trigger asked for an immediate stop.
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
func (r Result) Clean() bool { return r.Reason == ReasonDrained }

// Controller runs the drain. Trigger and Force may be called from any
// goroutine, any number of times; the first Trigger starts the drain.
type Controller struct {
	cfg config.Drain
	reg *Registry
	srv Server
	log *slog.Logger

	mu        sync.Mutex
	trigger   chan struct{} // closed by the first Trigger
	force     chan struct{} // closed by the first Force
	triggered time.Time     // guarded by mu
	cause     string        // guarded by mu
}

// NewController returns a controller that will stop srv.
func NewController(cfg config.Drain, reg *Registry, srv Server, log *slog.Logger) *Controller {
	return &Controller{cfg: cfg, reg: reg, srv: srv, log: log,
		trigger: make(chan struct{}), force: make(chan struct{})}
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

// Phase names the drain's phase for /ready and the log.
func (c *Controller) Phase() string {
	if ok, _ := c.Triggered(); ok {
		return "draining"
	}
	return "serving"
}

// Deadline returns when the drain will force what is left closed, if it
// has started.
func (c *Controller) Deadline() (time.Time, bool) {
	ok, at := c.Triggered()
	if !ok {
		return time.Time{}, false
	}
	return at.Add(c.cfg.Timeout), true
}

// Run waits for the trigger, then stops the server gracefully within
// drain.timeout, and returns how that went. ctx ending before the trigger
// returns ctx's error.
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
	c.log.Info("drain started", "cause", cause, "connections", c.reg.Len(), "timeout", c.cfg.Timeout.String())

	deadline, cancel := context.WithDeadline(context.Background(), start.Add(c.cfg.Timeout))
	defer cancel()
	stopCtx, stopCancel := context.WithCancel(deadline)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stopCancel() // before wg.Wait: ends the watcher below
	wg.Go(func() {
		select {
		case <-c.force:
			stopCancel()
		case <-stopCtx.Done():
		}
	})

	err := c.srv.Shutdown(stopCtx)
	if err == nil {
		// The engines are done; hijacked (upgraded) connections are only
		// known to the registry.
		err = c.reg.WaitEmpty(stopCtx)
	}
	res := Result{Reason: ReasonDrained}
	if err != nil {
		res.Reason = ReasonDeadline
		select {
		case <-c.force:
			res.Reason = ReasonForced
		default:
		}
		if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
			c.log.Error("graceful stop failed", "err", err)
		}
		res.Forced = c.reg.Len()
		c.srv.Close()
	}
	res.Took = time.Since(start)
	c.log.Info("drain finished", "reason", string(res.Reason), "forced_closes", res.Forced, "took", res.Took.Round(time.Millisecond).String())
	return res, nil
}
