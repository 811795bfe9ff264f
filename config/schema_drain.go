// The schema's drain and the application it watches (docs/DRAIN.md).

package config

import "time"

// Accept-until settings of the drain.
const (
	AcceptUntilExit        = "exit"
	AcceptUntilAfterDelay  = "after_delay"
	AcceptUntilImmediately = "immediately"
)

// Drain configures the shutdown timeline docs/DRAIN.md specifies: what
// ebb does between "stop" (a signal, POST /drain, ebb drain, the watched
// application gone) and its exit. The defaults keep the promise for a
// Kubernetes pod with the default 30s grace period. Needs a restart to
// change.
type Drain struct {
	// Delay is the announce window after the trigger: /ready answers 503,
	// all else is unchanged, while the endpoint's removal propagates.
	Delay time.Duration `key:"delay"`
	// Spread is the window, after delay, over which connections get their
	// close signal, each at its own moment.
	Spread time.Duration `key:"spread"`
	// MinDuration is the least time after the trigger before ebb exits
	// drained; at most timeout. Unset (nil), it is delay + spread.
	MinDuration *time.Duration `key:"min_duration"`
	// Quiet is how long no new connection must have come before ebb
	// exits drained.
	Quiet time.Duration `key:"quiet"`
	// Timeout is the deadline, counted from the trigger: what is left is
	// closed and ebb exits with status 3. Longer than delay + spread;
	// keep it under Kubernetes' grace period (30s by default).
	Timeout time.Duration `key:"timeout"`
	// AcceptUntil is when inbound listeners stop accepting: at the exit
	// (exit), at the end of delay (after_delay), or at the trigger
	// (immediately).
	AcceptUntil string         `key:"accept_until"`
	HTTP1       DrainHTTP1     `key:"http1"`
	HTTP2       DrainHTTP2     `key:"http2"`
	WebSocket   DrainWebSocket `key:"websocket"`
	// EventStreams says which text/event-stream responses the drain ends
	// after a complete event: resumable, those that have sent an event
	// with an id field (which a client resumes with Last-Event-ID); all,
	// every one; off, none.
	EventStreams string `key:"event_streams"`
	// Signals are the signals that trigger the drain; a second one closes
	// everything at once.
	Signals []string `key:"signals"`
	App     App      `key:"app"`
	// Report, if set, is the file the drain's timeline is written to at
	// exit, for postmortems: JSON when it ends in .json, else the HTML
	// page of /drain/report. A relative path is relative to the
	// configuration file's directory, and the directory must exist. The
	// file is written whole (a temporary file renamed); a failure is
	// logged and does not change the exit status.
	Report string `key:"report"`
}

// EffectiveMinDuration is MinDuration, or Delay + Spread when unset.
func (d Drain) EffectiveMinDuration() time.Duration {
	if d.MinDuration != nil {
		return *d.MinDuration
	}
	return d.Delay + d.Spread
}

// DrainHTTP1 holds the HTTP/1 specifics of the drain.
type DrainHTTP1 struct {
	// IdleClose is the idle time past its moment before an HTTP/1
	// connection is closed, and before an HTTP/2 connection that has
	// opened no stream gets its GOAWAY; never keeps idle connections until
	// the deadline.
	IdleClose IdleClose `key:"idle_close"`
}

// DrainHTTP2 holds the HTTP/2 specifics of the drain.
type DrainHTTP2 struct {
	// GoawayGrace is the longest wait for the PING's acknowledgement
	// between the two GOAWAYs.
	GoawayGrace time.Duration `key:"goaway_grace"`
}

// DrainWebSocket holds the WebSocket specifics of the drain.
type DrainWebSocket struct {
	// Close is when a tunnelled WebSocket is told to go away (a close
	// frame with status 1001): at_signal, at its connection's moment in
	// the signal phase; at_deadline, as late as the deadline allows,
	// spread over spread ending 2×grace before timeout.
	Close string `key:"close"`
	// Grace bounds each side's answer to the close frame ebb sends it
	// (and the wait for the frame in flight to end before it); at most a
	// quarter of the drain's timeout is used.
	Grace time.Duration `key:"grace"`
}

// DefaultWebSocketGrace is drain.websocket.grace's default.
const DefaultWebSocketGrace = 2 * time.Second

// When the drain closes WebSockets.
const (
	// WebSocketAtSignal: at the connection's moment in the signal phase,
	// spread with the keep-alive closes.
	WebSocketAtSignal = "at_signal"
	// WebSocketAtDeadline: as late as the deadline allows, spread over
	// drain.spread ending 2×grace before drain.timeout.
	WebSocketAtDeadline = "at_deadline"
)

// Which event streams the drain ends.
const (
	// EventStreamsResumable: those that have sent an event with an id
	// field, which a client resumes with Last-Event-ID.
	EventStreamsResumable = "resumable"
	// EventStreamsAll: every text/event-stream response.
	EventStreamsAll = "all"
	// EventStreamsOff: none; they last until they end or the deadline.
	EventStreamsOff = "off"
)

// App names the application whose exit triggers ebb's drain and ends it
// once no request is in flight: at most one of tcp, http, pid and
// pid_file. It must have been seen alive first (an explicit pid
// excepted).
type App struct {
	// TCP is a host:port that stops accepting when the application is
	// gone.
	TCP string `key:"tcp"`
	// HTTP is a URL that stops answering when the application is gone
	// (any HTTP status is an answer).
	HTTP string `key:"http"`
	// PID is the application's process id.
	PID int `key:"pid"`
	// PIDFile is a file holding the application's process id.
	PIDFile string `key:"pid_file"`
	// Interval is how often the application is checked.
	Interval time.Duration `key:"interval"`
}
