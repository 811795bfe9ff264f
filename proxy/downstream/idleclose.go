package downstream

import (
	"errors"
	"os"
	"time"
)

// The drain's idle close of an HTTP/1 connection (or of one that has not
// said anything yet) is a handshake between the controller, which decides
// when (idle for idle_close past the connection's moment), and the
// goroutine reading the connection, which decides whether and sends the
// FIN. Only the reader knows for sure that no request has begun: the
// engine takes a request's bytes from the socket before it reports the
// connection active, and a FIN sent by the controller in between would
// cross a request that had arrived, which the client sees fail. So the
// controller asks, by moving the read deadline into the past; the
// reader's read, cut short, answers (Conn.Read, Conn.Peek): if the
// connection is still idle, has read nothing since it went idle (a TLS
// record, or a request, can be read in parts before the engine sees it)
// and nothing waits in the socket, it half-closes it, reads and drops
// what the client still sends until the client closes (within finWait),
// and ends the read with io.EOF, so that the engine closes the
// connection; otherwise it puts the engine's deadline back and reads on,
// and the response to the request that came carries Connection: close.
//
// What remains is the race no server can remove: a client that sends a
// request on the connection while the FIN is on its way to it (DRAIN.md).
const (
	idleNone     int32 = iota
	idleAsked          // the controller asked; the reader is to answer
	idleAnswered       // the reader sent the FIN and finishes the connection
)

// Finishing an idle HTTP/1 connection: after its FIN, the client has this
// long to close its side (it usually does at once) before ebb closes the
// socket.
const finWait = time.Second

// askAgain is how soon the controller looks at a connection again while
// an ask is outstanding or a request may be waiting in its socket.
const askAgain = 10 * time.Millisecond

// CloseIfIdle is the controller's half of the idle close, called at now
// for a connection that has had its close signal: if the connection has
// waited for a request for idleClose past its moment (or past going idle,
// if later), it asks the reading goroutine to close it. It returns when
// to look at the connection again, or zero when only a change of its
// state can make it due (or it is no business of the idle close: an
// outbound listener's connection, one without its signal, one serving a
// request).
func (c *Conn) CloseIfIdle(now time.Time, idleClose time.Duration) (again time.Time) {
	// A connection whose protocol is still unknown has sent nothing yet
	// (clients open spare connections, browsers preconnect): it is idle
	// like a new HTTP/1 one. One whose protocol is known and is still new
	// has sent its first request: it is not idle.
	if !c.Drainable || !c.CloseRequested() || !c.looksIdle() {
		return time.Time{}
	}
	if c.rx.Load() != c.rxIdle.Load() {
		// It has read bytes since it went idle: a request (or a TLS
		// handshake) has begun, which the engine has not reported yet.
		// Its response will carry Connection: close.
		return time.Time{}
	}
	switch c.idleClose.Load() {
	case idleAsked:
		// Its reader answers as soon as it runs; a declined ask is made
		// again.
		return now.Add(askAgain)
	case idleAnswered:
		return time.Time{} // its reader finishes it, within finWait
	}
	idleAt := c.SignaledAt()
	if ns := c.idleSince.Load(); ns != 0 && ns > idleAt.UnixNano() {
		idleAt = time.Unix(0, ns)
	}
	if due := idleAt.Add(idleClose); now.Before(due) {
		return due
	}
	if c.pending() {
		// A request (or the client's own close) is in the socket, not yet
		// read: no need to ask. Once read, the response carries
		// Connection: close.
		return now.Add(askAgain)
	}
	c.askIdleClose()
	return now.Add(askAgain)
}

// CloseIdle runs CloseIfIdle on every open connection at now and returns
// the earliest time one of them is to be looked at again, or zero.
func (r *Registry) CloseIdle(now time.Time, idleClose time.Duration) (again time.Time) {
	for _, c := range r.Conns() {
		if at := c.CloseIfIdle(now, idleClose); !at.IsZero() && (again.IsZero() || at.Before(again)) {
			again = at
		}
	}
	return again
}

// aLongTimeAgo is a read deadline that has passed, and still has once a
// skew is added: setting it cuts a blocked read short at once.
var aLongTimeAgo = time.Unix(1, 0)

// looksIdle reports whether the connection waits for a request: idle
// HTTP/1, or new and silent (the protocol is known once the first bytes
// came). Called by the controller, and by the reader for its answer.
func (c *Conn) looksIdle() bool {
	p := c.Protocol()
	switch c.State() {
	case StateIdle:
		return p == ProtoHTTP1 || p == ProtoUnknown
	case StateNew:
		return p == ProtoUnknown
	}
	return false
}

// askIdleClose asks the reader to close the idle connection (controller).
func (c *Conn) askIdleClose() {
	c.dmu.Lock()
	defer c.dmu.Unlock()
	if c.idleClose.CompareAndSwap(idleNone, idleAsked) {
		c.Conn.SetReadDeadline(aLongTimeAgo)
	}
}

// idleCloseAsked reports whether err, a read's, is the controller's ask.
func (c *Conn) idleCloseAsked(err error) bool {
	return err != nil && c.idleClose.Load() == idleAsked && errors.Is(err, os.ErrDeadlineExceeded)
}

// answerIdleClose answers the ask, on the reading goroutine, after a read
// cut short by it consumed nothing. The connection is finished only if it
// waits for a request, has read nothing since it went idle and has nothing
// in its socket. It reports whether it was (the read ends with io.EOF) or
// the read is to go on.
func (c *Conn) answerIdleClose() (closed bool) {
	if !c.looksIdle() || c.rx.Load() != c.rxIdle.Load() || c.pending() ||
		!c.idleClose.CompareAndSwap(idleAsked, idleAnswered) {
		c.declineIdleClose()
		return false
	}
	if c.reg != nil {
		c.reg.Stats.IdleCloses.Add(1)
	}
	// The client drops the connection from its pool at the FIN and closes
	// its side; a request it sent before seeing the FIN is dropped here
	// rather than left unread, which would make the close a reset.
	c.finThenDrain(finWait, finWait)
	return true
}

// declineIdleClose withdraws the ask (reader): a request has begun, or is
// waiting in the socket. The engine's read deadline is put back. Under
// dmu, so that an ask cannot set its deadline after the ask was withdrawn
// (a late past deadline would cut the engine's next read short for real).
func (c *Conn) declineIdleClose() {
	c.dmu.Lock()
	defer c.dmu.Unlock()
	c.idleClose.CompareAndSwap(idleAsked, idleNone)
	c.Conn.SetReadDeadline(c.readDL)
}

// setReadDeadline sets the read deadline and remembers it; while an ask
// is outstanding the socket's stays in the past, so that the ask is not
// overwritten.
func (c *Conn) setReadDeadline(t time.Time) error {
	c.dmu.Lock()
	defer c.dmu.Unlock()
	c.readDL = t
	if c.idleClose.Load() == idleAsked {
		return c.Conn.SetReadDeadline(aLongTimeAgo)
	}
	return c.Conn.SetReadDeadline(t)
}
