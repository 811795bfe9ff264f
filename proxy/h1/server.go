// Package h1 is ebb's HTTP/1 engine: fasthttp's server, fed connections by
// the listener's accept loop, serving each request through the forwarding
// skeleton (package forward) to an HTTP/1.1 upstream (ebb's transport), an
// HTTP/2 or auto upstream (a request in net/http's form, through
// cluster.ExchangeHTTP), or, for a WebSocket upgrade, a connection of its
// own relayed both ways.
package h1

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"strings"
	"sync"

	"github.com/valyala/fasthttp"

	"github.com/ebb-proxy/ebb/proxy/downstream"
	"github.com/ebb-proxy/ebb/proxy/forward"
)

// Server is the HTTP/1 engine of one listener. Its fields are read-only
// once it serves.
type Server struct {
	l     *forward.Listener
	srv   *fasthttp.Server
	calls sync.Pool // of *call
}

// New returns the HTTP/1 engine of l.
func New(l *forward.Listener) *Server {
	cfg := &l.Config
	s := &Server{l: l}
	s.calls.New = func() any { return &call{s: s} }
	s.srv = &fasthttp.Server{
		Handler: s.Handle,
		// Headers larger than the read buffer are answered with 431.
		ReadBufferSize: int(cfg.Limits.MaxHeaderBytes),
		// Bodies are streamed: fasthttp only prefetches the first bytes,
		// and ebb enforces limits.max_body_bytes itself.
		StreamRequestBody:  true,
		MaxRequestBodySize: math.MaxInt,
		// A proxy must not parse multipart bodies, only forward them.
		DisablePreParseMultipartForm: true,
		ReadTimeout:                  cfg.Timeouts.Header,
		IdleTimeout:                  cfg.Timeouts.Idle,
		// The upstream's Server, Date and Content-Type pass through as
		// they are; ebb adds none of its own.
		NoDefaultServerHeader: true,
		NoDefaultDate:         true,
		NoDefaultContentType:  true,
		CloseOnShutdown:       true,
		ConnState:             connState,
		ErrorHandler:          errorHandler,
		// fasthttp's errors about a request head then leave out the
		// client's bytes: they are not logged, and formatting them made
		// each of a thousand slow heads cut at timeouts.header cost more.
		SecureErrorLogMessage: true,
		Logger:                fasthttpLogger{l: l.Log.With("listener", cfg.Name)},
	}
	// A body announced larger than limits.max_body_bytes (read from the
	// snapshot: a reload changes it) is refused before it is read:
	// fasthttp would otherwise read (up to 8 KiB of) it before the
	// handler runs. With Expect: 100-continue the client is told at
	// once; otherwise ebb answers after the body's first byte.
	over := func(h *fasthttp.RequestHeader) bool {
		limit := l.Table().MaxBodyBytes
		return limit > 0 && int64(h.ContentLength()) > limit
	}
	s.srv.HeaderReceived = func(h *fasthttp.RequestHeader) fasthttp.RequestConfig {
		if over(h) {
			return fasthttp.RequestConfig{MaxRequestBodySize: 1}
		}
		return fasthttp.RequestConfig{}
	}
	s.srv.ExpectHandler = func(ctx *fasthttp.RequestCtx) int {
		if !over(&ctx.Request.Header) {
			return fasthttp.StatusContinue
		}
		ctx.SetBodyString(forward.MsgBodyTooLarge)
		ctx.SetContentType("text/plain; charset=utf-8")
		lingerOnClose(ctx)
		l.Table().NoRoute.Record(downstream.ProtoHTTP1, fasthttp.StatusRequestEntityTooLarge, ctx.Time())
		return fasthttp.StatusRequestEntityTooLarge
	}
	return s
}

// Serve serves the connections ln hands over until ln's Accept fails
// (io.EOF ends it quietly).
func (s *Server) Serve(ln net.Listener) error { return s.srv.Serve(watchHeads{ln}) }

// msgBareLF answers a head with a line ended by LF alone.
const msgBareLF = "ebb: malformed request (a line of its head ends in LF without CR)\n"

// errorHandler answers requests fasthttp could not parse, as fasthttp's
// default does, and keeps reading what the client still sends for a while
// before closing, so that the answer is not lost to a reset.
func errorHandler(ctx *fasthttp.RequestCtx, err error) {
	var small *fasthttp.ErrSmallBuffer
	var ne net.Error
	switch {
	case notHTTP1(err) && ctx.ConnRequestNum() == 0:
		// A connection whose first bytes are some other protocol (or
		// HTTP/0.9): an answer in HTTP/1.1 would be garbage to its
		// client, which is closed on. Such as a broken HTTP/2 preface
		// that does not even start like one (RFC 9113 §3.4: close the
		// connection). Later on a connection that spoke HTTP/1 (no
		// request parsed yet: 0), the same bytes get a 400 as before.
		ctx.Conn().Close()
		return
	case errors.Is(err, errBareLF):
		localReply(ctx, fasthttp.StatusBadRequest, msgBareLF)
	case errors.As(err, &small):
		if h := headOf(ctx.Conn()); h != nil && h.watched && !h.lineEnded {
			// The request line alone filled the buffer.
			localReply(ctx, fasthttp.StatusRequestURITooLong, "ebb: request URI too long\n")
			break
		}
		localReply(ctx, fasthttp.StatusRequestHeaderFieldsTooLarge, "ebb: request headers too large\n")
	case errors.As(err, &ne) && ne.Timeout():
		localReply(ctx, fasthttp.StatusRequestTimeout, "ebb: request timeout\n")
	default:
		localReply(ctx, fasthttp.StatusBadRequest, "ebb: malformed request\n")
	}
	lingerOnClose(ctx)
}

// notHTTP1 reports whether fasthttp failed to parse a request because its
// first line is not an HTTP/1 request line at all: no method and target
// before a version, or a last word that is not HTTP/<digit>.<digit>.
// fasthttp has no error values for these; its messages are stable.
func notHTTP1(err error) bool {
	msg := err.Error()
	for _, m := range []string{"unsupported http version", "cannot find whitespace in the first line", "cannot find http request method"} {
		if strings.Contains(msg, m) {
			return true
		}
	}
	return false
}

// lingerOnClose marks the request's connection to be closed gracefully
// (see downstream.Conn.LingerOnClose).
func lingerOnClose(ctx *fasthttp.RequestCtx) {
	if c := downstream.ConnOf(ctx.Conn()); c != nil {
		c.LingerOnClose()
	}
}

// connState mirrors fasthttp's view of each connection into the registry.
func connState(c net.Conn, s fasthttp.ConnState) {
	dc := downstream.ConnOf(c)
	if dc == nil {
		return
	}
	switch s {
	case fasthttp.StateActive:
		dc.SetState(downstream.StateActive)
	case fasthttp.StateIdle:
		dc.SetState(downstream.StateIdle)
	case fasthttp.StateHijacked:
		dc.SetState(downstream.StateUpgraded)
	}
}

// localReply replaces the response with one ebb makes itself.
func localReply(ctx *fasthttp.RequestCtx, status int, msg string) {
	resp := &ctx.Response
	resp.Reset()
	resp.SetStatusCode(status)
	resp.Header.SetContentType("text/plain; charset=utf-8")
	if status == fasthttp.StatusServiceUnavailable {
		resp.Header.Set("Retry-After", forward.RetryAfter)
	}
	resp.SetBodyString(msg)
}

// fasthttpLogger sends fasthttp's own messages (malformed requests and the
// like) to the debug log: they are about clients, not about ebb.
type fasthttpLogger struct{ l *slog.Logger }

func (f fasthttpLogger) Printf(format string, args ...any) {
	if !f.l.Enabled(context.Background(), slog.LevelDebug) {
		return // not formatted for nothing
	}
	f.l.Debug(fmt.Sprintf(format, args...), "component", "fasthttp")
}
