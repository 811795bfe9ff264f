package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestEventStreamDrain: server-sent event streams held through ebb when it
// is told to stop, as a live dashboard's EventSource holds them, over
// HTTP/1.1 and HTTP/2 (h2c): each stream ends after a complete event, the
// client reconnects to a second ebb with Last-Event-ID and the events go
// on from the next one, none lost, none twice; the draining ebb exits 0
// (drained) and its summary counts the streams it ended.
func TestEventStreamDrain(t *testing.T) {
	t.Parallel()
	// The origin sends an event every 20 ms from the one after
	// Last-Event-ID, until the request ends.
	origin := newOrigin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next := 1
		if id := r.Header.Get("Last-Event-ID"); id != "" {
			n, err := strconv.Atoi(id)
			if err != nil {
				http.Error(w, "bad Last-Event-ID", http.StatusBadRequest)
				return
			}
			next = n + 1
		}
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for i := next; ; i++ {
			// Each event written in two pieces, so that the stream is
			// often in the middle of one.
			fmt.Fprintf(w, "id: %d\n", i)
			rc.Flush()
			fmt.Fprintf(w, "data: event %d\n\n", i)
			rc.Flush()
			select {
			case <-tick.C:
			case <-r.Context().Done():
				return
			}
		}
	}))
	yaml := singleClusterYAML(hostPort(origin)) + "drain:\n  spread: 500ms\n  quiet: 200ms\n  timeout: 20s\n"
	a, b := startEbb(t, yaml), startEbb(t, yaml)
	clients := map[string]*http.Client{}
	for _, proto := range []string{"http1", "h2c"} {
		var p http.Protocols
		if proto == "h2c" {
			p.SetUnencryptedHTTP2(true)
		} else {
			p.SetHTTP1(true)
		}
		tr := &http.Transport{Protocols: &p}
		t.Cleanup(tr.CloseIdleConnections)
		clients[proto] = &http.Client{Transport: tr}
	}
	// follow reads a stream's events, sending the ids it sees, and
	// returns how the stream ended: nil if between two events.
	follow := func(resp *http.Response, ids chan<- int) error {
		defer resp.Body.Close()
		br := bufio.NewReader(resp.Body)
		id := -1
		for {
			line, err := br.ReadString('\n')
			switch {
			case err == io.EOF && line == "" && id == -1:
				return nil // the end, between two events
			case err != nil:
				return fmt.Errorf("the stream ended inside an event (%q): %w", line, err)
			case strings.HasPrefix(line, "id: "):
				id, _ = strconv.Atoi(strings.TrimSpace(line[4:]))
			case line == "\n":
				ids <- id
				id = -1
			}
		}
	}
	open := func(c *http.Client, e *ebbProc, lastID int) (*http.Response, error) {
		req, _ := http.NewRequestWithContext(t.Context(), "GET", e.url("public", "/events"), nil)
		if lastID > 0 {
			req.Header.Set("Last-Event-ID", strconv.Itoa(lastID))
		}
		resp, err := c.Do(req)
		if err == nil && resp.StatusCode != 200 {
			resp.Body.Close()
			err = fmt.Errorf("status %d", resp.StatusCode)
		}
		return resp, err
	}
	type outcome struct {
		proto string
		err   error
	}
	results := make(chan outcome, len(clients))
	started := make(chan struct{}, len(clients))
	// Each client's goroutine ends after its streams' readers have: it
	// closes their bodies and waits for them, then reports.
	for proto, c := range clients {
		go func() {
			var readers sync.WaitGroup
			var bodies []*http.Response
			ids := make(chan int, 1024)
			ended := make(chan error, 2)
			read := func(resp *http.Response) {
				bodies = append(bodies, resp)
				readers.Go(func() { ended <- follow(resp, ids) })
			}
			err := func() error {
				resp, err := open(c, a, 0)
				if err != nil {
					return err
				}
				read(resp)
				last, seen := 0, 0
				var endErr error
			first:
				for {
					select {
					case id := <-ids:
						if id != last+1 {
							return fmt.Errorf("event %d after %d", id, last)
						}
						last = id
						if seen++; seen == 3 {
							started <- struct{}{}
						}
					case endErr = <-ended:
						break first
					}
				}
				for len(ids) > 0 { // events read before the end
					id := <-ids
					if id != last+1 {
						return fmt.Errorf("event %d after %d", id, last)
					}
					last = id
				}
				if endErr != nil {
					return endErr
				}
				// As an EventSource does: reconnect, with the last id seen
				// (to b, as a Service would send it elsewhere).
				resp, err = open(c, b, last)
				if err != nil {
					return fmt.Errorf("reconnecting with Last-Event-ID %d: %w", last, err)
				}
				read(resp)
				select {
				case id := <-ids:
					if id != last+1 {
						return fmt.Errorf("after the reconnect with Last-Event-ID %d, event %d", last, id)
					}
				case err := <-ended:
					return fmt.Errorf("after the reconnect: %v", err)
				}
				return nil
			}()
			for _, resp := range bodies {
				resp.Body.Close()
			}
			readers.Wait()
			results <- outcome{proto, err}
		}()
	}
	for range clients {
		recv(t, started, "the streams to begin")
	}
	a.signal(syscall.SIGTERM)
	for range clients {
		if r := recv(t, results, "a stream's end and reconnect"); r.err != nil {
			t.Errorf("%s: %v", r.proto, r.err)
		}
	}
	awaitExit(t, a, "the draining ebb to exit")
	if code := a.exit(); code != 0 {
		t.Fatalf("exit status %d, want 0 (drained); log:\n%s", code, a.logs())
	}
	checkDrainEnd(t, a, "drained")
	recs := a.logRecords("drain summary")
	if len(recs) != 1 || !strings.Contains(fmt.Sprint(recs[0]["summary"]), "2 event streams ended") {
		t.Errorf("drain summary %v, want 2 event streams ended", recs)
	}
}
