package takeover

import (
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestHandover: a successor takes a TCP listener over the Unix socket,
// accepts on it, and the offer reports the takeover once it serves.
func TestHandover(t *testing.T) {
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tcp.Close()
	path := filepath.Join(t.TempDir(), "t.sock")
	ul, err := (*Set)(nil).ListenUnix(path)
	if err != nil {
		t.Fatal(err)
	}
	taken := make(chan int, 1)
	o := &Offer{
		Listener: ul,
		Sockets: func() []Socket {
			return []Socket{{Kind: KindListener, Name: "web", Address: "x:1", Bound: tcp.Addr().String(), Listener: tcp}}
		},
		TakenOver: func(pid int) { taken <- pid },
		Log:       slog.New(slog.DiscardHandler),
	}
	served := make(chan error, 1)
	go func() { served <- o.Serve() }()
	defer o.Close()

	h, err := Take(path, takeTimeout)
	if err != nil || h == nil {
		t.Fatalf("Take: %v, %v", h, err)
	}
	ln, err := h.Sockets.Listen("x:1")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if ln.Addr().String() != tcp.Addr().String() {
		t.Fatalf("listener at %s, want the one handed over at %s", ln.Addr(), tcp.Addr())
	}
	// The old process stops accepting: a connection is still accepted,
	// by the successor.
	tcp.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	a, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	a.Close()
	if err := h.Serving(); err != nil {
		t.Fatal(err)
	}
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	if pid := <-taken; pid <= 0 {
		t.Fatalf("TakenOver(%d)", pid)
	}
}

const takeTimeout = 5 * time.Second

// TestNothingOffered: Take finds no socket file and says so with nil.
func TestNothingOffered(t *testing.T) {
	h, err := Take(filepath.Join(t.TempDir(), "none.sock"), takeTimeout)
	if h != nil || err != nil {
		t.Fatalf("Take = %v, %v; want nil, nil", h, err)
	}
}

// TestSameTCP: a socket serves an address configured with the same
// string, or naming the port it is bound to on its host; a wildcard host
// matches only a socket bound to the wildcard.
func TestSameTCP(t *testing.T) {
	loop := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080}
	any4 := &net.TCPAddr{IP: net.IPv4zero, Port: 8080}
	for _, tc := range []struct {
		configured string // the socket's Address
		bound      *net.TCPAddr
		address    string
		want       bool
	}{
		{"127.0.0.1:0", loop, "127.0.0.1:0", true}, // a port chosen by the kernel, the same string
		{"", loop, "127.0.0.1:0", false},
		{"", loop, "127.0.0.1:8080", true},
		{"", loop, "127.0.0.2:8080", false},
		{"", loop, "127.0.0.1:8081", false},
		{"", loop, "localhost:8080", true},
		{"", loop, ":8080", false},
		{"", loop, "0.0.0.0:8080", false},
		{"", any4, ":8080", true},
		{"", any4, "0.0.0.0:8080", true},
		{"", any4, "[::]:8080", true},
		{"", any4, "127.0.0.1:8080", false},
		{"", loop, "not an address", false},
		{"", loop, "example.com:8080", false},
	} {
		k := Socket{Address: tc.configured, Listener: fakeListener{tc.bound}}
		if got := sameTCP(k, tc.address); got != tc.want {
			t.Errorf("socket %q bound to %s serves %q: %v, want %v", tc.configured, tc.bound, tc.address, got, tc.want)
		}
	}
}

type fakeListener struct{ addr net.Addr }

func (fakeListener) Accept() (net.Conn, error) { return nil, net.ErrClosed }
func (fakeListener) Close() error              { return nil }
func (f fakeListener) Addr() net.Addr          { return f.addr }

// TestSetListen: Listen takes the socket of an address from the set, once,
// and opens a new one otherwise; Join merges sets; Close closes and
// returns what nobody took.
func TestSetListen(t *testing.T) {
	open := func() net.Listener {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		return ln
	}
	a, b := open(), open()
	s := (&Set{}).Join(nil)
	s.add(Socket{Kind: KindListener, Name: "a", Address: "127.0.0.1:0", Listener: a})
	s = s.Join(&Set{socks: []Socket{{Kind: KindSystemd, Listener: b}}})
	if s.Len() != 2 {
		t.Fatalf("Len = %d, want 2", s.Len())
	}
	got, err := s.Listen("127.0.0.1:0")
	if err != nil || got != a {
		t.Fatalf("Listen(127.0.0.1:0) = %v, %v; want the socket configured so", got, err)
	}
	again, err := s.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if again == a || again == b {
		t.Fatal("a socket was taken twice")
	}
	left := s.Close()
	if len(left) != 1 || left[0].Listener != b || s.Len() != 0 {
		t.Fatalf("Close returned %v, want the systemd socket", left)
	}
	if _, err := b.Accept(); err == nil {
		t.Fatal("a socket nobody took is still open after Close")
	}
	var none *Set
	if none.Len() != 0 || none.Close() != nil {
		t.Fatal("a nil set holds something")
	}
	if ln, err := none.Listen("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	} else {
		ln.Close()
	}
	a.Close()
}

// TestListenUnixStale: a socket file nobody answers on (left by a process
// that did not exit cleanly) is replaced; one a process answers on is an
// error that says what to do.
func TestListenUnixStale(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.sock")
	stale, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	stale.SetUnlinkOnClose(false)
	stale.Close()
	ln, err := (*Set)(nil).ListenUnix(path)
	if err != nil {
		t.Fatalf("over a stale socket file: %v", err)
	}
	defer ln.Close()
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("socket file mode %v (%v), want 0600", st.Mode(), err)
	}
	if _, err := (*Set)(nil).ListenUnix(path); err == nil {
		t.Fatal("a second ListenUnix on a socket served by a process succeeded")
	}
}
