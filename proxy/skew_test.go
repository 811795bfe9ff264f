package proxy

import (
	"bufio"
	"io"
	"net/http"
	"slices"
	"testing"
	"time"
)

// TestTimeoutsSpread opens connections together, each with a request head
// that never ends: each is answered 408, none before timeouts.header, and
// they are cut spread over up to a twentieth of it (each connection's
// skew, downstream.Conn.Skew) rather than all at once. Cut together, a
// thousand slow connections held the engine for tens of milliseconds and
// stalled every other client (bench/README.md, slowloris).
func TestTimeoutsSpread(t *testing.T) {
	const (
		conns  = 64
		header = 2 * time.Second
		span   = header / skewShare // 100 ms
	)
	origin := newOrigin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	e := startEbb(t, oneClusterYAML(hostPort(origin), []string{"timeouts: { header: 2s }"}, nil))
	type cut struct {
		after  time.Duration // from the connection's open to its answer
		status int
		err    error
	}
	cuts := make(chan cut, conns)
	for range conns {
		c := rawConn(t, e.addr("public"))
		opened := time.Now()
		if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: test\r\nX-Slow: 1\r\n"); err != nil {
			t.Fatal(err)
		}
		go func() {
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				cuts <- cut{after: time.Since(opened), err: err}
				return
			}
			resp.Body.Close()
			cuts <- cut{after: time.Since(opened), status: resp.StatusCode}
		}()
	}
	var after []time.Duration
	for range conns {
		c := recv(t, cuts, "a slow head's answer")
		if c.err != nil || c.status != http.StatusRequestTimeout {
			t.Fatalf("a head that never ended got %d, %v; want 408", c.status, c.err)
		}
		after = append(after, c.after)
	}
	slices.Sort(after)
	first, last := after[0], after[len(after)-1]
	t.Logf("%d slow heads cut after %v to %v", conns, first, last)
	if first < header {
		t.Errorf("a head was cut after %v, before timeouts.header (%v)", first, header)
	}
	// The skews are uniform over span: 64 of them all fall within a
	// quarter of it with a probability of about 64 × 0.25⁶³. Scheduling
	// delays only add to each cut.
	if last-first < span/4 {
		t.Errorf("the %d cuts came within %v of each other; want them spread over up to %v", conns, last-first, span)
	}
}
