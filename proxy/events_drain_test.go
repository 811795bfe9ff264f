package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ebb-proxy/ebb/drain"
	"github.com/ebb-proxy/ebb/proxy/proxytest"
)

// readEvent reads one server-sent event (its lines up to the blank line
// that ends it), as an EventSource does; io.EOF: the stream ended
// between two events.
func readEvent(br *bufio.Reader) (string, error) {
	var ev strings.Builder
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			if err == io.EOF && line == "" && ev.Len() == 0 {
				return "", io.EOF
			}
			return ev.String() + line, fmt.Errorf("the stream ended inside an event: %w", err)
		}
		if line == "\n" {
			return ev.String(), nil
		}
		ev.WriteString(line)
	}
}

// TestEventStreamDrain: a server-sent event stream relayed through ebb,
// on every client side and upstream kind, is ended by the drain after
// the event the origin had sent (the client sees the stream end between
// two events, as after any normal end), the origin's request is
// cancelled, and the client's reconnect with Last-Event-ID is answered
// from the next event (and, ebb still draining, ended after it).
func TestEventStreamDrain(t *testing.T) {
	for _, m := range allModes {
		t.Run(m.String(), func(t *testing.T) {
			t.Parallel()
			cancelled := make(chan struct{}, 2)
			e := newEnv(t, m, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				next := 1
				if id := r.Header.Get("Last-Event-ID"); id != "" {
					n, _ := strconv.Atoi(id)
					next = n + 1
				}
				w.Header().Set("Content-Type", "text/event-stream")
				w.Header().Set("Cache-Control", "no-store")
				for i := next; i < next+2; i++ {
					fmt.Fprintf(w, "id: %d\ndata: event %d\n\n", i, i)
				}
				http.NewResponseController(w).Flush()
				<-r.Context().Done() // then idle, until ebb cancels it
				cancelled <- struct{}{}
			}))
			open := func(lastID string) (*http.Response, *bufio.Reader) {
				req, _ := http.NewRequestWithContext(t.Context(), "GET", e.Base+"/events", nil)
				if lastID != "" {
					req.Header.Set("Last-Event-ID", lastID)
				}
				resp, err := e.Client.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { resp.Body.Close() })
				if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
					t.Fatalf("status %d, Content-Type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
				}
				return resp, bufio.NewReader(resp.Body)
			}
			_, br := open("")
			for i := 1; i <= 2; i++ {
				if ev, err := readEvent(br); err != nil || ev != fmt.Sprintf("id: %d\ndata: event %d\n", i, i) {
					t.Fatalf("event %d: %q, %v", i, ev, err)
				}
			}
			done, stop := proxytest.RunDrain(e.px.reg, wsDrainConfig(time.Second))
			defer stop()
			if ev, err := readEvent(br); err != io.EOF {
				t.Fatalf("after the drain began: %q, %v; want the stream's end", ev, err)
			}
			recv(t, cancelled, "the origin's request to be cancelled")
			_, br = open("2")
			if ev, err := readEvent(br); err != nil || ev != "id: 3\ndata: event 3\n" {
				t.Fatalf("after the reconnect: %q, %v; want event 3", ev, err)
			}
			if ev, err := readEvent(br); err != io.EOF {
				t.Fatalf("after event 3: %q, %v; want the stream's end", ev, err)
			}
			recv(t, cancelled, "the origin's second request to be cancelled")
			st := &e.px.reg.Stats
			if n := st.EventStreamEnds.Load(); n != 2 {
				t.Fatalf("%d event streams counted as ended by the drain, want 2", n)
			}
			if n := st.EventStreams.Load(); n != 0 {
				t.Fatalf("%d event streams counted open, want 0", n)
			}
			e.Client.CloseIdleConnections()
			if res := drainResult(t, done); res.Reason != drain.ReasonDrained {
				t.Fatalf("drain ended %+v, want drained", res)
			}
		})
	}
}
