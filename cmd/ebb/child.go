package main

import (
	"log/slog"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// childStopGrace is how long a supervised application has to exit after
// ebb has drained, before it is killed.
const childStopGrace = 10 * time.Second

// child is the application started by "ebb run -- CMD ARGS". It receives
// the signals ebb receives; its exit starts ebb's drain.
type child struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
	err  error         // the exit error, set before done closes
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

// stop ends the application if it is still running: SIGTERM, then SIGKILL
// after childStopGrace. It returns once the process is gone.
func (c *child) stop(log *slog.Logger) {
	if c == nil {
		return
	}
	select {
	case <-c.done:
		return
	default:
	}
	c.cmd.Process.Signal(syscall.SIGTERM)
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
