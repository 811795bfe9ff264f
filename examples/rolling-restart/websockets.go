package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// The WebSocket clients' pace.
const (
	// wsEvery is how often a client sends a message.
	wsEvery = 75 * time.Millisecond
	// wsSilence is how long a client waits for its next echo before it
	// gives its WebSocket up: an abnormal end, as a dropped connection.
	wsSilence = 5 * time.Second
)

// wsLoad is the WebSocket load of one rolling restart: clients that
// each hold a WebSocket to the origins' echo through a VIP, as a chat's
// clients do, send a message every wsEvery and check its echo. When a
// WebSocket ends they note how, by the close code received (1006 when it
// ended without a close frame), and reconnect through the VIP.
type wsLoad struct {
	url     string
	clients int
	dialer  websocket.Dialer
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup

	mu          sync.Mutex
	live        int         // guarded by mu: WebSockets open now
	echoed      int         // guarded by mu: messages whose echo came back
	unanswered  int         // guarded by mu: messages without an echo when a close frame ended their WebSocket
	lost        int         // guarded by mu: messages without an echo when their WebSocket ended otherwise
	ends        map[int]int // guarded by mu: WebSockets the proxy ended, by close code
	reconnects  int         // guarded by mu: the first reconnects after an end
	reconnected int         // guarded by mu: those that opened a WebSocket
	errs        int         // guarded by mu
	sample      []string    // guarded by mu: the first errors
	abnormal    []string    // guarded by mu: the first ends without a close frame, and why
}

// startWS starts n WebSocket clients of the echo at url (ws://host:port).
func startWS(url string, n int) *wsLoad {
	ctx, cancel := context.WithCancel(context.Background())
	ws := &wsLoad{url: url + "/ws", clients: n, dialer: websocket.Dialer{HandshakeTimeout: 5 * time.Second},
		ctx: ctx, cancel: cancel, ends: map[int]int{}}
	for id := range n {
		ws.wg.Go(func() { ws.client(id) })
	}
	return ws
}

// Stop ends the clients, each with a close handshake of its own, and
// waits for them. WebSockets they close are not counted as ended.
func (ws *wsLoad) Stop() {
	ws.cancel()
	ws.wg.Wait()
}

// ready reports whether every client holds a WebSocket and messages
// come back.
func (ws *wsLoad) ready() bool {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	return ws.live == ws.clients && ws.echoed >= ws.clients
}

// client is one client: it holds a WebSocket until the load stops,
// reconnecting when one ends. Each failed connect is an error; the next
// try is wsEvery later.
func (ws *wsLoad) client(id int) {
	retry := time.NewTimer(0)
	defer retry.Stop()
	afterEnd := false // the next connect is the first after an end
	for {
		select {
		case <-ws.ctx.Done():
			return
		case <-retry.C:
		}
		c, _, err := ws.dialer.DialContext(ws.ctx, ws.url, nil)
		if ws.ctx.Err() != nil {
			if c != nil {
				c.Close()
			}
			return
		}
		ws.mu.Lock()
		if afterEnd {
			ws.reconnects++
			if err == nil {
				ws.reconnected++
			}
		}
		if err != nil {
			ws.fail("connecting: %v", err)
		} else {
			ws.live++
		}
		ws.mu.Unlock()
		afterEnd = false
		if err != nil {
			retry.Reset(wsEvery)
			continue
		}
		if !ws.hold(c, id) {
			return
		}
		afterEnd = true
		retry.Reset(0)
	}
}

// wsEnd is how a WebSocket's reading ended.
type wsEnd struct {
	err    error // ReadMessage's error
	echoed int   // the messages whose echo came back on it
}

// hold uses c until the proxy ends it or the load stops: a message every
// wsEvery, each echo checked by a reader of its own. It reports whether
// the proxy ended it.
func (ws *wsLoad) hold(c *websocket.Conn, id int) bool {
	defer c.Close()
	done := make(chan wsEnd, 1)
	go func() { done <- ws.read(c, id) }()
	tick := time.NewTicker(wsEvery)
	defer tick.Stop()
	sent, writing := 0, true
	for {
		select {
		case end := <-done:
			ws.ended(end, sent)
			return true
		case <-ws.ctx.Done():
			// The client's own close: a close frame, its answer awaited
			// a moment, then the connection closed under the reader.
			c.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, "load stopped"), time.Now().Add(time.Second))
			answer := time.NewTimer(time.Second)
			select {
			case <-done:
			case <-answer.C:
				c.Close()
				<-done
			}
			answer.Stop()
			ws.mu.Lock()
			ws.live--
			ws.mu.Unlock()
			return false
		case <-tick.C:
			if !writing {
				continue
			}
			c.SetWriteDeadline(time.Now().Add(wsSilence))
			if err := c.WriteMessage(websocket.TextMessage, wsMessage(id, sent)); err != nil {
				// The reader learns why (a close frame, the connection's
				// end, or wsSilence without an echo).
				writing = false
				continue
			}
			sent++
		}
	}
}

// read reads c's echoes until it ends, checking each is the next
// message sent; silence for wsSilence ends it.
func (ws *wsLoad) read(c *websocket.Conn, id int) wsEnd {
	echoed := 0
	for {
		c.SetReadDeadline(time.Now().Add(wsSilence))
		_, msg, err := c.ReadMessage()
		if err != nil {
			return wsEnd{err, echoed}
		}
		ws.mu.Lock()
		if want := wsMessage(id, echoed); string(msg) != string(want) {
			ws.fail("echo: %.60q back, %q expected", msg, want)
		} else {
			ws.echoed++
		}
		ws.mu.Unlock()
		echoed++
	}
}

// ended counts a WebSocket the proxy ended, sent messages having been
// sent on it: by the close code received, or 1006 (abnormal closure)
// when no close frame came. Messages left without an echo are how a
// WebSocket ends at a close frame; at an abnormal end they are lost,
// and errors.
func (ws *wsLoad) ended(end wsEnd, sent int) {
	code := websocket.CloseAbnormalClosure
	var ce *websocket.CloseError
	if errors.As(end.err, &ce) {
		code = ce.Code
	}
	ws.mu.Lock()
	defer ws.mu.Unlock()
	ws.live--
	ws.ends[code]++
	missing := max(0, sent-end.echoed)
	if closeFrame(code) {
		ws.unanswered += missing
		return
	}
	if len(ws.abnormal) < 2 {
		ws.abnormal = append(ws.abnormal, fmt.Sprintf("%s %d: %v", time.Now().Format("15:04:05.000"), code, end.err))
	}
	if missing > 0 {
		ws.lost += missing
		ws.failN(missing, "no echo for the last %d sent before the WebSocket ended: %v", missing, end.err)
	}
}

// fail counts an error; ws.mu must be held.
func (ws *wsLoad) fail(format string, args ...any) { ws.failN(1, format, args...) }

// failN counts n errors of one kind; ws.mu must be held.
func (ws *wsLoad) failN(n int, format string, args ...any) {
	ws.errs += n
	if len(ws.sample) < 3 {
		ws.sample = append(ws.sample, time.Now().Format("15:04:05.000")+" "+fmt.Sprintf(format, args...))
	}
}

// Report returns the clients' errors, whether their WebSockets ended
// only with a close frame saying the server goes away or is done (1001,
// 1000) and each reconnected, the line of their ends, and lines for
// their messages and first errors.
func (ws *wsLoad) Report() (errs int, clean bool, ends string, lines []string) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	clean = ws.reconnected == ws.reconnects
	total := 0
	var codes []string
	for _, code := range slices.Sorted(maps.Keys(ws.ends)) {
		n := ws.ends[code]
		total += n
		clean = clean && closeFrame(code)
		codes = append(codes, fmt.Sprintf("%d × %d %s", n, code, closeName(code)))
	}
	ends = fmt.Sprintf("websockets: %d ended", total)
	if total > 0 {
		ends += ": " + strings.Join(codes, ", ")
	}
	ends += fmt.Sprintf(", reconnected %d/%d", ws.reconnected, ws.reconnects)
	msgs := fmt.Sprintf("%-26s %7d ok, %5d errors", "WebSocket messages:", ws.echoed, ws.errs)
	if ws.unanswered > 0 || ws.lost > 0 {
		msgs += fmt.Sprintf("; without an echo at their WebSocket's end: %d before a close frame, %d lost when it was cut", ws.unanswered, ws.lost)
	}
	lines = append(lines, msgs)
	for _, s := range ws.sample {
		lines = append(lines, "    WebSocket: "+s)
	}
	for _, s := range ws.abnormal {
		lines = append(lines, "    WebSocket ended without a close frame: "+s)
	}
	return ws.errs, clean, ends, lines
}

// closeFrame reports whether code is a close frame's that ends a
// WebSocket as it should end at a server's stop: going away, or done.
func closeFrame(code int) bool {
	return code == websocket.CloseGoingAway || code == websocket.CloseNormalClosure
}

// closeName is what a close code means (RFC 6455, section 7.4.1).
func closeName(code int) string {
	switch code {
	case websocket.CloseNormalClosure:
		return "normal closure"
	case websocket.CloseGoingAway:
		return "going away"
	case websocket.CloseProtocolError:
		return "protocol error"
	case websocket.CloseNoStatusReceived:
		return "no status"
	case websocket.CloseAbnormalClosure:
		return "abnormal closure"
	case websocket.CloseInternalServerErr:
		return "internal error"
	case websocket.CloseServiceRestart:
		return "service restart"
	case websocket.CloseTryAgainLater:
		return "try again later"
	}
	return "close code"
}

// wsMessage is message i of client id on one WebSocket.
func wsMessage(id, i int) []byte { return fmt.Appendf(nil, "client %d, message %d", id, i) }
