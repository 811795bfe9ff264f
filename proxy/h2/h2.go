// Package h2 is ebb's HTTP/2 server engine: golang.org/x/net/http2 serving
// one connection at a time, each with its own server configuration, so that
// exactly one connection can be shut down gracefully on its own, and behind
// a seam on the connection where the frames x/net has no API for (the first
// GOAWAY and the PING of RFC 9113 §6.8's two-phase shutdown) are written
// between the engine's frames.
//
// x/net's server is deprecated in favour of net/http's own HTTP/2 (as of
// x/net v0.62, and on Go 1.27 it wraps net/http). Everything that knows
// x/net is in this package, so that moving engines is this package's
// change; TestGracefulShutdownOneConn catches a Go or x/net upgrade that
// breaks per-connection graceful shutdown.
package h2

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"log"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"golang.org/x/net/http2"
)

// ClientPreface is what an HTTP/2 client sends first (RFC 9113 §3.4): on
// a cleartext listener, it tells an h2c connection with prior knowledge
// from an HTTP/1 one.
const ClientPreface = http2.ClientPreface

// NextProtoTLS is HTTP/2's ALPN protocol name (RFC 9113 §3.2).
const NextProtoTLS = http2.NextProtoTLS

// Server holds what every connection's engine is configured with. Its
// fields are read-only once connections are served.
type Server struct {
	// Handler serves each stream's request.
	Handler http.Handler
	// IdleTimeout closes a connection without streams for this long
	// (with a GOAWAY).
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds a request's decoded header list.
	MaxHeaderBytes int
	// MaxConcurrentStreams is advertised to clients; x/net's default (250)
	// when zero.
	MaxConcurrentStreams uint32
	// StateChanged, if set, is told when a connection goes from idle to
	// serving streams (active) and back. c is the connection given to Serve.
	StateChanged func(c net.Conn, active bool)
	// Log receives the engine's own messages (protocol errors of clients,
	// mostly), at debug level.
	Log *slog.Logger
}

// Conn is one HTTP/2 connection being served.
type Conn struct {
	seam   *seam
	base   *http.Server // this connection's configuration; Shutdown ends it gracefully
	done   chan struct{}
	wg     sync.WaitGroup
	goAway sync.Once
	final  sync.Once
}

// Serve serves HTTP/2 on c until the connection ends, calling started (if
// not nil) with the Conn before the first byte is read. ctx is the base of
// every request's context. c must not have been read from (its client
// preface is read by the engine), though bytes it replays are fine.
func (s *Server) Serve(ctx context.Context, c net.Conn, started func(*Conn)) {
	sm := newSeam(c)
	var nc net.Conn = sm
	if tc, ok := c.(*tls.Conn); ok {
		nc = tlsSeam{seam: sm, tc: tc}
	}
	base := &http.Server{
		Handler:        s.Handler,
		MaxHeaderBytes: s.MaxHeaderBytes,
		IdleTimeout:    s.IdleTimeout,
	}
	if s.StateChanged != nil {
		base.ConnState = func(_ net.Conn, st http.ConnState) {
			switch st {
			case http.StateActive:
				s.StateChanged(c, true)
			case http.StateIdle:
				s.StateChanged(c, false)
			}
		}
	}
	if s.Log != nil {
		base.ErrorLog = log.New(logWriter{s.Log}, "", 0)
	}
	h2s := &http2.Server{
		IdleTimeout:          s.IdleTimeout,
		MaxConcurrentStreams: s.MaxConcurrentStreams,
		// The protocol's default frame size, as nginx keeps it; x/net
		// would advertise 1 MiB, which buys nothing for a proxy.
		MaxReadFrameSize: 16 << 10,
	}
	// ConfigureServer ties h2s's graceful shutdown to base.Shutdown; with
	// one pair per connection, base.Shutdown shuts down this connection.
	if err := http2.ConfigureServer(base, h2s); err != nil {
		// Only a TLS cipher suite list missing HTTP/2's required suite
		// fails, and base has none.
		panic("h2: " + err.Error())
	}
	cn := &Conn{seam: sm, base: base, done: make(chan struct{})}
	if started != nil {
		started(cn)
	}
	h2s.ServeConn(nc, &http2.ServeConnOpts{Context: ctx, BaseConfig: base, Handler: s.Handler})
	// x/net closes the connection when it is done; closing the seam here
	// too makes sure its writer has ended before Serve returns.
	nc.Close()
	close(cn.done)
	cn.wg.Wait()
}

// goAwayFrames is the first phase of a graceful shutdown: GOAWAY with the
// highest stream id and no error ("stop opening streams; those in flight
// are still accepted"), then a PING, whose acknowledgement tells that the
// client has seen the GOAWAY.
func goAwayFrames(pingData [8]byte) []byte {
	var buf bytes.Buffer
	fr := http2.NewFramer(&buf, nil)
	_ = fr.WriteGoAway(1<<31-1, http2.ErrCodeNo, nil)
	_ = fr.WritePing(false, pingData)
	return buf.Bytes()
}

// GoAway starts the two-phase graceful shutdown of RFC 9113 §6.8: the
// first GOAWAY (last stream id 2^31-1) and a PING are written at once, at a
// frame boundary; once the PING is acknowledged, or after grace, the final
// GOAWAY carries the real last stream id. Streams opened in between are
// served; the connection closes after its last stream. GoAway returns at
// once; calling it again does nothing.
func (c *Conn) GoAway(grace time.Duration) {
	c.goAway.Do(func() {
		_, _ = rand.Read(c.seam.pingData[:])
		if err := c.seam.inject(goAwayFrames(c.seam.pingData)); err != nil {
			// The connection is failing anyway; the engine will notice.
			c.Shutdown()
			return
		}
		c.wg.Go(func() {
			t := time.NewTimer(grace)
			defer t.Stop()
			select {
			case <-c.seam.pingAck:
			case <-t.C:
			case <-c.done:
				return
			}
			c.Shutdown()
		})
	})
}

// Shutdown sends the final GOAWAY (the real last stream id) now; the
// connection closes after its last stream.
func (c *Conn) Shutdown() {
	c.final.Do(func() {
		// With no listener and no HTTP/1 connection, base.Shutdown only
		// starts the registered HTTP/2 graceful shutdown and returns.
		_ = c.base.Shutdown(context.Background())
	})
}

// Done is closed when the connection has been served to its end.
func (c *Conn) Done() <-chan struct{} { return c.done }

// logWriter turns the engine's log.Logger lines into debug records.
type logWriter struct{ l *slog.Logger }

func (w logWriter) Write(p []byte) (int, error) {
	w.l.Debug(string(bytes.TrimSpace(p)), "component", "http2")
	return len(p), nil
}
