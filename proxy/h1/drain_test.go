package h1_test

import (
	"net"
	"testing"
	"testing/synctest"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/ebb-proxy/ebb/proxy/downstream"
	"github.com/ebb-proxy/ebb/proxy/internal/enginetest"
	"github.com/ebb-proxy/ebb/proxy/proxytest"
)

// The drain's close signal on the HTTP/1 engine, in fake time: the
// controller gives a connection its close signal at its moment, and the
// engine passes it on in-band.

// TestHTTP1CloseSignal: before the connection's moment (here T+1s)
// responses keep the connection; from it on, each carries Connection:
// close, counted.
func TestHTTP1CloseSignal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := enginetest.New(t, nil, "127.0.0.1:1") // never dialled: CONNECT is refused
		reg := e.Registry
		client, server := net.Pipe()
		defer client.Close()
		conn := reg.Track(&enginetest.AddrConn{Conn: server}, "bench", true, nil)
		conn.SetProtocol(downstream.ProtoHTTP1)
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
		stop := proxytest.StartDrain(reg, time.Second)
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
		if n, r := reg.Stats.CloseSignals[downstream.ProtoHTTP1].Load(), reg.Stats.Requests.Load(); n != 1 || r != 2 {
			t.Fatalf("%d Connection: close counted, %d requests during the drain; want 1 and 2", n, r)
		}
	})
}
