package drain

import (
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ebb-proxy/ebb/config"

	"github.com/ebb-proxy/ebb/proxy/downstream"
)

// TestTunnelsClose: a WebSocket tunnel is told to go away at its
// connection's moment (drain.websocket.close: at_signal), spread with the
// other connections; or, at_deadline, in a window of its own ending
// 2×grace before the deadline; one opened after its moment (or its window)
// is told at once. The close is given the configured grace; a tunnel on an
// outbound listener's connection is left alone; the connection counts as
// websocket, not http1.
func TestTunnelsClose(t *testing.T) {
	third := 4 * time.Second / 3
	for _, tc := range []struct {
		close string
		// want are the moments of the tunnels (two open at the trigger,
		// one opened at 12s and one at 23s) and, when withHTTP1, of the
		// two HTTP/1 connections' signals too.
		want      []time.Duration
		withHTTP1 bool
	}{
		// The signal phase's moments are 5, 6, 7 and 8s, shared by the two
		// tunnels and the two HTTP/1 connections in a random order.
		{config.WebSocketAtSignal, []time.Duration{5 * time.Second, 6 * time.Second, 7 * time.Second, 8 * time.Second, 12 * time.Second, 23 * time.Second}, true},
		// Timeout 30s, spread 4s, grace 3s: the window is 20s..24s, for
		// the three tunnels open at 20s; the last is told at once.
		{config.WebSocketAtDeadline, []time.Duration{20 * time.Second, 20*time.Second + third, 20*time.Second + 2*third, 23 * time.Second}, false},
	} {
		t.Run(tc.close, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg := drainConfig(5*time.Second, 4*time.Second, 30*time.Second)
				cfg.WebSocket = config.DrainWebSocket{Close: tc.close, Grace: 3 * time.Second}
				b := newBubble(t, cfg)
				var mu sync.Mutex
				var moments []time.Duration
				tunnel := func(c *downstream.Conn) {
					c.Tunnel(func(grace time.Duration) {
						if grace != 3*time.Second {
							t.Errorf("close asked with grace %v, want 3s", grace)
						}
						mu.Lock()
						defer mu.Unlock()
						moments = append(moments, b.at())
					})
				}
				// Two tunnels and two HTTP/1 connections share the signal
				// phase's four moments.
				var conns []*downstream.Conn
				for i := range 4 {
					c := b.conn(downstream.ProtoHTTP1, true)
					if i%2 == 0 {
						tunnel(c)
					} else if tc.withHTTP1 {
						c.OnSignal(func() {
							mu.Lock()
							defer mu.Unlock()
							moments = append(moments, b.at())
						})
					}
					conns = append(conns, c)
				}
				outbound := b.conn(downstream.ProtoHTTP1, false)
				outbound.Tunnel(func(time.Duration) { t.Error("an outbound listener's tunnel was closed") })
				if p := conns[0].Protocol(); p != downstream.ProtoWebSocket || conns[0].State() != downstream.StateUpgraded {
					t.Fatalf("a tunnel's connection is %v, %v; want websocket, upgraded", p, conns[0].State())
				}
				b.ctl.Trigger("test")
				// Connections arriving after the delay have their moment at
				// once; these upgrade at once.
				b.sleepUntil(12 * time.Second)
				late := b.conn(downstream.ProtoHTTP1, true)
				tunnel(late)
				b.sleepUntil(23 * time.Second)
				later := b.conn(downstream.ProtoHTTP1, true)
				tunnel(later)
				b.sleepUntil(25 * time.Second)
				mu.Lock()
				got := slices.Clone(moments)
				mu.Unlock()
				slices.Sort(got)
				if !slices.Equal(got, tc.want) {
					t.Fatalf("tunnels told to close (with HTTP/1 signals: %v) at %v; want %v", tc.withHTTP1, got, tc.want)
				}
				s := sample(b.reg, time.Now(), b.start, 30*time.Second)
				if s.Connections.WebSocket.Upgraded != 5 || s.Connections.HTTP1.Total() != 2 {
					t.Fatalf("sampled %+v, want 5 upgraded WebSockets (the engine closes them) and 2 HTTP/1", s.Connections)
				}
				for _, c := range append(conns, late, later, outbound) {
					c.Close()
				}
				if res, _ := b.result(); res.Reason != ReasonDrained {
					t.Fatalf("drain ended %+v, want drained", res)
				}
			})
		})
	}
}
