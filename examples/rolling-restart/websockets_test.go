package main

import (
	"errors"
	"strings"
	"testing"

	"github.com/gorilla/websocket"
)

// TestWSReport: the WebSockets' ends are counted by the close code
// received, a connection that ended without a close frame as 1006; only
// close frames saying going away or normal closure, with every client
// reconnected, are clean; messages left without an echo are errors only
// when the WebSocket was cut.
func TestWSReport(t *testing.T) {
	ws := &wsLoad{clients: 2, ends: map[int]int{}}
	goingAway := &websocket.CloseError{Code: websocket.CloseGoingAway, Text: "ebb: draining"}
	ws.live = 3
	ws.ended(wsEnd{goingAway, 10}, 11)
	ws.ended(wsEnd{goingAway, 4}, 4)
	ws.reconnects, ws.reconnected = 2, 2
	errs, clean, ends, lines := ws.Report()
	if errs != 0 || !clean || ends != "websockets: 2 ended: 2 × 1001 going away, reconnected 2/2" {
		t.Errorf("after two 1001s: %d errors, clean %v, %q", errs, clean, ends)
	}
	if !strings.Contains(lines[0], "1 before a close frame, 0 lost") {
		t.Errorf("messages line %q: want the one unanswered at the close frame", lines[0])
	}

	ws.ended(wsEnd{errors.New("read: connection reset by peer"), 7}, 9)
	ws.reconnects++
	errs, clean, ends, lines = ws.Report()
	if errs != 2 || clean || ends != "websockets: 3 ended: 2 × 1001 going away, 1 × 1006 abnormal closure, reconnected 2/3" {
		t.Errorf("after a reset: %d errors, clean %v, %q", errs, clean, ends)
	}
	if !strings.Contains(strings.Join(lines, "\n"), "ended without a close frame: ") {
		t.Errorf("lines %q: want the end without a close frame shown", lines)
	}
}
