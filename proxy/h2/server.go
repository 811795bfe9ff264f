// The Server: the Handler its streams go to, the settings of its
// connections (and where zero means a default), and the counts of the
// resets they saw.

package h2

import (
	"log/slog"
	"net"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
)

// Handler serves the streams of a connection, each on a goroutine of its
// own. It must answer (WriteHeader, then End, or Reset) before returning;
// a stream left unanswered is reset.
type Handler interface {
	ServeStream(st *Stream)
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(st *Stream)

// ServeStream calls f(st).
func (f HandlerFunc) ServeStream(st *Stream) { f(st) }

// Server holds what every connection is configured with. Its fields are
// read-only once connections are served.
type Server struct {
	// Handler serves each stream.
	Handler Handler
	// IdleTimeout closes a connection without streams for this long
	// (with a GOAWAY); 0: never.
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds a request's decoded header list (RFC 9113
	// §6.5.2's size: names, values and 32 bytes per field); a larger one
	// is answered with 431.
	MaxHeaderBytes int
	// HeaderTimeout bounds a header block sent in several frames (from
	// its HEADERS frame to its END_HEADERS) and, until its response
	// begins, each wait of a handler for the next bytes of a request body
	// (the handler's read then fails with pace.ErrTooSlow, whose
	// Timeout() is true); 0: none.
	HeaderTimeout time.Duration
	// MinBodyRate is the rate, in bytes per second, a request body must
	// keep up while its handler waits for it before the response begins;
	// one that falls behind by more than HeaderTimeout fails the same
	// way (pace.Budget); 0: only silence is bounded.
	MinBodyRate int64
	// WriteTimeout bounds how long a stream's response may wait for the
	// client to open its flow-control window (a client that reads
	// nothing): the stream is then reset with CANCEL; 0: no bound.
	WriteTimeout time.Duration
	// MaxConcurrentStreams is advertised to clients and enforced
	// (DefaultMaxConcurrentStreams when zero).
	MaxConcurrentStreams uint32
	// StreamWindow and ConnWindow are the flow-control windows ebb grants
	// for request bodies, per stream and per connection (defaults when
	// zero).
	StreamWindow, ConnWindow uint32
	// StateChanged, if set, is told when a connection goes from idle to
	// serving streams (active) and back. c is the connection given to
	// Serve.
	StateChanged func(c net.Conn, active bool)
	// Log receives the engine's own messages (protocol errors of
	// clients, mostly), at debug level.
	Log *slog.Logger

	// Resets counts the RST_STREAM frames of every connection served.
	Resets ResetCounts

	workers workerPool // the goroutines handlers run on
}

// ResetCounts counts RST_STREAM frames by direction and error code. Its
// methods are safe for concurrent use.
type ResetCounts struct {
	sent, received [numErrCodes]atomic.Int64
}

// numErrCodes are RFC 9113's error codes, and one more slot for the codes
// it does not define.
const numErrCodes = int(http2.ErrCodeHTTP11Required) + 2

func (r *ResetCounts) add(to *[numErrCodes]atomic.Int64, code http2.ErrCode) {
	to[min(int(code), numErrCodes-1)].Add(1)
}

// Each calls f with the count of every direction ("sent" or "received")
// and error code (as RFC 9113 names it, "unknown" for the codes it does
// not define), zeros included.
func (r *ResetCounts) Each(f func(direction, code string, n int64)) {
	for i := range numErrCodes {
		name := "unknown"
		if i < numErrCodes-1 {
			name = http2.ErrCode(i).String()
		}
		f("sent", name, r.sent[i].Load())
		f("received", name, r.received[i].Load())
	}
}

func (s *Server) maxStreams() uint32 {
	if s.MaxConcurrentStreams == 0 {
		return DefaultMaxConcurrentStreams
	}
	return s.MaxConcurrentStreams
}

func (s *Server) streamWindow() int64 {
	if s.StreamWindow == 0 {
		return DefaultStreamWindow
	}
	return int64(s.StreamWindow)
}

func (s *Server) connWindow() int64 {
	if s.ConnWindow == 0 {
		return DefaultConnWindow
	}
	return max(int64(s.ConnWindow), 65535)
}

func (s *Server) maxHeaderBytes() int {
	if s.MaxHeaderBytes <= 0 {
		return 1 << 20
	}
	return s.MaxHeaderBytes
}
