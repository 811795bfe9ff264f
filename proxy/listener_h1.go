package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"sync"

	"github.com/valyala/fasthttp"

	"github.com/ebb-proxy/ebb/config"
	"github.com/ebb-proxy/ebb/drain"
	"github.com/ebb-proxy/ebb/proxy/h2"
)

// listener is one configured listener: its socket, ebb's accept loop on it,
// and the engines serving what the loop accepts: HTTP/1 (fasthttp) and
// HTTP/2 (package h2), chosen per connection by ALPN or by the client
// preface.
type listener struct {
	p     *Proxy
	idx   int
	cfg   config.Listener
	srv   *fasthttp.Server
	h2    *h2.Server
	chl   *chanListener
	loop  *acceptLoop // set by bind
	certs *certStore  // set by bind when the listener has TLS
	tls   *tls.Config

	conns sync.WaitGroup // serveConn goroutines
}

func newListener(p *Proxy, idx int, cfg config.Listener) *listener {
	l := &listener{p: p, idx: idx, cfg: cfg}
	l.h2 = &h2.Server{
		Handler:        http.HandlerFunc(l.serveHTTP2),
		IdleTimeout:    cfg.Timeouts.Idle,
		MaxHeaderBytes: int(cfg.Limits.MaxHeaderBytes),
		StateChanged: func(c net.Conn, active bool) {
			if dc := connOf(c); dc != nil {
				if active {
					dc.SetState(drain.StateActive)
				} else {
					dc.SetState(drain.StateIdle)
				}
			}
		},
		Log: p.log.With("listener", cfg.Name),
	}
	l.srv = &fasthttp.Server{
		Handler: l.handle,
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
		Logger:                fasthttpLogger{l: p.log.With("listener", cfg.Name)},
	}
	if limit := int64(cfg.Limits.MaxBodyBytes); limit > 0 {
		// A body announced too large is refused before it is read:
		// fasthttp would otherwise read (up to 8 KiB of) it before the
		// handler runs. With Expect: 100-continue the client is told at
		// once; otherwise ebb answers after the body's first byte.
		l.srv.HeaderReceived = func(h *fasthttp.RequestHeader) fasthttp.RequestConfig {
			if int64(h.ContentLength()) > limit {
				return fasthttp.RequestConfig{MaxRequestBodySize: 1}
			}
			return fasthttp.RequestConfig{}
		}
		l.srv.ExpectHandler = func(ctx *fasthttp.RequestCtx) int {
			if int64(ctx.Request.Header.ContentLength()) <= limit {
				return fasthttp.StatusContinue
			}
			ctx.SetBodyString(msgBodyTooLarge)
			ctx.SetContentType("text/plain; charset=utf-8")
			lingerOnClose(ctx)
			p.snap.Load().tables[idx].noRoute.record(drain.ProtoHTTP1, fasthttp.StatusRequestEntityTooLarge, ctx.Time())
			return fasthttp.StatusRequestEntityTooLarge
		}
	}
	return l
}

// errorHandler answers requests fasthttp could not parse, as fasthttp's
// default does, and keeps reading what the client still sends for a while
// before closing, so that the answer is not lost to a reset.
func errorHandler(ctx *fasthttp.RequestCtx, err error) {
	var small *fasthttp.ErrSmallBuffer
	var ne net.Error
	switch {
	case errors.As(err, &small):
		localReply(ctx, fasthttp.StatusRequestHeaderFieldsTooLarge, "ebb: request headers too large\n")
	case errors.As(err, &ne) && ne.Timeout():
		localReply(ctx, fasthttp.StatusRequestTimeout, "ebb: request timeout\n")
	default:
		localReply(ctx, fasthttp.StatusBadRequest, "ebb: malformed request\n")
	}
	lingerOnClose(ctx)
}

// lingerOnClose marks the request's connection to be closed gracefully
// (see drain.Conn.LingerOnClose).
func lingerOnClose(ctx *fasthttp.RequestCtx) {
	if c := connOf(ctx.Conn()); c != nil {
		c.LingerOnClose()
	}
}

// connState mirrors fasthttp's view of each connection into the registry.
func connState(c net.Conn, s fasthttp.ConnState) {
	dc := connOf(c)
	if dc == nil {
		return
	}
	switch s {
	case fasthttp.StateActive:
		dc.SetState(drain.StateActive)
	case fasthttp.StateIdle:
		dc.SetState(drain.StateIdle)
	case fasthttp.StateHijacked:
		dc.SetState(drain.StateUpgraded)
	}
}

// bind opens the listening socket.
func (l *listener) bind() error {
	ln, err := net.Listen("tcp", l.cfg.Address)
	if err != nil {
		return fmt.Errorf("proxy: listener %q: %w", l.cfg.Name, err)
	}
	if t := l.cfg.TLS; t != nil {
		certs, err := newCertStore(t.Cert, t.Key, l.p.log.With("listener", l.cfg.Name))
		if err != nil {
			ln.Close()
			return fmt.Errorf("proxy: listener %q: %w", l.cfg.Name, err)
		}
		l.certs, l.tls = certs, serverTLSConfig(certs)
	}
	l.chl = newChanListener(ln.Addr())
	l.loop = newAcceptLoop(ln, l.cfg.Name, l.cfg.Role != config.RoleOutbound, l.p.reg, func(c *drain.Conn) {
		c.WriteTimeout = l.cfg.Timeouts.Write
		l.conns.Go(func() { l.serveConn(c) })
	})
	return nil
}

// serve runs the accept loop and the HTTP/1 engine until both have
// stopped, and the certificate watcher until the loop has.
func (l *listener) serve() {
	loopDone := make(chan struct{})
	var watchers sync.WaitGroup
	if l.certs != nil {
		ctx, cancel := context.WithCancel(context.Background())
		defer watchers.Wait()
		defer cancel()
		watchers.Go(func() { l.certs.run(ctx) })
	}
	go func() {
		defer close(loopDone)
		l.loop.run()
	}()
	if err := l.srv.Serve(l.chl); err != nil {
		l.p.log.Error("engine stopped", "listener", l.cfg.Name, "err", err)
	}
	// The engine stops on Shutdown or Close, which stop the loop first.
	<-loopDone
}

func (l *listener) stopAccepting() {
	if l.loop != nil {
		l.loop.stop()
	}
}

// close stops accepting and the HTTP/1 engine. The caller closes the
// connections and then calls wait.
func (l *listener) close() {
	l.stopAccepting()
	if l.chl != nil {
		l.chl.Close()
	}
}

// wait waits for every connection's goroutine to end.
func (l *listener) wait() { l.conns.Wait() }

// fasthttpLogger sends fasthttp's own messages (malformed requests and the
// like) to the debug log: they are about clients, not about ebb.
type fasthttpLogger struct{ l *slog.Logger }

func (f fasthttpLogger) Printf(format string, args ...any) {
	f.l.Debug(fmt.Sprintf(format, args...), "component", "fasthttp")
}
