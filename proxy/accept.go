package proxy

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ebb-proxy/ebb/drain"
)

// acceptLoop accepts connections on a socket, registers each one and hands
// it to an engine. It is ebb's own loop rather than a library's so that
// every connection is in the registry before a byte is read, and so that
// when to stop accepting is a drain decision, not an engine's.
type acceptLoop struct {
	ln        net.Listener
	name      string
	drainable bool // inbound: its connections are drained
	reg       *drain.Registry
	dispatch  func(*drain.Conn)

	stopOnce sync.Once
	started  atomic.Bool   // run has begun
	quit     chan struct{} // closed by stop, ends a backoff wait
	done     chan struct{} // closed when run returns
}

func newAcceptLoop(ln net.Listener, name string, drainable bool, reg *drain.Registry, dispatch func(*drain.Conn)) *acceptLoop {
	return &acceptLoop{ln: ln, name: name, drainable: drainable, reg: reg, dispatch: dispatch, quit: make(chan struct{}), done: make(chan struct{})}
}

// run accepts until the socket is closed. Temporary errors (such as running
// out of file descriptors) are retried with a capped backoff, as net/http
// does, instead of ending the loop.
func (a *acceptLoop) run() {
	a.started.Store(true)
	defer close(a.done)
	var backoff time.Duration
	for {
		nc, err := a.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
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
		a.dispatch(a.reg.Track(nc, a.name, a.drainable))
	}
}

// stop closes the socket and, if run has begun, waits for it to return.
// (A run that begins later returns at once; its owner waits for it.)
func (a *acceptLoop) stop() error {
	var err error
	a.stopOnce.Do(func() {
		close(a.quit)
		err = a.ln.Close()
	})
	if a.started.Load() {
		<-a.done
	}
	return err
}

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
