// Package takeover hands ebb's listening sockets from a running process to
// its successor on the same host, so that a restart (a new binary, a change
// only a restart applies) refuses no connection: the successor accepts on
// the very sockets the running ebb listens on, and only then does the
// running one stop accepting and drain.
//
// The running ebb offers its sockets on a Unix socket (Offer). A successor
// connects to it (Take) and receives every listening socket, each with the
// address it was configured with, as file descriptors (SCM_RIGHTS); it
// serves on those whose address its own configuration names (Set.Listen),
// binds the others, and reports back: serving, or the error that stopped
// it. On "serving", the running ebb stops accepting and starts its drain;
// on an error, or if the successor goes away first, it serves on as if
// nothing had happened. The accept queue of a socket belongs to the socket,
// not to a process, so a connection the kernel has queued is accepted by
// one of the two, never refused.
//
// Sockets passed by systemd (socket activation, LISTEN_FDS) are taken the
// same way (FromEnv).
//
// The exchange, one JSON object per line:
//
//	successor → running   {"takeover":1,"pid":P}
//	running → successor   {"pid":Q,"sockets":[{"kind":…,"name":…,"address":…,"bound":…},…]}
//	                      with one descriptor per socket, in order
//	successor → running   {"serving":true} or {"error":"…"}
//	running → successor   {"draining":true}, if it was serving
package takeover

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/ebb-proxy/ebb/proxy/downstream"
)

// Kind says what a listening socket is for.
type Kind string

// Kinds of sockets handed over.
const (
	KindListener Kind = "listener" // a proxy listener; Name is its name
	KindAdmin    Kind = "admin"    // the admin server
	KindTakeover Kind = "takeover" // the Unix socket of the takeover itself
	KindSystemd  Kind = "systemd"  // passed by systemd; Name is its FileDescriptorName
)

// Socket is one listening socket.
type Socket struct {
	Kind Kind   `json:"kind"`
	Name string `json:"name,omitempty"`
	// Address is the address the socket was configured with (for a Unix
	// socket, its path); empty when unknown (systemd's).
	Address string `json:"address,omitempty"`
	// Bound is the socket's own address (getsockname).
	Bound string `json:"bound"`

	Listener net.Listener `json:"-"`
}

// version is the protocol's version, sent by the successor.
const version = 1

// Set holds listening sockets a process was given rather than opened: by
// the ebb it takes over from, or by systemd. Listen and ListenUnix take
// from it; Close closes what was not taken. A nil *Set holds nothing.
type Set struct {
	mu    sync.Mutex
	socks []Socket
}

// add adds sockets to the set.
func (s *Set) add(socks ...Socket) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.socks = append(s.socks, socks...)
}

// Join returns a set holding the sockets of both s and o (either may be
// nil).
func (s *Set) Join(o *Set) *Set {
	switch {
	case s == nil:
		return o
	case o == nil:
		return s
	}
	o.mu.Lock()
	socks := o.socks
	o.socks = nil
	o.mu.Unlock()
	s.add(socks...)
	return s
}

// Len returns how many sockets are left to take.
func (s *Set) Len() int {
	if s == nil {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.socks)
}

// Listen returns the TCP listening socket for address: the one in the set
// configured with the same address, or bound to the same one, if any;
// otherwise a new one.
func (s *Set) Listen(address string) (net.Listener, error) {
	if ln := s.take(func(k Socket) bool { return k.Listener.Addr().Network() == "tcp" && sameTCP(k, address) }); ln != nil {
		return ln, nil
	}
	return downstream.Listen(address)
}

// ListenUnix returns the Unix listening socket at path: the set's, if it
// holds one there; otherwise a new one, after removing a stale socket file
// that no process answers on. A socket file that a process answers on is
// an error: another ebb offers its sockets there.
func (s *Set) ListenUnix(path string) (*net.UnixListener, error) {
	if ln := s.take(func(k Socket) bool { return k.Listener.Addr().Network() == "unix" && k.Bound == path }); ln != nil {
		ul := ln.(*net.UnixListener)
		// The file is the predecessor's: it must survive this listener
		// being closed when a successor takes over in turn, and is removed
		// at the last exit (see Offer).
		ul.SetUnlinkOnClose(false)
		return ul, nil
	}
	if _, err := os.Lstat(path); err == nil {
		c, err := net.Dial("unix", path)
		if err == nil {
			c.Close()
			return nil, fmt.Errorf("%s: another process serves on it (is an ebb running? start this one with -takeover to take over from it)", path)
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		// Left behind by a process that did not exit cleanly.
		if err := os.Remove(path); err != nil {
			return nil, err
		}
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, err
	}
	// Whoever connects can take every listener: owner only (and Offer
	// checks the peer's user too).
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, err
	}
	return ln, nil
}

// take removes the first socket match accepts from the set and returns its
// listener, or nil.
func (s *Set) take(match func(Socket) bool) net.Listener {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, k := range s.socks {
		if match(k) {
			s.socks = append(s.socks[:i], s.socks[i+1:]...)
			return k.Listener
		}
	}
	return nil
}

// Close closes the sockets not taken and returns them. (Closing a handed
// over socket closes this process's descriptor only: the socket lives on
// in the process that handed it over until that one closes it too.)
func (s *Set) Close() []Socket {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	left := s.socks
	s.socks = nil
	for _, k := range left {
		if ul, ok := k.Listener.(*net.UnixListener); ok {
			ul.SetUnlinkOnClose(false)
		}
		k.Listener.Close()
	}
	return left
}

// sameTCP reports whether socket k serves address: configured with the
// same string, or bound to the same port on the same host (a wildcard host
// matching only a wildcard host).
func sameTCP(k Socket, address string) bool {
	if k.Address != "" && k.Address == address {
		return true
	}
	host, port, err := net.SplitHostPort(address)
	if err != nil || port == "0" {
		return false
	}
	bound, ok := k.Listener.Addr().(*net.TCPAddr)
	if !ok || strconv.Itoa(bound.Port) != port {
		return false
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		return bound.IP.IsUnspecified()
	}
	if host == "localhost" {
		return bound.IP.IsLoopback()
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.Equal(bound.IP)
}

// FromEnv returns the sockets systemd passed (socket activation: LISTEN_PID,
// LISTEN_FDS, LISTEN_FDNAMES), or nil when it passed none, and removes
// those variables from the environment so that a child process does not
// take them for its own. Every socket passed must be a listening TCP or
// Unix stream socket.
func FromEnv() (*Set, error) {
	pid, fds := os.Getenv("LISTEN_PID"), os.Getenv("LISTEN_FDS")
	if fds == "" {
		return nil, nil
	}
	if pid != strconv.Itoa(os.Getpid()) {
		// Meant for another process (our parent's, passed on by mistake).
		return nil, nil
	}
	names := strings.Split(os.Getenv("LISTEN_FDNAMES"), ":")
	for _, k := range []string{"LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"} {
		os.Unsetenv(k)
	}
	n, err := strconv.Atoi(fds)
	if err != nil || n < 0 {
		return nil, fmt.Errorf("LISTEN_FDS: expected a number of sockets, got %q", fds)
	}
	const first = 3 // SD_LISTEN_FDS_START
	s := &Set{}
	for i := range n {
		fd := first + i
		syscall.CloseOnExec(fd)
		name := ""
		if i < len(names) {
			name = names[i]
		}
		ln, err := listenerOf(fd, "systemd socket "+name)
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("LISTEN_FDS: socket %d (%q): %w", fd, name, err)
		}
		s.add(Socket{Kind: KindSystemd, Name: name, Bound: ln.Addr().String(), Listener: ln})
	}
	return s, nil
}

// listenerOf makes a net.Listener of descriptor fd, which it then closes
// (the listener has its own).
func listenerOf(fd int, name string) (net.Listener, error) {
	// os.NewFile rather than anything that calls (*os.File).Fd on a
	// socket net gave out: Fd would put the socket, shared with the
	// process that handed it over, in blocking mode under that process's
	// feet.
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	ln, err := net.FileListener(f)
	if err != nil {
		return nil, err
	}
	return ln, nil
}

// hello is the successor's first line.
type hello struct {
	Takeover int `json:"takeover"`
	PID      int `json:"pid"`
}

// offer is the running ebb's answer, sent with the descriptors.
type offer struct {
	PID     int      `json:"pid"`
	Sockets []Socket `json:"sockets,omitempty"`
	Error   string   `json:"error,omitempty"`
}

// report is the successor's outcome.
type report struct {
	Serving bool   `json:"serving,omitempty"`
	Error   string `json:"error,omitempty"`
}

// ack is the running ebb's last line.
type ack struct {
	Draining bool `json:"draining"`
}

// readLine reads one JSON line from r into v.
func readLine(r *bufio.Reader, v any) error {
	line, err := r.ReadBytes('\n')
	if err != nil {
		if errors.Is(err, net.ErrClosed) || (len(line) == 0 && errors.Is(err, os.ErrDeadlineExceeded)) {
			return err
		}
		if len(line) == 0 {
			return fmt.Errorf("connection closed: %w", err)
		}
		return err
	}
	if err := json.Unmarshal(line, v); err != nil {
		return fmt.Errorf("bad message %q: %w", strings.TrimSpace(string(line)), err)
	}
	return nil
}

// writeLine writes v as one JSON line.
func writeLine(c net.Conn, v any) error {
	b, err := marshalLine(v)
	if err != nil {
		return err
	}
	_, err = c.Write(b)
	return err
}

// marshalLine returns v as one JSON line.
func marshalLine(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	return append(b, '\n'), err
}
