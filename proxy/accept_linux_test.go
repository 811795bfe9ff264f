package proxy

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ebb-proxy/ebb/proxy/downstream"
)

// queuedClients starts an accept loop on a fresh socket (opened with
// listen) whose dispatch
// holds the first connection until release is closed, so that the n
// connections dialled next wait in the kernel's accept queue, each with
// a request ("ping\n") already sent. Every connection the loop dispatches
// answers "pong\n" and is closed.
func queuedClients(t *testing.T, n int, listen func(string) (net.Listener, error)) (loop *acceptLoop, clients []net.Conn, release func()) {
	t.Helper()
	ln, err := listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	held := make(chan struct{})
	released := make(chan struct{})
	release = sync.OnceFunc(func() { close(released) })
	first := true
	serve := func(c net.Conn) {
		defer c.Close()
		if _, err := bufio.NewReader(c).ReadString('\n'); err == nil {
			io.WriteString(c, "pong\n")
		}
	}
	done := make(chan struct{})
	var served []chan struct{}
	loop = newAcceptLoop(ln, "t", true, downstream.NewRegistry(), func(c *downstream.Conn) {
		if first {
			first = false
			close(held)
			<-released
		}
		ch := make(chan struct{})
		served = append(served, ch)
		go func() { defer close(ch); serve(c) }()
	})
	go func() {
		defer close(done)
		loop.run()
	}()
	t.Cleanup(func() {
		release()
		loop.stop()
		<-done
		for _, ch := range served {
			<-ch
		}
	})
	dial := func() net.Conn {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if _, err := io.WriteString(c, "ping\n"); err != nil {
			t.Fatal(err)
		}
		return c
	}
	clients = append(clients, dial())
	<-held
	for range n {
		clients = append(clients, dial())
	}
	return loop, clients, release
}

// answer reads the reply on c: "pong\n", or the error the client got.
func answer(c net.Conn) error {
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "pong\n" {
		return errors.New("got " + line)
	}
	return nil
}

// TestStopServesAcceptQueue: connections the kernel has completed but the
// loop has not accepted yet, each with its request sent, are served when
// the listener stops, not reset; a client dialling once the socket
// refuses new connections is refused (after its SYN is sent again), with
// nothing sent.
func TestStopServesAcceptQueue(t *testing.T) {
	t.Parallel()
	loop, clients, release := queuedClients(t, 20, downstream.Listen)
	loop.grace = time.Minute // ended below, once the queue is served
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		loop.stop()
	}()
	// New connection requests are dropped once stop has begun: a dial
	// times out (its SYN unanswered) instead of joining the queue. Those
	// that still got in before are served like the others.
	addr := loop.ln.Addr().String()
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err != nil {
			var ne net.Error
			if !errors.As(err, &ne) || !ne.Timeout() {
				t.Fatalf("dialling a stopping listener: %v, want a timeout (SYN dropped)", err)
			}
			break
		}
		io.WriteString(c, "ping\n")
		clients = append(clients, c)
	}
	release()
	for i, c := range clients {
		if err := answer(c); err != nil {
			t.Errorf("client %d of %d: %v, want pong", i, len(clients), err)
		}
	}
	// End the grace now rather than in a minute.
	loop.ln.(downstream.OwnListener).SetDeadline(time.Now())
	<-stopped
	_, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("dialling a stopped listener: %v, want connection refused", err)
	}
}

// TestStopSharedClosesAtOnce: a socket handed to a successor is closed at
// once (the successor takes its queue), and so is one this process did
// not open (systemd's, a predecessor's: they may hold it still, and a
// filter would outlive this process). Here no other process holds it, so
// the queued clients are reset: what stop avoids for a socket of its own.
func TestStopSharedClosesAtOnce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		listen func(string) (net.Listener, error)
		share  bool
	}{
		{"handed over", downstream.Listen, true},
		// Plain TCP, as downstream.Listen's, but not opened by it.
		{"inherited", func(a string) (net.Listener, error) {
			var lc net.ListenConfig
			lc.SetMultipathTCP(false)
			return lc.Listen(context.Background(), "tcp", a)
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			loop, clients, release := queuedClients(t, 5, tc.listen)
			if tc.share {
				loop.share()
			}
			stopped := make(chan struct{})
			go func() {
				defer close(stopped)
				loop.stop()
			}()
			// Once the socket is closed, a dial is refused.
			addr := loop.ln.Addr().String()
			for {
				c, err := net.DialTimeout("tcp", addr, 5*time.Second)
				if err != nil {
					// Refused, or reset by the close as it was completing.
					if !errors.Is(err, syscall.ECONNREFUSED) && !errors.Is(err, syscall.ECONNRESET) {
						t.Fatalf("dialling a closed listener: %v, want connection refused", err)
					}
					break
				}
				io.WriteString(c, "ping\n")
				clients = append(clients, c)
			}
			release()
			<-stopped
			for i, c := range clients[1:] {
				if err := answer(c); err == nil {
					t.Errorf("queued client %d was served after a plain close, want reset", i)
				}
			}
		})
	}
}
