package forward

import (
	"sync/atomic"

	"github.com/ebb-proxy/ebb/proxy/downstream"
	"github.com/ebb-proxy/ebb/proxy/events"
)

// EventStream is called by an engine about to relay a response body of
// the given length (-1: unknown) on conn; isEvents: its Content-Type is
// text/event-stream (events.IsEventStream). For an event stream it counts the stream among those open until
// done is called, once the body's relay has ended (done is nil for any
// other response). When the drain ends event streams (drain.event_streams)
// and the length is unknown, it also returns the Cutter that ends the
// body on an event boundary at the connection's close signal; interrupt
// wakes a read of the body blocked waiting for the upstream.
func (l *Listener) EventStream(conn *downstream.Conn, length int64, interrupt func()) (cut *events.Cutter, done func()) {
	if conn == nil {
		return nil, nil
	}
	st := &l.Registry.Stats
	st.EventStreams.Add(1)
	// The stream stops counting as open when the drain ends it (before
	// its client can see the end) or when its relay ends, once.
	var closed atomic.Bool
	finish := func() {
		if closed.CompareAndSwap(false, true) {
			st.EventStreams.Add(-1)
		}
	}
	on, all := l.Registry.EndsEventStreams()
	if !on || !conn.Drainable || length >= 0 {
		return nil, finish
	}
	cut = events.NewCutter(all, interrupt, func() {
		st.EventStreamEnds.Add(1)
		finish()
	})
	stop := conn.WatchSignal(cut.Ask)
	return cut, func() {
		stop()
		cut.Close()
		finish()
	}
}
