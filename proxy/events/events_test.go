package events

import (
	"io"
	"strings"
	"testing"
)

// TestCutter feeds streams in pieces, asking for the end after a given
// piece, and checks where each stream is cut: after the next complete
// event (whatever ends its lines: LF, CRLF, CR), at once on a boundary,
// and, unless all, only once an id field has been relayed.
func TestCutter(t *testing.T) {
	for _, tc := range []struct {
		name   string
		pieces []string
		askAt  int // the end is asked before this piece is read
		all    bool
		want   string
	}{
		{"at once on a boundary", []string{"id: 1\ndata: a\n\n", "id: 2\ndata: b\n\n"}, 1, false, "id: 1\ndata: a\n\n"},
		{"mid-event", []string{"id: 1\ndata: a\n\nid: 2\nda", "ta: b\n\nid: 3\ndata: c\n\n"}, 1, false, "id: 1\ndata: a\n\nid: 2\ndata: b\n\n"},
		{"CRLF", []string{"id: 1\r\ndata: a\r\n\r", "\nid: 2\r\n\r\n"}, 0, false, "id: 1\r\ndata: a\r\n\r"},
		{"CR", []string{"id: 1\rdata: a\r\rid: 2\r\r"}, 0, false, "id: 1\rdata: a\r\r"},
		{"a comment is an event's line", []string{": ping\n", "\nid: 9\n\n"}, 1, true, ": ping\n\n"},
		{"not resumable", []string{"data: a\n\n", "data: b\n\n"}, 0, false, "data: a\n\ndata: b\n\n"},
		{"resumable later", []string{"data: a\n\n", "id: 2\ndata: b\n\n", "data: c\n\n"}, 0, false, "data: a\n\nid: 2\ndata: b\n\n"},
		{"all", []string{"data: a\n\n", "data: b\n\n"}, 1, true, "data: a\n\n"},
		{"an id inside a value is none", []string{"data: id: 1\n\n", "data: b\n\n"}, 0, false, "data: id: 1\n\ndata: b\n\n"},
		{"nothing sent yet", []string{"id: 1\n\n"}, 0, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ends := 0
			c := NewCutter(tc.all, nil, func() { ends++ })
			var got strings.Builder
			for i, p := range tc.pieces {
				if i == tc.askAt {
					c.Ask()
				}
				if c.Done() {
					break
				}
				n, end := c.Cut([]byte(p))
				got.WriteString(p[:n])
				if end {
					break
				}
			}
			if got.String() != tc.want {
				t.Fatalf("relayed %q, want %q", got.String(), tc.want)
			}
			if ended := got.Len() < len(strings.Join(tc.pieces, "")); c.Ended() != ended || ends != map[bool]int{true: 1}[ended] {
				t.Fatalf("Ended() = %v, told %d times; want %v", c.Ended(), ends, ended)
			}
		})
	}
}

// TestCutterInterrupt: a stream idle on a boundary is interrupted when the
// end is asked, and its reader then ends it (io.EOF) whatever the read
// returned; one idle mid-event is not interrupted, and ends with the
// event.
func TestCutterInterrupt(t *testing.T) {
	for _, tc := range []struct {
		first     string
		interrupt bool
	}{
		{"id: 1\ndata: a\n\n", true},
		{"id: 1\ndata: a\n", false},
	} {
		interrupted := false
		c := NewCutter(false, func() { interrupted = true }, nil)
		r := c.Reader(io.MultiReader(strings.NewReader(tc.first), strings.NewReader("data: late\n\n")))
		buf := make([]byte, 64)
		if n, err := r.Read(buf); err != nil || string(buf[:n]) != tc.first {
			t.Fatalf("first read %q, %v", buf[:n], err)
		}
		c.Ask()
		if interrupted != tc.interrupt {
			t.Fatalf("after %q: interrupted %v, want %v", tc.first, interrupted, tc.interrupt)
		}
		n, err := r.Read(buf)
		// Mid-event, the event goes on with the next read, and ends it.
		if tc.interrupt && (n != 0 || err != io.EOF) || !tc.interrupt && (string(buf[:n]) != "data: late\n\n" || err != io.EOF) {
			t.Fatalf("after %q and the ask: %q, %v", tc.first, buf[:n], err)
		}
		c.Close()
	}
}
