package takeover

import (
	"bufio"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"syscall"
	"time"
)

// Offer hands the running ebb's listening sockets to a successor that asks
// for them on its Unix socket.
type Offer struct {
	Listener *net.UnixListener
	// Sockets returns the sockets to hand over, when a successor asks.
	Sockets func() []Socket
	// TakenOver is called once a successor reports that it serves on the
	// sockets: the caller then stops accepting and drains.
	TakenOver func(pid int)
	Log       *slog.Logger
	// Timeout bounds the successor's start, from the moment it has the
	// sockets to its report (default: a minute).
	Timeout time.Duration

	mu    sync.Mutex
	taken bool // a successor has taken over
}

// helloTimeout bounds how long a connection to the socket may take to say
// what it wants.
const helloTimeout = 10 * time.Second

// Serve answers successors, one at a time, until one has taken over or
// Close is called. A successor that fails, or goes away before it serves,
// changes nothing: Serve waits for the next one.
func (o *Offer) Serve() error {
	for {
		c, err := o.Listener.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return err
		}
		if o.serve(c) {
			return nil
		}
	}
}

// Close stops Serve. The socket file is removed, unless a successor took
// over: it may be serving on the same path.
func (o *Offer) Close() error {
	o.mu.Lock()
	o.Listener.SetUnlinkOnClose(!o.taken)
	o.mu.Unlock()
	return o.Listener.Close()
}

// serve answers one successor and reports whether it took over.
func (o *Offer) serve(c *net.UnixConn) bool {
	defer c.Close()
	log := o.Log
	if uid, err := peerUID(c); err != nil {
		log.Warn("takeover: could not tell who connected; refused", "err", err)
		return false
	} else if uid != os.Getuid() && uid != 0 {
		log.Warn("takeover: refused a process of another user", "uid", uid)
		return false
	}
	r := bufio.NewReader(c)
	c.SetDeadline(time.Now().Add(helloTimeout))
	var h hello
	if err := readLine(r, &h); err != nil {
		log.Warn("takeover: a connection did not ask for the sockets", "err", err)
		return false
	}
	if h.Takeover != version {
		log.Warn("takeover: refused a successor speaking another version", "version", h.Takeover, "pid", h.PID)
		writeLine(c, offer{PID: os.Getpid(), Error: fmt.Sprintf("takeover version %d is not spoken here (%d is)", h.Takeover, version)})
		return false
	}
	log = log.With("successor_pid", h.PID)
	socks := o.Sockets()
	if err := sendSockets(c, socks); err != nil {
		log.Warn("takeover: handing the sockets over failed; serving on", "err", err)
		return false
	}
	log.Info("takeover: sockets handed over; waiting for the successor to serve", "sockets", len(socks))
	timeout := o.Timeout
	if timeout <= 0 {
		timeout = time.Minute
	}
	c.SetDeadline(time.Now().Add(timeout))
	var rep report
	if err := readLine(r, &rep); err != nil {
		log.Warn("takeover: the successor went away before serving; serving on", "err", err)
		return false
	}
	if !rep.Serving {
		log.Warn("takeover: the successor failed to start; serving on", "err", rep.Error)
		return false
	}
	o.mu.Lock()
	o.taken = true
	o.mu.Unlock()
	log.Info("takeover: the successor serves; stopping accepting and draining")
	o.TakenOver(h.PID)
	c.SetDeadline(time.Now().Add(helloTimeout))
	writeLine(c, ack{Draining: true})
	return true
}

// sendSockets writes the offer with a descriptor per socket.
func sendSockets(c *net.UnixConn, socks []Socket) error {
	fds := make([]int, 0, len(socks))
	defer func() {
		for _, fd := range fds {
			syscall.Close(fd)
		}
	}()
	for _, k := range socks {
		fd, err := dupOf(k.Listener)
		if err != nil {
			return fmt.Errorf("%s %q: %w", k.Kind, k.Name, err)
		}
		fds = append(fds, fd)
	}
	b, err := marshalLine(offer{PID: os.Getpid(), Sockets: socks})
	if err != nil {
		return err
	}
	n, oobn, err := c.WriteMsgUnix(b, syscall.UnixRights(fds...), nil)
	if err != nil {
		return err
	}
	if n != len(b) || oobn == 0 && len(fds) > 0 {
		return fmt.Errorf("short write (%d of %d bytes)", n, len(b))
	}
	return nil
}

// dupOf returns a close-on-exec duplicate of ln's descriptor. It goes
// through SyscallConn, not File: (*os.File).Fd on the File of a socket
// would put it in blocking mode, for every process that shares it.
func dupOf(ln net.Listener) (int, error) {
	sc, ok := ln.(syscall.Conn)
	if !ok {
		return -1, fmt.Errorf("%T has no descriptor", ln)
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return -1, err
	}
	dup, derr := -1, error(nil)
	if err := rc.Control(func(fd uintptr) {
		r, _, e := syscall.Syscall(syscall.SYS_FCNTL, fd, syscall.F_DUPFD_CLOEXEC, 0)
		if e != 0 {
			derr = e
			return
		}
		dup = int(r)
	}); err != nil {
		return -1, err
	}
	return dup, derr
}
