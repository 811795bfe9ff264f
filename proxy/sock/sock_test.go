package sock_test

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/ebb-proxy/ebb/proxy/sock"
)

// pair returns both ends of a loopback TCP connection.
func pair(t *testing.T) (client, server *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s := <-accepted
	if s == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	return c.(*net.TCPConn), s.(*net.TCPConn)
}

// TestWriteWhole: a write far larger than the socket's buffers arrives
// whole and in order, the writer waiting for room as the reader drains
// it.
func TestWriteWhole(t *testing.T) {
	c, s := pair(t)
	want := make([]byte, 8<<20)
	for i := range want {
		want[i] = byte(i * 7)
	}
	var got bytes.Buffer
	var reader sync.WaitGroup
	reader.Go(func() { io.Copy(&got, s) })
	var w sock.IO
	w.Init(c)
	n, err := w.Write(want)
	if err != nil || n != len(want) {
		t.Fatalf("Write: %d, %v; want %d, nil", n, err, len(want))
	}
	c.CloseWrite()
	reader.Wait()
	if !bytes.Equal(got.Bytes(), want) {
		t.Fatalf("the reader got %d bytes, not the %d written", got.Len(), len(want))
	}
}

// TestWriteErrors: a write fails as net.Conn.Write does: past its
// deadline (a timeout), on a closed connection, to a peer that reset it;
// each a *net.OpError of Op "write".
func TestWriteErrors(t *testing.T) {
	opError := func(t *testing.T, err error) *net.OpError {
		t.Helper()
		var oe *net.OpError
		if !errors.As(err, &oe) || oe.Op != "write" {
			t.Fatalf("error %#v, want a *net.OpError of Op write", err)
		}
		return oe
	}
	t.Run("deadline", func(t *testing.T) {
		c, _ := pair(t)
		var w sock.IO
		w.Init(c)
		c.SetWriteDeadline(time.Unix(1, 0))
		_, err := w.Write([]byte("x"))
		opError(t, err)
		var ne net.Error
		if !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("%v: want a timeout (os.ErrDeadlineExceeded)", err)
		}
	})
	t.Run("full, then the deadline", func(t *testing.T) {
		c, _ := pair(t) // nobody reads: the buffers fill
		var w sock.IO
		w.Init(c)
		c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
		n, err := w.Write(make([]byte, 64<<20))
		opError(t, err)
		if !errors.Is(err, os.ErrDeadlineExceeded) || n == 0 || n >= 64<<20 {
			t.Fatalf("%d bytes, %v: want part of it written, then the deadline", n, err)
		}
	})
	t.Run("closed", func(t *testing.T) {
		c, _ := pair(t)
		var w sock.IO
		w.Init(c)
		c.Close()
		_, err := w.Write([]byte("x"))
		opError(t, err)
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("%v: want net.ErrClosed", err)
		}
	})
	t.Run("reset by the peer", func(t *testing.T) {
		c, s := pair(t)
		s.SetLinger(0)
		s.Close() // an RST
		var w sock.IO
		w.Init(c)
		var err error
		for range 100 { // the RST may arrive after the first writes
			if _, err = w.Write([]byte("x")); err != nil {
				break
			}
		}
		var se *os.SyscallError
		if oe := opError(t, err); !errors.As(oe.Err, &se) {
			t.Fatalf("%v: want a system call's error", err)
		}
	})
}

// TestWriteNotASocket: a connection that is no socket is written to
// through its own Write.
func TestWriteNotASocket(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	var reader sync.WaitGroup
	var got []byte
	reader.Go(func() { got, _ = io.ReadAll(b) })
	var w sock.IO
	w.Init(a)
	if n, err := w.Write([]byte("piped")); n != 5 || err != nil {
		t.Fatalf("Write: %d, %v", n, err)
	}
	a.Close()
	reader.Wait()
	if string(got) != "piped" {
		t.Fatalf("got %q", got)
	}
}

// TestRead: reads return what arrived as it arrives, waiting for it
// through the netpoller; io.EOF, unwrapped, once the peer closed its
// side; a timeout past the read deadline; net.ErrClosed once closed.
func TestRead(t *testing.T) {
	c, s := pair(t)
	var r sock.IO
	r.Init(c)
	var writer sync.WaitGroup
	defer writer.Wait()
	proceed := make(chan struct{})
	writer.Go(func() {
		s.Write([]byte("first"))
		<-proceed
		s.Write([]byte("second"))
		s.CloseWrite()
	})
	buf := make([]byte, 64)
	if n, err := r.Read(buf); err != nil || string(buf[:n]) != "first" {
		t.Fatalf("first read: %q, %v", buf[:n], err)
	}
	close(proceed) // the next read waits for "second"
	var got []byte
	for {
		n, err := r.Read(buf)
		got = append(got, buf[:n]...)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("read: %v", err)
		}
	}
	if string(got) != "second" {
		t.Fatalf("then %q, want %q", got, "second")
	}

	c2, _ := pair(t)
	var r2 sock.IO
	r2.Init(c2)
	c2.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	_, err := r2.Read(buf)
	var oe *net.OpError
	if !errors.As(err, &oe) || oe.Op != "read" || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("past the deadline: %#v, want a read *net.OpError wrapping os.ErrDeadlineExceeded", err)
	}
	c2.Close()
	if _, err := r2.Read(buf); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("after Close: %v, want net.ErrClosed", err)
	}
}
