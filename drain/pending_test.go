//go:build unix

package drain

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/ebb-proxy/ebb/config"
)

// TestIdleCloseWaitsForPendingBytes: an idle HTTP/1 connection whose next
// request is already in its socket, not yet read by the engine (its
// goroutine not yet scheduled), is not half-closed at idle_close: the FIN
// would cross the request, which the client could not tell from a
// failure. Once the engine has read the request and served it, the idle
// close goes ahead. Real sockets: the peek is a system call.
func TestIdleCloseWaitsForPendingBytes(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	server, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	reg := NewRegistry()
	c := reg.Track(server, "l", true, nil)
	defer c.Close()
	c.SetProtocol(ProtoHTTP1)
	c.SetState(StateIdle)
	req := "GET / HTTP/1.1\r\nHost: a\r\n\r\n"
	if _, err := io.WriteString(client, req); err != nil {
		t.Fatal(err)
	}

	cfg := drainConfig(0, 0, 10*time.Second)
	cfg.HTTP1.IdleClose = config.IdleClose(20 * time.Millisecond)
	ctl := NewController(cfg, reg, &fakeServer{reg: reg}, quiet())
	done := make(chan struct{})
	go func() {
		defer close(done)
		ctl.Run(context.Background())
	}()
	defer func() {
		ctl.Force("the test's end")
		<-done
	}()
	ctl.Trigger("test")

	// Many idle_close periods pass: no FIN while the request waits.
	client.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if n, err := client.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the client read %d bytes, %v, while its request was unread; want nothing yet", n, err)
	}
	if n := reg.Stats.IdleCloses.Load(); n != 0 {
		t.Fatalf("%d idle closes with a request waiting in the socket, want 0", n)
	}

	// The engine reads the request and serves it; then the connection is
	// idle for real and gets its FIN.
	c.SetState(StateActive)
	if _, err := io.ReadFull(server, make([]byte, len(req))); err != nil {
		t.Fatal(err)
	}
	c.SetState(StateIdle)
	client.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := client.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("the client read %d bytes, %v, after the connection went idle; want EOF (the idle close's FIN)", n, err)
	}
	if n := reg.Stats.IdleCloses.Load(); n != 1 {
		t.Fatalf("%d idle closes, want 1", n)
	}
}
