package echo

import (
	"net/http"
	"sync"

	"github.com/gorilla/websocket"
)

// WebSockets upgrades each request to a WebSocket and sends back each of
// its messages until the client (the proxy) closes or leaves. The zero
// value is ready. Close ends those still open and waits for their
// handlers: http.Server's Close and Shutdown leave hijacked connections
// alone.
//
// conns, closed and wg's Add are guarded by mu.
type WebSockets struct {
	upgrader websocket.Upgrader

	mu     sync.Mutex
	conns  map[*websocket.Conn]bool
	closed bool
	wg     sync.WaitGroup // handlers; Add under mu while not closed
}

// ServeHTTP upgrades r and echoes its messages.
func (o *WebSockets) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c, err := o.upgrader.Upgrade(w, r, nil)
	if err != nil {
		return // Upgrade has answered
	}
	o.mu.Lock()
	if o.closed {
		o.mu.Unlock()
		c.Close()
		return
	}
	if o.conns == nil {
		o.conns = map[*websocket.Conn]bool{}
	}
	o.conns[c] = true
	o.wg.Add(1)
	o.mu.Unlock()
	defer func() {
		o.mu.Lock()
		delete(o.conns, c)
		o.mu.Unlock()
		c.Close()
		o.wg.Done()
	}()
	for {
		typ, msg, err := c.ReadMessage()
		if err != nil {
			return // a close frame (answered by gorilla), or the end
		}
		if err := c.WriteMessage(typ, msg); err != nil {
			return
		}
	}
}

// Close closes the WebSockets open and waits for their handlers; it
// refuses those upgraded afterwards.
func (o *WebSockets) Close() {
	o.mu.Lock()
	o.closed = true
	for c := range o.conns {
		c.Close()
	}
	o.mu.Unlock()
	o.wg.Wait()
}
