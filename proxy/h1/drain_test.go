package h1_test

import (
	"context"
	"net"
	"testing"
	"testing/synctest"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/ebb-proxy/ebb/config"
	"github.com/ebb-proxy/ebb/drain"
	"github.com/ebb-proxy/ebb/proxy/internal/enginetest"
	"github.com/ebb-proxy/ebb/proxy/proxytest"
)

// The drain's close signal on the HTTP/1 engine, in fake time: the
// controller gives a connection its close signal at its moment, and the
// engine passes it on in-band.

// regServer is the drain.Server of these tests: closing closes every
// connection, as the proxy's Close does.
type regServer struct{ reg *drain.Registry }

func (regServer) StopAccepting() {}
func (s regServer) Close() error { s.reg.CloseAll(); return nil }

// startDrain runs a controller over reg with the given delay and no
// spread, triggered now; stop forces it to its end and waits.
func startDrain(reg *drain.Registry, delay time.Duration) (stop func()) {
	cfg := config.Drain{Delay: delay, Quiet: time.Second, Timeout: time.Minute, AcceptUntil: config.AcceptUntilExit,
		HTTP1: config.DrainHTTP1{IdleClose: config.Never}, HTTP2: config.DrainHTTP2{GoawayGrace: time.Second}}
	ctl := drain.NewController(cfg, reg, regServer{reg}, proxytest.Discard())
	done := make(chan struct{})
	go func() {
		ctl.Run(context.Background())
		close(done)
	}()
	ctl.Trigger("test")
	return func() {
		ctl.Force("test")
		<-done
	}
}

// TestHTTP1CloseSignal: before the connection's moment (here T+1s)
// responses keep the connection; from it on, each carries Connection:
// close, counted.
func TestHTTP1CloseSignal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := enginetest.New(t, nil, "127.0.0.1:1") // never dialled: CONNECT is refused
		reg := e.Registry
		client, server := net.Pipe()
		defer client.Close()
		conn := reg.Track(&enginetest.AddrConn{Conn: server}, "bench", true)
		conn.SetProtocol(drain.ProtoHTTP1)
		var ctx fasthttp.RequestCtx
		ctx.Init2(conn, nil, false)
		closes := func() bool {
			ctx.Request.Reset()
			ctx.Response.Reset()
			ctx.Request.Header.SetMethod("CONNECT")
			ctx.Request.Header.SetRequestURI("example.com:443")
			e.H1.Handle(&ctx)
			return ctx.Response.ConnectionClose()
		}
		if closes() {
			t.Fatal("Connection: close before the drain")
		}
		stop := startDrain(reg, time.Second)
		defer stop()
		time.Sleep(500 * time.Millisecond) // fake time
		synctest.Wait()
		if closes() {
			t.Fatal("Connection: close during the announce phase")
		}
		time.Sleep(500 * time.Millisecond) // fake time
		synctest.Wait()
		if !closes() {
			t.Fatal("no Connection: close after the connection's moment")
		}
		if n, r := reg.Stats.CloseSignals[drain.ProtoHTTP1].Load(), reg.Stats.Requests.Load(); n != 1 || r != 2 {
			t.Fatalf("%d Connection: close counted, %d requests during the drain; want 1 and 2", n, r)
		}
	})
}
