package loadgen

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Strict is a strict HTTP/1.1 client: a small keep-alive pool of its own
// over net.Conn and bufio, shared by the workers. It sends every request
// exactly once and never retries. Before reusing a pooled connection it
// checks, without blocking, whether the server has closed it (a read with
// a deadline in the past: a timeout means alive, EOF means closed) and
// drops it if so, as client pools do. It honours Connection: close.
//
// addr and maxIdle are read-only; idle and the counters are guarded by mu.
type Strict struct {
	addr    string
	maxIdle int

	mu          sync.Mutex
	idle        []*strictConn // LIFO
	dropped     int           // pooled connections found closed
	unsolicited int           // pooled connections with bytes nobody asked for
}

type strictConn struct {
	c  net.Conn
	br *bufio.Reader
}

// NewStrict returns a strict client of addr (host:port) pooling a
// connection per worker at most.
func NewStrict(addr string, workers int) *Strict {
	return &Strict{addr: addr, maxIdle: workers}
}

// conn returns a pooled connection the server has not closed, or a new one.
func (s *Strict) conn(ctx context.Context) (*strictConn, error) {
	for {
		s.mu.Lock()
		n := len(s.idle)
		if n == 0 {
			s.mu.Unlock()
			d := net.Dialer{Timeout: Timeout}
			c, err := d.DialContext(ctx, "tcp", s.addr)
			if err != nil {
				return nil, err
			}
			return &strictConn{c: c, br: bufio.NewReader(c)}, nil
		}
		sc := s.idle[n-1]
		s.idle = s.idle[:n-1]
		s.mu.Unlock()
		alive, unsolicited := sc.alive()
		if alive {
			return sc, nil
		}
		sc.c.Close()
		s.mu.Lock()
		s.dropped++
		if unsolicited {
			s.unsolicited++
		}
		s.mu.Unlock()
	}
}

// alive peeks at the connection without blocking: a read timing out at
// once means nothing has arrived, neither bytes nor the server's FIN.
func (sc *strictConn) alive() (ok, unsolicited bool) {
	if sc.br.Buffered() > 0 {
		return false, true
	}
	if err := sc.c.SetReadDeadline(time.Unix(1, 0)); err != nil {
		return false, false
	}
	_, err := sc.br.Peek(1)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true, false
	}
	return false, err == nil
}

func (s *Strict) put(sc *strictConn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.idle) >= s.maxIdle {
		sc.c.Close()
		return
	}
	s.idle = append(s.idle, sc)
}

// Do sends r on a pooled connection or a new one; w does not matter.
func (s *Strict) Do(ctx context.Context, _ int, r Request) (string, error) {
	sc, err := s.conn(ctx)
	if err != nil {
		return "", fmt.Errorf("%s %s: dialling: %w", r.Method, r.Path, err)
	}
	// Ending ctx ends the exchange: a deadline in the past fails its
	// reads and writes at once.
	abandon := context.AfterFunc(ctx, func() { sc.c.SetDeadline(time.Unix(1, 0)) })
	resp, got, err := sc.exchange(r)
	abandoned := !abandon()
	if err != nil || abandoned {
		sc.c.Close()
		if err == nil {
			err = ctx.Err()
		}
		return "", fmt.Errorf("%s %s: %w", r.Method, r.Path, err)
	}
	if resp.Close || r.Last {
		sc.c.Close() // Connection: close: never reused
	} else {
		s.put(sc)
	}
	return resp.Header.Get("X-Replica"), check(r, 1, resp, got)
}

// exchange writes r once and reads its response whole.
func (sc *strictConn) exchange(r Request) (*http.Response, string, error) {
	if err := sc.c.SetDeadline(time.Now().Add(Timeout)); err != nil {
		return nil, "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: vip\r\n", r.Method, r.Path)
	if r.Method == http.MethodPost {
		fmt.Fprintf(&b, "Content-Type: %s\r\nContent-Length: %d\r\n", r.ContentType, len(r.Body))
	}
	if r.ID != "" {
		fmt.Fprintf(&b, "X-Request-Id: %s\r\n", r.ID)
	}
	if r.Last {
		b.WriteString("Connection: close\r\n")
	}
	b.WriteString("\r\n")
	b.WriteString(r.Body)
	if _, err := io.WriteString(sc.c, b.String()); err != nil {
		return nil, "", fmt.Errorf("writing the request: %w", err)
	}
	resp, err := http.ReadResponse(sc.br, &http.Request{Method: r.Method})
	if err != nil {
		return nil, "", fmt.Errorf("reading the response: %w", err)
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, "", fmt.Errorf("reading the body: %w", err)
	}
	return resp, string(got), nil
}

// Close closes the pooled connections.
func (s *Strict) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sc := range s.idle {
		sc.c.Close()
	}
	s.idle = nil
}

// PoolStats returns how many pooled connections the client dropped
// because the server had closed them, and how many of those held bytes
// nobody asked for.
func (s *Strict) PoolStats() (dropped, unsolicited int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dropped, s.unsolicited
}
