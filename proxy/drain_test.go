package proxy

import (
	"io"
	"net"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"golang.org/x/net/http2"

	"github.com/ebb-proxy/ebb/config"
	"github.com/ebb-proxy/ebb/proxy/downstream"
	"github.com/ebb-proxy/ebb/proxy/proxytest"
)

// The drain's timeline on each engine, in fake time: the controller gives
// a connection its close signal at its moment, and the engine passes it on
// in-band.

// TestHTTP2CloseSignal: at the connection's moment the engine sends the
// first GOAWAY and a PING (on a connection where the client has opened no
// stream, once it has stayed idle for drain.http1.idle_close, 1s, past
// the moment); a client that does not answer the PING gets the final
// GOAWAY after drain.http2.goaway_grace (1s).
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
		if p := conn.Protocol(); p != downstream.ProtoHTTP2 {
			t.Fatalf("protocol %v, want http2", p)
		}
		stop := proxytest.StartDrain(reg, time.Second)
		defer stop()
		// The client has opened no stream: the GOAWAY waits for its first
		// one, or for drain.http1.idle_close (1s) past the moment.
		first := next(http2.FrameGoAway).(*http2.GoAwayFrame)
		if at := time.Since(start); at != 2*time.Second || first.LastStreamID != 1<<31-1 {
			t.Fatalf("first GOAWAY at %v with last stream %d; want at 2s with 2147483647", at, first.LastStreamID)
		}
		next(http2.FramePing) // not acknowledged
		final := next(http2.FrameGoAway).(*http2.GoAwayFrame)
		if at := time.Since(start); at != 3*time.Second || final.LastStreamID != 0 {
			t.Fatalf("final GOAWAY at %v with last stream %d; want at 3s with 0", at, final.LastStreamID)
		}
		if n := reg.Stats.CloseSignals[downstream.ProtoHTTP2].Load(); n != 1 {
			t.Fatalf("%d GOAWAYs counted, want 1", n)
		}
		client.Close()
		<-served
	})
}

// TestHTTP2NewConnectionsDuringDrain: a client that dials a new HTTP/2
// connection to a draining ebb (a load balancer not caught up yet) gets
// its request served on it: the GOAWAY waits for that first stream.
// Sent at once, it closed some of those connections before Go's client
// had sent its request, which it then failed ("http2: client conn could
// not be established") rather than retry.
func TestHTTP2NewConnectionsDuringDrain(t *testing.T) {
	for _, m := range allModes {
		if !m.DownH2() || m.UpH2() {
			continue
		}
		t.Run(m.String(), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, m, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
			// The drain must not end while the test runs: once drained
			// (quiet without a connection, which a slow machine can
			// give between two requests) it would close every
			// connection, one just accepted included.
			cfg := wsDrainConfig(time.Second)
			cfg.Quiet = cfg.Timeout
			_, stop := proxytest.RunDrain(e.px.reg, cfg)
			defer stop()
			for i := range 100 {
				e.Client.CloseIdleConnections() // a new connection each time
				resp, err := e.Client.Get(e.Base + "/new")
				if err != nil {
					t.Fatalf("request %d on a new connection during the drain: %v", i, err)
				}
				body, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil || resp.StatusCode != 200 || string(body) != "ok" {
					t.Fatalf("request %d: %d %q, %v", i, resp.StatusCode, body, err)
				}
			}
		})
	}
}
