package proxy

import (
	"io"
	"net"
	"testing"
	"testing/synctest"
	"time"

	"golang.org/x/net/http2"

	"github.com/ebb-proxy/ebb/config"
	"github.com/ebb-proxy/ebb/drain"
	"github.com/ebb-proxy/ebb/proxy/proxytest"
)

// The drain's timeline on each engine, in fake time: the controller gives
// a connection its close signal at its moment, and the engine passes it on
// in-band.

// TestHTTP2CloseSignal: at the connection's moment the engine sends the
// first GOAWAY and a PING; a client that does not answer the PING gets the
// final GOAWAY after drain.http2.goaway_grace (1s).
func TestHTTP2CloseSignal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := config.Default()
		cfg.Listeners = []config.Listener{proxytest.Listener()}
		cfg.Clusters = []config.Cluster{proxytest.Cluster("127.0.0.1:1")}
		p := newTestProxy(t, cfg)
		t.Cleanup(p.snap.Load().Close)
		l := p.listeners[0]
		reg := p.reg
		client, server := net.Pipe()
		conn := reg.Track(&addrConn{Conn: server}, "bench", true, nil)
		served := make(chan struct{})
		go func() {
			l.serveConn(conn)
			close(served)
		}()
		fr := http2.NewFramer(client, client)
		// The server reads and writes on goroutines of its own, so the
		// client can write and read on this one.
		io.WriteString(client, http2.ClientPreface)
		fr.WriteSettings()
		start := time.Now()
		// frames reads frames until one of type want, acknowledging the
		// server's SETTINGS on the way.
		next := func(want http2.FrameType) http2.Frame {
			t.Helper()
			for {
				f, err := fr.ReadFrame()
				if err != nil {
					t.Fatalf("waiting for %v: %v", want, err)
				}
				if s, ok := f.(*http2.SettingsFrame); ok && !s.IsAck() {
					fr.WriteSettingsAck()
				}
				if f.Header().Type == want {
					return f
				}
			}
		}
		next(http2.FrameSettings)
		if p := conn.Protocol(); p != drain.ProtoHTTP2 {
			t.Fatalf("protocol %v, want http2", p)
		}
		stop := proxytest.StartDrain(reg, time.Second)
		defer stop()
		first := next(http2.FrameGoAway).(*http2.GoAwayFrame)
		if at := time.Since(start); at != time.Second || first.LastStreamID != 1<<31-1 {
			t.Fatalf("first GOAWAY at %v with last stream %d; want at 1s with 2147483647", at, first.LastStreamID)
		}
		next(http2.FramePing) // not acknowledged
		final := next(http2.FrameGoAway).(*http2.GoAwayFrame)
		if at := time.Since(start); at != 2*time.Second || final.LastStreamID != 0 {
			t.Fatalf("final GOAWAY at %v with last stream %d; want at 2s with 0", at, final.LastStreamID)
		}
		if n := reg.Stats.CloseSignals[drain.ProtoHTTP2].Load(); n != 1 {
			t.Fatalf("%d GOAWAYs counted, want 1", n)
		}
		client.Close()
		<-served
	})
}
