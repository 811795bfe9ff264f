package main

import (
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/ebb-proxy/ebb/drain/takeover"
)

// takeTimeout bounds the wait for the running ebb's sockets.
const takeTimeout = 10 * time.Second

// takeOver asks the ebb offering its sockets at path for them (ebb run
// -takeover). It returns nil when no ebb offers there.
func takeOver(path string, log *slog.Logger) (*takeover.Handover, error) {
	ho, err := takeover.Take(path, takeTimeout)
	if err != nil {
		return nil, err
	}
	if ho == nil {
		log.Info("takeover: no ebb offers its sockets here; starting afresh", "socket", path)
		return nil, nil
	}
	log.Info("takeover: sockets received", "from_pid", ho.PID, "sockets", ho.Sockets.Len())
	return ho, nil
}

// offer serves this ebb's sockets to a successor on cfg.Takeover.Socket.
func (s *serving) offer(ln *net.UnixListener) *takeover.Offer {
	return &takeover.Offer{
		Listener: ln,
		Sockets: func() []takeover.Socket {
			var out []takeover.Socket
			for _, k := range s.px.Sockets() {
				out = append(out, takeover.Socket{Kind: takeover.KindListener, Name: k.Name, Address: k.Address,
					Bound: k.Listener.Addr().String(), Listener: k.Listener})
			}
			// In the order the successor opens its sockets (listeners,
			// admin, probes): sockets configured with the same string (a
			// port 0) then go where they were.
			out = append(out, takeover.Socket{Kind: takeover.KindAdmin, Address: s.cfg.Admin.Address, Bound: s.adm.Addr().String(), Listener: s.adm.Listener()})
			if pl := s.adm.ProbeListener(); pl != nil {
				out = append(out, takeover.Socket{Kind: takeover.KindAdmin, Name: "probe", Address: s.cfg.Admin.ProbeAddress, Bound: pl.Addr().String(), Listener: pl})
			}
			return append(out, takeover.Socket{Kind: takeover.KindTakeover, Address: ln.Addr().String(), Bound: ln.Addr().String(), Listener: ln})
		},
		// The successor accepts on the same sockets: from now on it gets
		// every new connection, and this ebb drains those it has. The
		// admin socket goes too, so /ready and the drain triggers are the
		// successor's.
		TakenOver: func(pid int) {
			s.px.StopAccepting()
			s.adm.StopAccepting()
			s.ctl.Trigger(fmt.Sprintf("taken over by ebb pid %d", pid))
		},
		Log: s.log,
	}
}

// successor starts the ebb that takes over from this one on SIGUSR2, as
// nginx's binary upgrade does: the executable this one was started from
// (which may by now be a new binary), with this one's arguments and
// -takeover. Under systemd it tells the service manager that it is the
// main process now (see notify).
type successor struct {
	exe    string   // resolved when ebb started
	args   []string // ebb's own, for "run"
	notify string   // NOTIFY_SOCKET, passed on
	log    *slog.Logger

	mu  sync.Mutex
	pid int // the successor's while it runs
}

// newSuccessor returns the successor of the ebb started as argv0 with the
// run arguments args.
func newSuccessor(argv0 string, args []string, notify string, log *slog.Logger) *successor {
	exe := argv0
	if !strings.Contains(exe, "/") {
		if p, err := exec.LookPath(exe); err == nil {
			exe = p
		}
	}
	if abs, err := filepath.Abs(exe); err == nil {
		exe = abs
	}
	return &successor{exe: exe, args: append([]string{"run", "-takeover"}, args...), notify: notify, log: log}
}

// start starts the successor, unless one runs already.
func (r *successor) start() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pid != 0 {
		r.log.Warn("SIGUSR2: a successor runs already; ignored", "pid", r.pid)
		return
	}
	cmd := exec.Command(r.exe, r.args...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.Env = os.Environ()
	if r.notify != "" {
		cmd.Env = append(cmd.Env, "NOTIFY_SOCKET="+r.notify)
	}
	if err := cmd.Start(); err != nil {
		r.log.Error("SIGUSR2: starting the successor", "exe", r.exe, "err", err)
		return
	}
	r.pid = cmd.Process.Pid
	r.log.Info("SIGUSR2: successor started; it takes over once it serves", "pid", r.pid, "exe", r.exe)
	// Reaps it if it fails while this ebb runs; a successor that took over
	// outlives this ebb, and this goroutine with it.
	go func() {
		err := cmd.Wait()
		r.mu.Lock()
		r.pid = 0
		r.mu.Unlock()
		r.log.Info("successor exited", "pid", cmd.Process.Pid, "status", cmd.ProcessState.String(), "err", err)
	}()
}

// notify sends state to the service manager (systemd's sd_notify
// protocol) when ebb runs under a unit of Type=notify: READY=1 once it
// serves, with MAINPID when it took over from the unit's main process (the
// unit needs NotifyAccess=all for that).
func notify(socket, state string) error {
	if socket == "" {
		return nil
	}
	// Go maps a leading @ to Linux's abstract namespace, as systemd means it.
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: socket, Net: "unixgram"})
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = c.Write([]byte(state))
	return err
}
