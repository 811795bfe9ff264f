//go:build unix

package downstream

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"
)

// tcpPair returns the two ends of a loopback TCP connection, the server's
// tracked by reg as an idle HTTP/1 connection.
func tcpPair(t *testing.T, reg *Registry) (client net.Conn, c *Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	server, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	c = reg.Track(server, "l", true, nil)
	t.Cleanup(func() { c.Close() })
	c.SetProtocol(ProtoHTTP1)
	c.SetState(StateIdle)
	return client, c
}

// idleCloseAfter is the idle_close of the tests' drains: short, so that
// an idle close that should not happen has many chances to.
const idleCloseAfter = 20 * time.Millisecond

// startIdleClosing plays the drain's controller for reg's connections from
// now on, until the test ends: each has its close signal now, and the
// idle close looks at them as the controller does (Registry.Watch,
// Registry.CloseIdle) with an idle_close of idleCloseAfter.
func startIdleClosing(t *testing.T, reg *Registry) {
	now := time.Now()
	reg.SignalArrivals()
	for _, c := range reg.Conns() {
		c.Signal(now)
	}
	changed, unwatch := reg.Watch()
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		defer unwatch()
		wake := time.NewTimer(0)
		defer wake.Stop()
		for {
			select {
			case <-stop:
				return
			case <-changed:
			case <-wake.C:
			}
			if next := reg.CloseIdle(time.Now(), idleCloseAfter); !next.IsZero() {
				wake.Reset(time.Until(next))
			}
		}
	}()
	t.Cleanup(func() {
		close(stop)
		<-done
	})
}

// readAsync reads n bytes of c (io.ReadFull) on a goroutine of its own, as
// the engine does, and sends the read's error. The test waits for it at
// its end, closing c first so that a read still blocked ends.
func readAsync(t *testing.T, c *Conn, n int) <-chan error {
	done := make(chan error, 1)
	var reader sync.WaitGroup
	reader.Go(func() {
		_, err := io.ReadFull(c, make([]byte, n))
		done <- err
	})
	t.Cleanup(func() {
		c.Close()
		reader.Wait()
	})
	return done
}

// expectNothing checks that client receives nothing, not even a FIN, for
// many idle_close periods.
func expectNothing(t *testing.T, client net.Conn, while string) {
	t.Helper()
	client.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if n, err := client.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the client read %d bytes, %v, %s; want nothing yet", n, err, while)
	}
}

// expectFIN checks that client reads want and then the end of the stream,
// and closes it as a pooling client does.
func expectFIN(t *testing.T, client net.Conn, want string) {
	t.Helper()
	client.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(client)
	if err != nil || string(got) != want {
		t.Fatalf("the client read %q, %v; want %q and then EOF (the idle close's FIN)", got, err, want)
	}
	client.Close()
}

// answerThenFIN plays the engine answering the request it has read and
// then waiting for the next one, which the drain's idle close ends: the
// client reads the response whole, then the FIN, and the engine's read
// ends with io.EOF.
func answerThenFIN(t *testing.T, reg *Registry, client net.Conn, c *Conn) {
	t.Helper()
	c.SetState(StateActive)
	resp := "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
	if _, err := io.WriteString(c, resp); err != nil {
		t.Fatalf("writing the response: %v", err)
	}
	c.SetState(StateIdle)
	engine := readAsync(t, c, 1)
	expectFIN(t, client, resp)
	if err := <-engine; err != io.EOF {
		t.Fatalf("the engine's read of the next request ended with %v, want io.EOF", err)
	}
	if n := reg.Stats.IdleCloses.Load(); n != 1 {
		t.Fatalf("%d idle closes, want 1", n)
	}
}

// TestIdleCloseWaitsForPendingBytes: an idle HTTP/1 connection whose next
// request is already in its socket, not yet read by the engine (its
// goroutine not yet scheduled), is not half-closed at idle_close: the FIN
// would cross the request, which the client could not tell from a
// failure. Once the engine has read the request and served it, the idle
// close goes ahead. Real sockets: the peek is a system call.
func TestIdleCloseWaitsForPendingBytes(t *testing.T) {
	reg := NewRegistry()
	client, c := tcpPair(t, reg)
	req := "GET / HTTP/1.1\r\nHost: a\r\n\r\n"
	if _, err := io.WriteString(client, req); err != nil {
		t.Fatal(err)
	}
	startIdleClosing(t, reg)
	expectNothing(t, client, "while its request was unread")
	if n := reg.Stats.IdleCloses.Load(); n != 0 {
		t.Fatalf("%d idle closes with a request waiting in the socket, want 0", n)
	}

	// The engine reads the request and serves it; then the connection is
	// idle for real and its next read gets the FIN sent.
	c.SetState(StateActive)
	if _, err := io.ReadFull(c, make([]byte, len(req))); err != nil {
		t.Fatal(err)
	}
	answerThenFIN(t, reg, client, c)
}

// TestIdleCloseLeftToTheReader: the engine takes a request's bytes from
// the socket before it reports the connection active. In between, the
// connection looks idle and its socket is empty, and a FIN sent then
// would cross a request that had arrived (the controller used to send
// it). Bytes read since the connection went idle keep the drain from
// asking; its response goes out whole, and the FIN follows, sent by the
// reader at its next read.
func TestIdleCloseLeftToTheReader(t *testing.T) {
	reg := NewRegistry()
	client, c := tcpPair(t, reg)
	req := "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\n\r\nx"
	if _, err := io.WriteString(client, req); err != nil {
		t.Fatal(err)
	}
	// The engine has read the request, and has not yet said so.
	if _, err := io.ReadFull(c, make([]byte, len(req))); err != nil {
		t.Fatal(err)
	}
	startIdleClosing(t, reg)
	expectNothing(t, client, "while the engine had the request")
	if n := reg.Stats.IdleCloses.Load(); n != 0 {
		t.Fatalf("%d idle closes while the engine had the request, want 0", n)
	}

	answerThenFIN(t, reg, client, c)
}

// TestIdleCloseRequestBegun: a request that has begun to arrive, its first
// bytes read while the engine has not yet reported the connection active
// (TLS reads a record in parts before the engine sees any of it), is not
// crossed by a FIN: the drain does not ask, and if its ask came as those
// bytes were being read, the read of the rest, cut short, declines it and
// goes on. The idle close waits for the connection's next idle time.
func TestIdleCloseRequestBegun(t *testing.T) {
	for _, tc := range []struct {
		name     string
		drainNow bool // the drain runs from the start (else: an ask, then the drain)
	}{
		{"the drain does not ask", true},
		{"the reader declines", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := NewRegistry()
			client, c := tcpPair(t, reg)
			head, rest := "POST / HTTP/1.1\r\nHo", "st: a\r\nContent-Length: 1\r\n\r\nx"
			if _, err := io.WriteString(client, head); err != nil {
				t.Fatal(err)
			}
			if _, err := io.ReadFull(c, make([]byte, len(head))); err != nil {
				t.Fatal(err)
			}
			if tc.drainNow {
				startIdleClosing(t, reg)
			} else {
				c.askIdleClose()
			}
			got := readAsync(t, c, len(rest))
			expectNothing(t, client, "while its request was arriving")
			if _, err := io.WriteString(client, rest); err != nil {
				t.Fatal(err)
			}
			if err := <-got; err != nil {
				t.Fatalf("reading the rest of the request: %v", err)
			}
			if s := c.idleClose.Load(); s != idleNone || reg.Stats.IdleCloses.Load() != 0 {
				t.Fatalf("idle close state %d, %d idle closes while a request was arriving; want no ask outstanding, none", s, reg.Stats.IdleCloses.Load())
			}
			if !tc.drainNow {
				startIdleClosing(t, reg)
			}
			answerThenFIN(t, reg, client, c)
		})
	}
}

// TestIdleCloseAnswerPendingRequest: a request that reached the socket
// after the drain looked, before the reader answered: the reader declines,
// reads it, and the engine's own read deadline is back in force.
func TestIdleCloseAnswerPendingRequest(t *testing.T) {
	reg := NewRegistry()
	client, c := tcpPair(t, reg)
	c.Skew = 50 * time.Millisecond
	set := time.Now()
	if err := c.SetReadDeadline(set.Add(200 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	c.askIdleClose()
	req := "GET / HTTP/1.1\r\nHost: a\r\n\r\n"
	if _, err := io.WriteString(client, req); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, make([]byte, len(req))); err != nil {
		t.Fatalf("reading the request: %v", err)
	}
	if s := c.idleClose.Load(); s != idleNone || reg.Stats.IdleCloses.Load() != 0 {
		t.Fatalf("idle close state %d, %d idle closes; want the ask declined, none", s, reg.Stats.IdleCloses.Load())
	}
	// Nothing more comes: the engine's deadline (200ms, skewed 50ms) ends
	// the next read, neither sooner nor never.
	next := readAsync(t, c, 1)
	select {
	case err := <-next:
		if took := time.Since(set); !errors.Is(err, os.ErrDeadlineExceeded) || took < 250*time.Millisecond {
			t.Fatalf("the next read ended with %v after %v, want the engine's deadline after 250ms", err, took)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the next read was still waiting after 5s: the engine's deadline was not put back")
	}
	expectNothing(t, client, "after the ask was declined")
}

// TestIdleCloseLingerBounded: after its FIN, the reader waits for the
// client to close its side, reading and dropping what still comes, at
// most finWait; then the read ends with io.EOF all the same.
func TestIdleCloseLingerBounded(t *testing.T) {
	reg := NewRegistry()
	client, c := tcpPair(t, reg)
	start := time.Now()
	c.askIdleClose()
	engine := readAsync(t, c, 1)
	client.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := client.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("the client read %d bytes, %v; want EOF (the FIN)", n, err)
	}
	// A request that crossed the FIN, and no close.
	if _, err := io.WriteString(client, "GET / HTTP/1.1\r\nHost: a\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	if err := <-engine; err != io.EOF {
		t.Fatalf("the engine's read ended with %v, want io.EOF", err)
	}
	if took := time.Since(start); took < finWait {
		t.Fatalf("the reader gave up after %v, want finWait (%v)", took, finWait)
	}
	if n := reg.Stats.IdleCloses.Load(); n != 1 {
		t.Fatalf("%d idle closes, want 1", n)
	}
}
