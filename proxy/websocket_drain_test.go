package proxy

import (
	"bufio"
	"bytes"
	"crypto/sha1"
	"crypto/tls"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/ebb-proxy/ebb/config"
	"github.com/ebb-proxy/ebb/drain"
	"github.com/ebb-proxy/ebb/proxy/downstream"
	"github.com/ebb-proxy/ebb/proxy/proxytest"
)

// The drain of WebSocket tunnels, end to end in-process: gorilla/websocket
// clients and origins (or, for the peers that never answer, raw ones)
// through the HTTP/1 engine, in cleartext and over TLS, under a real drain
// controller.

// wsDrainConfig is a drain with no delay, its moments spread over 200ms,
// and the given WebSocket grace.
func wsDrainConfig(grace time.Duration) config.Drain {
	return config.Drain{Spread: 200 * time.Millisecond, Quiet: 100 * time.Millisecond, Timeout: 30 * time.Second,
		AcceptUntil: config.AcceptUntilExit,
		HTTP1:       config.DrainHTTP1{IdleClose: config.Never}, HTTP2: config.DrainHTTP2{GoawayGrace: time.Second},
		WebSocket: config.DrainWebSocket{Close: config.WebSocketAtSignal, Grace: grace}}
}

// wsClosed is how a side of a WebSocket ended: the close frame it got
// (code -1: none, err says what happened instead).
type wsClosed struct {
	code int
	text string
	err  error
}

func closedBy(err error) wsClosed {
	var ce *websocket.CloseError
	if errors.As(err, &ce) {
		return wsClosed{code: ce.Code, text: ce.Text}
	}
	return wsClosed{code: -1, err: err}
}

// goingAway is what both sides must see.
var goingAway = wsClosed{code: websocket.CloseGoingAway, text: "ebb: draining"}

// wsModes are the modes with an HTTP/1.1 client and an http1 cluster:
// the ones that relay WebSockets.
func wsModes() []proxytest.Mode {
	var out []proxytest.Mode
	for _, m := range allModes {
		if !m.DownH2() && m.UpHTTP1Cluster() {
			out = append(out, m)
		}
	}
	return out
}

// wsDial opens a WebSocket to path through e.
func wsDial(t *testing.T, e *env, path string, d websocket.Dialer) *websocket.Conn {
	t.Helper()
	d.HandshakeTimeout = waitTimeout
	url := "ws://" + e.Host + path
	if e.TLS() {
		d.TLSClientConfig = &tls.Config{RootCAs: e.Pool}
		url = "wss://" + e.Host + path
	}
	c, _, err := d.DialContext(t.Context(), url, nil)
	if err != nil {
		t.Fatalf("dial %s: %v", path, err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetReadDeadline(time.Now().Add(waitTimeout))
	return c
}

// drainResult waits for the drain's end.
func drainResult(t *testing.T, done <-chan drain.Result) drain.Result {
	t.Helper()
	return recv(t, done, "the drain's end")
}

// TestWebSocketDrainGoingAway: four WebSockets open at the drain's
// trigger are each told to go away at their moment: the client gets a
// close frame with status 1001, the origin one too (after every message
// the client sent before it, including one sent without waiting for its
// echo), and the drain ends drained, not forced, with the four counted.
func TestWebSocketDrainGoingAway(t *testing.T) {
	for _, m := range wsModes() {
		t.Run(m.String(), func(t *testing.T) {
			t.Parallel()
			const clients = 4
			type seen struct {
				msgs []string
				end  wsClosed
			}
			origins := make(chan seen, clients)
			e := newEnv(t, m, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				var up websocket.Upgrader
				c, err := up.Upgrade(w, r, nil)
				if err != nil {
					return
				}
				defer c.Close()
				var s seen
				for {
					typ, msg, err := c.ReadMessage()
					if err != nil {
						s.end = closedBy(err)
						origins <- s
						return
					}
					s.msgs = append(s.msgs, string(msg))
					c.WriteMessage(typ, msg)
				}
			}))
			var conns []*websocket.Conn
			for i := range clients {
				c := wsDial(t, e, "/chat", websocket.Dialer{})
				for j := range 3 {
					msg := fmt.Sprintf("client %d message %d", i, j)
					if err := c.WriteMessage(websocket.TextMessage, []byte(msg)); err != nil {
						t.Fatal(err)
					}
					if _, got, err := c.ReadMessage(); err != nil || string(got) != msg {
						t.Fatalf("echo of %q: %q, %v", msg, got, err)
					}
				}
				conns = append(conns, c)
			}
			for i, c := range conns {
				// Not waited for: it is on its way when the drain begins.
				c.WriteMessage(websocket.TextMessage, fmt.Appendf(nil, "client %d last", i))
			}
			done, stop := proxytest.RunDrain(e.px.reg, wsDrainConfig(2*time.Second))
			defer stop()
			for i, c := range conns {
				var err error
				for err == nil {
					_, _, err = c.ReadMessage() // the last echo may come first
				}
				if got := closedBy(err); got != goingAway {
					t.Errorf("client %d: %+v, want a close frame with 1001 %q", i, got, goingAway.text)
				}
			}
			for range clients {
				s := recv(t, origins, "the origin's end")
				if len(s.msgs) != 4 || !strings.HasSuffix(s.msgs[3], " last") || s.end != goingAway {
					t.Errorf("origin got %q then %+v; want 3 messages and the last, then a close frame with 1001 %q", s.msgs, s.end, goingAway.text)
				}
			}
			if res := drainResult(t, done); res.Reason != drain.ReasonDrained || res.Forced != 0 {
				t.Fatalf("drain ended %+v, want drained with nothing forced", res)
			}
			if n := e.px.reg.Stats.CloseSignals[downstream.ProtoWebSocket].Load(); n != clients {
				t.Fatalf("%d WebSocket close signals counted, want %d", n, clients)
			}
		})
	}
}

// TestWebSocketDrainMidMessage: the close frame goes between two frames,
// never into one. A fragmented message in flight each way (the close may
// go between its fragments) and a 24 MiB frame in flight each way (the
// close waits for its end): gorilla, on both sides, reads each whole up
// to the close frame and then sees 1001.
func TestWebSocketDrainMidMessage(t *testing.T) {
	big := bytes.Repeat([]byte("0123456789abcdef"), 24<<20/16)
	for _, m := range wsModes() {
		for _, tc := range []struct {
			name string
			// down: the origin sends the message in flight, else the client.
			down bool
			// fragmented: written as fragments (1 KiB write buffers), the
			// rest held back until the drain has begun; else as one frame.
			fragmented bool
		}{
			{"fragments from the origin", true, true},
			{"fragments from the client", false, true},
			{"a large frame from the origin", true, false},
			{"a large frame from the client", false, false},
		} {
			t.Run(m.String()+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				// started: the sender has sent part of the message; finish:
				// the drain has begun; got: what the receiving side read of
				// it, and how it ended.
				started, finish := make(chan struct{}), make(chan struct{})
				type read struct {
					n   int
					end wsClosed
				}
				got := make(chan read, 2)
				// send writes the message in flight: fragments, the last
				// after finish; or one frame.
				send := func(c *websocket.Conn) {
					if !tc.fragmented {
						c.WriteMessage(websocket.BinaryMessage, big)
						return
					}
					w, err := c.NextWriter(websocket.BinaryMessage)
					if err != nil {
						return
					}
					w.Write(big[:3000]) // two fragments of 1 KiB go out
					<-finish
					w.Write(big[3000:4000])
					w.Close()
				}
				// receive reads messages until the close; once it has read
				// the first byte of one, the message is on its way through
				// ebb, and the drain begins.
				var once sync.Once
				receive := func(c *websocket.Conn) {
					var r read
					for {
						_, msg, err := c.NextReader()
						if err == nil {
							var first [1]byte
							if _, err = io.ReadFull(msg, first[:]); err == nil {
								once.Do(func() { close(started) })
								var n int64
								n, err = io.Copy(io.Discard, msg)
								r.n += 1 + int(n)
							}
						}
						if err != nil {
							r.end = closedBy(err)
							got <- r
							return
						}
					}
				}
				// The receiver reads until the close; the sender also reads,
				// so that it answers the close.
				bufSize := 1024
				if !tc.fragmented {
					bufSize = 0
				}
				var origin sync.WaitGroup
				t.Cleanup(origin.Wait)
				e := newEnv(t, m, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					up := websocket.Upgrader{WriteBufferSize: bufSize}
					c, err := up.Upgrade(w, r, nil)
					if err != nil {
						return
					}
					defer c.Close()
					if tc.down {
						origin.Go(func() { send(c) })
						receive(c)
						return
					}
					receive(c)
				}))
				d := websocket.Dialer{WriteBufferSize: bufSize}
				if !tc.fragmented {
					d.WriteBufferSize = len(big) + 64 // one frame
				}
				c := wsDial(t, e, "/stream", d)
				c.SetReadDeadline(time.Time{})
				var client sync.WaitGroup
				defer client.Wait()
				if tc.down {
					client.Go(func() { receive(c) })
				} else {
					client.Go(func() { send(c) })
					client.Go(func() { receive(c) })
				}
				recv(t, started, "the message to be on its way")
				done, stop := proxytest.RunDrain(e.px.reg, wsDrainConfig(5*time.Second))
				defer stop()
				close(finish)
				// Both sides end with ebb's close frame. The receiver read
				// the large frame whole (the close waited for its end), or
				// the whole fragments sent before the close, or all 4000
				// bytes if the last was on its way first. gorilla's server
				// sends the first 3000 bytes as one fragment; its client,
				// 1 KiB ones, and answers ebb's close between two of them
				// if it comes first (RFC 6455 §5.4 allows it): after the
				// drain began, the client's last 1000 bytes go as a third
				// 1 KiB fragment and a last one of 928, and the close may
				// come between those two.
				fragments := map[bool][]int{true: {3000, 4000}, false: {1024, 2048, 3072, 4000}}[tc.down]
				var total int
				for range 2 {
					r := recv(t, got, "a side's end")
					if r.end != goingAway {
						t.Fatalf("a side ended with %+v, want 1001 %q", r.end, goingAway.text)
					}
					total += r.n
				}
				if tc.fragmented && !slices.Contains(fragments, total) || !tc.fragmented && total != len(big) {
					t.Fatalf("the receiver read %d bytes of the message in flight; want whole fragments %v, or the frame's %d", total, fragments, len(big))
				}
				if res := drainResult(t, done); res.Reason != drain.ReasonDrained {
					t.Fatalf("drain ended %+v, want drained", res)
				}
			})
		}
	}
}

// rawWebSocket opens a WebSocket through e by hand, so that the client
// can do what no library does (never answer a close); it returns the
// connection past the 101's head.
func rawWebSocket(t *testing.T, e *env) (net.Conn, *bufio.Reader) {
	t.Helper()
	var nc net.Conn
	var err error
	if e.TLS() {
		nc, err = tls.Dial("tcp", e.Host, &tls.Config{RootCAs: e.Pool})
	} else {
		nc, err = net.Dial("tcp", e.Host)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	nc.SetDeadline(time.Now().Add(waitTimeout))
	io.WriteString(nc, "GET /raw HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
	br := bufio.NewReader(nc)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("handshake: %v, %v", resp, err)
	}
	return nc, br
}

// readCloseFrame reads one frame from r and returns its status code and
// reason if it is a close frame, and whether it was masked.
func readCloseFrame(r io.Reader) (code int, reason string, masked bool, err error) {
	var h [2]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, "", false, err
	}
	if h[0] != 0x88 || h[1]&0x7f > 125 {
		return 0, "", false, fmt.Errorf("frame header % x, want a close frame", h)
	}
	masked = h[1]&0x80 != 0
	var key [4]byte
	if masked {
		if _, err := io.ReadFull(r, key[:]); err != nil {
			return 0, "", masked, err
		}
	}
	p := make([]byte, h[1]&0x7f)
	if _, err := io.ReadFull(r, p); err != nil {
		return 0, "", masked, err
	}
	if masked {
		for i := range p {
			p[i] ^= key[i%4]
		}
	}
	if len(p) < 2 {
		return 0, "", masked, fmt.Errorf("close frame without a status")
	}
	return int(binary.BigEndian.Uint16(p)), string(p[2:]), masked, nil
}

// TestWebSocketDrainPeersThatNeverAnswer: a client that never answers
// ebb's close frame has its connection closed after the grace, and the
// origin gets its close frame all the same; an origin that never answers
// has its connection closed after the grace, having got a masked close
// frame with 1001. Either way the drain ends drained.
func TestWebSocketDrainPeersThatNeverAnswer(t *testing.T) {
	const grace = 300 * time.Millisecond
	for _, m := range wsModes() {
		t.Run(m.String()+"/client", func(t *testing.T) {
			t.Parallel()
			origin := make(chan wsClosed, 1)
			e := newEnv(t, m, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				var up websocket.Upgrader
				c, err := up.Upgrade(w, r, nil)
				if err != nil {
					return
				}
				defer c.Close()
				_, _, err = c.ReadMessage()
				origin <- closedBy(err)
			}))
			_, br := rawWebSocket(t, e)
			done, stop := proxytest.RunDrain(e.px.reg, wsDrainConfig(grace))
			defer stop()
			code, reason, masked, err := readCloseFrame(br)
			if err != nil || code != 1001 || reason != goingAway.text || masked {
				t.Fatalf("client read a close frame %d %q (masked %v), %v; want an unmasked 1001 %q", code, reason, masked, err, goingAway.text)
			}
			start := time.Now()
			// Never answered: ebb closes the connection after the grace.
			if n, err := br.Read(make([]byte, 1)); err == nil {
				t.Fatalf("after the close frame, %d more bytes", n)
			}
			if waited := time.Since(start); waited < grace/2 {
				t.Fatalf("the connection closed %v after the close frame, before the grace (%v)", waited, grace)
			}
			if got := recv(t, origin, "the origin's end"); got != goingAway {
				t.Fatalf("origin: %+v, want 1001", got)
			}
			if res := drainResult(t, done); res.Reason != drain.ReasonDrained {
				t.Fatalf("drain ended %+v, want drained", res)
			}
		})
		t.Run(m.String()+"/origin", func(t *testing.T) {
			t.Parallel()
			// The origin does the handshake by hand, then reads and never
			// answers.
			type seen struct {
				code    int
				reason  string
				masked  bool
				err     error
				eofNext bool
			}
			origin := make(chan seen, 1)
			e := newEnv(t, m, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				nc, brw, err := http.NewResponseController(w).Hijack()
				if err != nil {
					return
				}
				defer nc.Close()
				sum := sha1.Sum([]byte(r.Header.Get("Sec-WebSocket-Key") + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
				io.WriteString(nc, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
					"Sec-WebSocket-Accept: "+base64.StdEncoding.EncodeToString(sum[:])+"\r\n\r\n")
				nc.SetDeadline(time.Now().Add(waitTimeout))
				var s seen
				s.code, s.reason, s.masked, s.err = readCloseFrame(brw)
				_, err = brw.ReadByte()
				s.eofNext = err == io.EOF
				origin <- s
			}))
			c := wsDial(t, e, "/raw", websocket.Dialer{})
			done, stop := proxytest.RunDrain(e.px.reg, wsDrainConfig(grace))
			defer stop()
			if _, _, err := c.ReadMessage(); closedBy(err) != goingAway {
				t.Fatalf("client: %v, want 1001", err)
			}
			s := recv(t, origin, "the origin's read")
			if s.err != nil || s.code != 1001 || s.reason != goingAway.text || !s.masked || !s.eofNext {
				t.Fatalf("origin read %+v; want a masked close frame 1001 %q, then the connection's end", s, goingAway.text)
			}
			if res := drainResult(t, done); res.Reason != drain.ReasonDrained {
				t.Fatalf("drain ended %+v, want drained", res)
			}
		})
	}
}
