package main

import (
	"log/slog"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// childStopGrace is how long a supervised application has to exit after
// ebb has drained, before it is killed.
const childStopGrace = 10 * time.Second

// child is the application started by "ebb run -- CMD ARGS". It receives
// the signals ebb receives, the first one once ebb has drained (the
// application behind ebb must keep serving while clients are moved away),
// a second one at once; its exit starts ebb's drain, and ends it as soon as
// no request is in flight.
type child struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
	err  error         // the exit error, set before done closes

	mu       sync.Mutex
	deferred os.Signal // the signal stop passes on; guarded by mu
}

func startChild(args []string, log *slog.Logger) (*child, error) {
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &child{cmd: cmd, done: make(chan struct{})}
	log.Info("application started", "pid", cmd.Process.Pid, "cmd", args)
	go func() {
		c.err = cmd.Wait()
		log.Info("application exited", "pid", cmd.Process.Pid, "status", cmd.ProcessState.String())
		close(c.done)
	}()
	return c, nil
}

// signal forwards s to the application. A nil child ignores it.
func (c *child) signal(s os.Signal) {
	if c == nil {
		return
	}
	select {
	case <-c.done:
	default:
		c.cmd.Process.Signal(s)
	}
}

// deferSignal records the signal stop will pass on (instead of SIGTERM).
// A nil child ignores it.
func (c *child) deferSignal(s os.Signal) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.deferred = s
}

// stop ends the application if it is still running: the signal ebb
// received (SIGTERM if none), then SIGKILL after childStopGrace. It returns
// once the process is gone.
func (c *child) stop(log *slog.Logger) {
	if c == nil {
		return
	}
	select {
	case <-c.done:
		return
	default:
	}
	c.mu.Lock()
	var s os.Signal = syscall.SIGTERM
	if c.deferred != nil {
		s = c.deferred
	}
	c.mu.Unlock()
	log.Info("stopping the application", "pid", c.cmd.Process.Pid, "signal", s.String())
	c.cmd.Process.Signal(s)
	t := time.NewTimer(childStopGrace)
	defer t.Stop()
	select {
	case <-c.done:
	case <-t.C:
		log.Warn("application did not stop; killing it", "pid", c.cmd.Process.Pid)
		c.cmd.Process.Kill()
		<-c.done
	}
}
