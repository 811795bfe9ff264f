package proxy

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ebb-proxy/ebb/proxy/downstream"
)

// acceptLoop accepts connections on a socket, registers each one and hands
// it to an engine. It is ebb's own loop rather than a library's so that
// every connection is in the registry before a byte is read, and so that
// when to stop accepting is a drain decision, not an engine's.
type acceptLoop struct {
	ln        net.Listener
	name      string
	drainable bool // inbound: its connections are drained
	reg       *downstream.Registry
	dispatch  func(*downstream.Conn)

	// grace is how long stop keeps accepting once new connections are
	// refused (acceptGrace; tests lengthen it).
	grace time.Duration

	// slots holds a token per open connection when the listener has a
	// max_connections (nil: no cap); full, if set, is told when run waits
	// for a slot.
	slots chan struct{}
	full  func()

	stopOnce  sync.Once
	started   atomic.Bool   // run has begun
	shared    atomic.Bool   // the socket has been handed to another process
	finishing atomic.Bool   // stop refuses new connections; run ends at its deadline
	quit      chan struct{} // closed by stop, ends a backoff wait
	finished  chan struct{} // closed by finish, ends a wait for a slot
	done      chan struct{} // closed when run returns
}

// acceptGrace is how long a stopping loop goes on accepting the
// connections whose handshake was under way when it began refusing new
// ones: a round trip, with room to spare.
const acceptGrace = 100 * time.Millisecond

func newAcceptLoop(ln net.Listener, name string, drainable bool, reg *downstream.Registry, dispatch func(*downstream.Conn)) *acceptLoop {
	return &acceptLoop{ln: ln, name: name, drainable: drainable, reg: reg, dispatch: dispatch, grace: acceptGrace,
		quit: make(chan struct{}), finished: make(chan struct{}), done: make(chan struct{})}
}

// limit caps the loop's open connections at max (0: no cap). At the cap
// the loop accepts nothing until a connection closes: new clients wait
// in the kernel's accept queue (and, past its backlog, retransmit their
// SYN), as HAProxy's maxconn has them do, rather than being accepted to
// be turned away. full is told each time the loop begins to wait.
func (a *acceptLoop) limit(max int, full func()) {
	if max > 0 {
		a.slots, a.full = make(chan struct{}, max), full
	}
}

// takeSlot waits for room for one more connection, reporting false if
// the loop is to end instead.
func (a *acceptLoop) takeSlot() bool {
	if a.slots == nil {
		return true
	}
	select {
	case a.slots <- struct{}{}:
		return true
	default:
	}
	if a.full != nil {
		a.full()
	}
	select {
	case a.slots <- struct{}{}:
		return true
	case <-a.quit:
	case <-a.finished:
	}
	return false
}

// freeSlot gives back a connection's slot.
func (a *acceptLoop) freeSlot() { <-a.slots }

// run accepts until the socket is closed. Temporary errors (such as running
// out of file descriptors) are retried with a capped backoff, as net/http
// does, instead of ending the loop.
func (a *acceptLoop) run() {
	a.started.Store(true)
	defer close(a.done)
	var backoff time.Duration
	var onClose func()
	if a.slots != nil {
		onClose = a.freeSlot
	}
	for {
		if !a.takeSlot() {
			return
		}
		nc, err := a.ln.Accept()
		if err != nil {
			if a.slots != nil {
				a.freeSlot()
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				if a.finishing.Load() {
					return // stop's deadline: what was queued is taken
				}
				continue
			}
			// Transient (EMFILE, ECONNABORTED...): back off and retry.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
			case <-a.quit:
				t.Stop()
				return
			}
			continue
		}
		backoff = 0
		if tc, ok := nc.(*net.TCPConn); ok {
			_ = tc.SetNoDelay(true)
		}
		a.dispatch(a.reg.Track(nc, a.name, a.drainable, onClose))
	}
}

// stop closes the socket and, if run has begun, waits for it to return.
// (A run that begins later returns at once; its owner waits for it.)
//
// Closing a listening socket resets every connection in its accept queue:
// the kernel has completed their handshakes, and a client may already
// have sent its request on one (nginx and HAProxy write it as soon as
// the connection is up, and do not retry a POST they have sent). So when
// the socket is this process's alone, stop first has the kernel drop new
// connection requests (refuseNew: a socket filter on SYNs), lets run take
// what is queued or completing for grace, and then closes the socket. A
// client whose SYN was dropped sends it again (after 1s on Linux), is
// refused, and tries elsewhere: a connection error before anything was
// sent, which every client and proxy retries.
//
// A socket handed to a successor (share) is closed at once: the
// successor holds it and accepts what is queued. So is one this process
// did not open (inherited from systemd or from the ebb it took over
// from; not a downstream.OwnListener): another process may hold it still, and
// a filter on it would outlive this one.
func (a *acceptLoop) stop() error { return a.end(true) }

// close closes the socket at once, as stop does for a shared one: for
// when every connection is about to be closed anyway.
func (a *acceptLoop) close() error { return a.end(false) }

func (a *acceptLoop) end(graceful bool) error {
	var err error
	a.stopOnce.Do(func() {
		if graceful && a.started.Load() && !a.shared.Load() && a.finish() {
			<-a.done
		}
		close(a.quit)
		err = a.ln.Close()
	})
	if a.started.Load() {
		<-a.done
	}
	return err
}

// finish refuses new connections and has run return grace from now,
// reporting whether both could be arranged.
func (a *acceptLoop) finish() bool {
	own, ok := a.ln.(downstream.OwnListener)
	if !ok || refuseNew(own) != nil {
		return false
	}
	a.finishing.Store(true)
	close(a.finished)
	if own.SetDeadline(time.Now().Add(a.grace)) != nil {
		// The socket accepts nothing new: close it now.
		return false
	}
	return true
}

// share records that another process holds the socket too.
func (a *acceptLoop) share() { a.shared.Store(true) }

// stopped reports whether stop has been called.
func (a *acceptLoop) stopped() bool {
	select {
	case <-a.quit:
		return true
	default:
		return false
	}
}

// chanListener is a net.Listener fed from our accept loop. fasthttp's
// Server.Serve takes a listener; giving it this one keeps accepting in our
// hands while fasthttp still tracks the connections it serves, so that its
// own shutdown hooks work.
type chanListener struct {
	addr  net.Addr
	ch    chan net.Conn
	close chan struct{}
	once  sync.Once
}

func newChanListener(addr net.Addr) *chanListener {
	return &chanListener{addr: addr, ch: make(chan net.Conn), close: make(chan struct{})}
}

// Accept returns the next connection handed over by the accept loop.
func (l *chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.close:
		// fasthttp's Serve ends quietly on io.EOF; any other error is
		// logged as a "permanent error when accepting".
		return nil, io.EOF
	}
}

// deliver hands c to the engine, or closes it if the engine is gone.
func (l *chanListener) deliver(c net.Conn) {
	select {
	case l.ch <- c:
	case <-l.close:
		c.Close()
	}
}

// Close stops Accept. Safe to call more than once.
func (l *chanListener) Close() error {
	l.once.Do(func() { close(l.close) })
	return nil
}

// Addr returns the socket's address.
func (l *chanListener) Addr() net.Addr { return l.addr }
