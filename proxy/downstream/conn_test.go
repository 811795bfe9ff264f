package downstream

import (
	"errors"
	"net"
	"os"
	"testing"
	"testing/synctest"
	"time"
)

// skewed returns a tracked connection with skew, one end of a pipe, and
// the pipe's other end; both are closed with the test.
func skewed(t *testing.T, skew time.Duration) (*Conn, net.Conn) {
	a, z := net.Pipe()
	t.Cleanup(func() { z.Close() })
	c := NewRegistry().Track(a, "test", true, nil)
	t.Cleanup(func() { c.Close() })
	c.Skew = skew
	return c, z
}

// TestConnSkew checks that a connection's skew moves each read deadline
// later, that a zero deadline stays none and a past one still cuts a
// read at once, and that write deadlines are left alone.
func TestConnSkew(t *testing.T) {
	const skew = 300 * time.Millisecond
	// readAfter sets a read deadline with set and reports when the
	// blocked read failed, since it began, and with what.
	readAfter := func(t *testing.T, set func(c *Conn) error) (time.Duration, error) {
		c, _ := skewed(t, skew)
		start := time.Now()
		if err := set(c); err != nil {
			t.Fatal(err)
		}
		_, err := c.Read(make([]byte, 1))
		return time.Since(start), err
	}
	cases := []struct {
		name string
		set  func(c *Conn) error
		want time.Duration
	}{
		{"read deadline", func(c *Conn) error { return c.SetReadDeadline(time.Now().Add(time.Second)) }, time.Second + skew},
		{"deadline", func(c *Conn) error { return c.SetDeadline(time.Now().Add(time.Second)) }, time.Second + skew},
		{"far past", func(c *Conn) error { return c.SetReadDeadline(time.Unix(1, 0)) }, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				took, err := readAfter(t, tc.set)
				if !errors.Is(err, os.ErrDeadlineExceeded) {
					t.Fatalf("read: %v; want a deadline exceeded", err)
				}
				if took != tc.want {
					t.Errorf("the read failed after %v; want %v", took, tc.want)
				}
			})
		})
	}
	t.Run("zero", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c, z := skewed(t, skew)
			if err := c.SetReadDeadline(time.Now().Add(time.Second)); err != nil {
				t.Fatal(err)
			}
			if err := c.SetReadDeadline(time.Time{}); err != nil {
				t.Fatal(err)
			}
			got := make(chan error, 1)
			go func() {
				_, err := c.Read(make([]byte, 1))
				got <- err
			}()
			<-time.After(time.Hour) // the bubble's clock: an hour passes at once
			synctest.Wait()
			select {
			case err := <-got:
				t.Fatalf("a read with no deadline ended after an hour: %v", err)
			default:
			}
			z.Write([]byte("x"))
			if err := <-got; err != nil {
				t.Fatalf("read: %v", err)
			}
		})
	})
	t.Run("write deadline", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c, _ := skewed(t, skew)
			start := time.Now()
			if err := c.SetDeadline(start.Add(time.Second)); err != nil {
				t.Fatal(err)
			}
			// net.Pipe has no buffer: the write blocks until its deadline.
			_, err := c.Write([]byte("x"))
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("write: %v; want a deadline exceeded", err)
			}
			if took := time.Since(start); took != time.Second {
				t.Errorf("the write failed after %v; want 1s (no skew)", took)
			}
		})
	})
}
