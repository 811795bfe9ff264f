package proxytest

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// FuzzOrigin is the origin of a fuzz target that plays a broken upstream
// (proxy/upstream's FuzzH1UpstreamResponse, proxy/cluster's
// FuzzH2UpstreamFrames): one loopback listener for all the executions of
// a fuzzing process, serving each connection with serve. An execution
// that failed may leave the transport's connections open: they are closed
// when the fuzzing ends, so that serve returns.
type FuzzOrigin struct {
	Addr string

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
}

// NewFuzzOrigin starts a FuzzOrigin that serves each connection with
// serve, until the end of tb.
func NewFuzzOrigin(tb testing.TB, serve func(c net.Conn, br *bufio.Reader)) *FuzzOrigin {
	o := &FuzzOrigin{conns: map[net.Conn]struct{}{}}
	o.Addr = Origin(tb, func(c net.Conn, br *bufio.Reader) {
		o.mu.Lock()
		if o.closed {
			o.mu.Unlock()
			return
		}
		o.conns[c] = struct{}{}
		o.mu.Unlock()
		defer func() {
			o.mu.Lock()
			delete(o.conns, c)
			o.mu.Unlock()
		}()
		serve(c, br)
	})
	// Before Origin's cleanup, which waits for serve to return.
	tb.Cleanup(func() {
		o.mu.Lock()
		o.closed = true
		o.mu.Unlock()
		o.CloseConns()
	})
	return o
}

// CloseConns closes the connections being served (an execution's end,
// once the client has let go of its own).
func (o *FuzzOrigin) CloseConns() {
	o.mu.Lock()
	defer o.mu.Unlock()
	for c := range o.conns {
		c.Close()
	}
}

// FuzzExec is one execution of such a target as its origin sees it. A
// request's path names its execution and its number ("/<ID>/1"): the
// origin answers request 1 with the fuzzer's bytes, any other request
// properly, with a body of Token and its path, which the fuzzer cannot
// know, and a request of no current execution (a late one of an
// execution over) not at all. Release and Delivered order the origin's
// answer to request 1 with the test's steps.
type FuzzExec struct {
	ID    uint64
	Token string
	// Release is closed once request 1's exchange has returned
	// (ReleaseFirst); Delivered once the answer to request 1 has reached
	// the client (Deliver).
	Release, Delivered         chan struct{}
	releaseOnce, deliveredOnce sync.Once

	mu        sync.Mutex
	past1     bool // the test is past request 1
	answering bool // the origin took request 1
}

// NewFuzzExec returns execution id, with a token of its own.
func NewFuzzExec(id uint64) *FuzzExec {
	return &FuzzExec{ID: id, Token: fmt.Sprintf("%016x", rand.Uint64()), Release: make(chan struct{}), Delivered: make(chan struct{})}
}

// Request returns the number of the request of x (nil: none) whose path
// is path, if it is one of x's.
func (x *FuzzExec) Request(path string) (n int, ok bool) {
	if x == nil {
		return 0, false
	}
	exec, num, found := strings.Cut(strings.TrimPrefix(path, "/"), "/")
	if !found || exec != strconv.FormatUint(x.ID, 10) {
		return 0, false
	}
	n, err := strconv.Atoi(num)
	return n, err == nil
}

// Take reports whether the origin answers request 1 with the fuzzer's
// bytes: it has not before, and the test is not past it (a request 1
// that arrives after its exchange gave up gets a proper answer).
func (x *FuzzExec) Take() bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	ok := !x.past1 && !x.answering
	x.answering = x.answering || ok
	return ok
}

// PastFirst tells the origin that the test is past request 1, and
// reports whether the origin is answering it (then the test waits for
// Delivered).
func (x *FuzzExec) PastFirst() bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.past1 = true
	return x.answering
}

// ReleaseFirst closes Release, once.
func (x *FuzzExec) ReleaseFirst() { x.releaseOnce.Do(func() { close(x.Release) }) }

// Deliver closes Delivered, once.
func (x *FuzzExec) Deliver() { x.deliveredOnce.Do(func() { close(x.Delivered) }) }
