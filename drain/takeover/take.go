package takeover

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"time"
)

// maxSockets bounds how many descriptors a successor accepts at once.
const maxSockets = 256

// Handover is a takeover in progress, seen from the successor: it holds
// the running ebb's sockets until it reports whether it serves on them.
type Handover struct {
	// PID is the running ebb's process id.
	PID int
	// Sockets are the sockets handed over, for Listen and ListenUnix.
	Sockets *Set

	c *net.UnixConn
	r *bufio.Reader
}

// Take asks the ebb offering its sockets at path for them. It returns nil
// and no error when nothing offers there (no socket file, or no process
// answering on it): the caller then binds its own sockets.
func Take(path string, timeout time.Duration) (*Handover, error) {
	nc, err := net.DialTimeout("unix", path, timeout)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ECONNREFUSED) {
			return nil, nil
		}
		return nil, fmt.Errorf("takeover: %w", err)
	}
	c := nc.(*net.UnixConn)
	h, err := take(c, timeout)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("takeover from %s: %w", path, err)
	}
	return h, nil
}

func take(c *net.UnixConn, timeout time.Duration) (*Handover, error) {
	c.SetDeadline(time.Now().Add(timeout))
	if err := writeLine(c, hello{Takeover: version, PID: os.Getpid()}); err != nil {
		return nil, err
	}
	// The descriptors come with the first bytes of the offer.
	buf := make([]byte, 64<<10)
	oob := make([]byte, syscall.CmsgSpace(maxSockets*4))
	n, oobn, flags, _, err := c.ReadMsgUnix(buf, oob)
	var fds []int
	if oobn > 0 {
		msgs, perr := syscall.ParseSocketControlMessage(oob[:oobn])
		if perr != nil && err == nil {
			err = perr
		}
		for i := range msgs {
			got, _ := syscall.ParseUnixRights(&msgs[i])
			fds = append(fds, got...)
		}
	}
	closeFDs := func() {
		for _, fd := range fds {
			syscall.Close(fd)
		}
	}
	if err == nil && flags&syscall.MSG_CTRUNC != 0 {
		err = fmt.Errorf("more than %d sockets offered", maxSockets)
	}
	if err == nil && n == 0 {
		err = errors.New("the running ebb closed the connection")
	}
	if err != nil {
		closeFDs()
		return nil, err
	}
	// The rest of the line, if it did not come in one read.
	data := buf[:n]
	for !bytes.Contains(data, []byte{'\n'}) {
		m, err := c.Read(buf[len(data):cap(buf)])
		if err != nil {
			closeFDs()
			return nil, fmt.Errorf("reading the offer: %w", err)
		}
		data = buf[:len(data)+m]
	}
	line, rest, _ := bytes.Cut(data, []byte{'\n'})
	var of offer
	if err := json.Unmarshal(line, &of); err != nil {
		closeFDs()
		return nil, fmt.Errorf("bad offer %q: %w", line, err)
	}
	if of.Error != "" {
		closeFDs()
		return nil, errors.New(of.Error)
	}
	if len(fds) != len(of.Sockets) {
		closeFDs()
		return nil, fmt.Errorf("%d sockets described, %d descriptors received", len(of.Sockets), len(fds))
	}
	set := &Set{}
	for i, k := range of.Sockets {
		ln, err := listenerOf(fds[i], fmt.Sprintf("%s %s", k.Kind, k.Bound))
		if err != nil {
			for _, fd := range fds[i+1:] {
				syscall.Close(fd)
			}
			set.Close()
			return nil, fmt.Errorf("%s %q (%s): %w", k.Kind, k.Name, k.Bound, err)
		}
		k.Listener = ln
		set.add(k)
	}
	r := bufio.NewReader(io.MultiReader(bytes.NewReader(bytes.Clone(rest)), c))
	return &Handover{PID: of.PID, Sockets: set, c: c, r: r}, nil
}

// Serving tells the running ebb that this process serves on the sockets,
// so that it stops accepting and drains, and waits for its word.
func (h *Handover) Serving() error {
	defer h.c.Close()
	h.c.SetDeadline(time.Now().Add(helloTimeout))
	if err := writeLine(h.c, report{Serving: true}); err != nil {
		return err
	}
	var a ack
	if err := readLine(h.r, &a); err != nil {
		return fmt.Errorf("the running ebb did not confirm: %w", err)
	}
	if !a.Draining {
		return errors.New("the running ebb did not confirm")
	}
	return nil
}

// Fail tells the running ebb that this process could not start (why: err),
// so that it serves on, and closes the sockets not taken.
func (h *Handover) Fail(err error) {
	h.c.SetDeadline(time.Now().Add(helloTimeout))
	writeLine(h.c, report{Error: err.Error()})
	h.c.Close()
	h.Sockets.Close()
}
