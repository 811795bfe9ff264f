// Package pace holds a client's request body to a minimum rate while ebb
// waits for it (listeners[].limits.min_body_rate), both engines alike.
package pace

import "time"

// Budget is the pace of one request body. Only the time
// spent waiting for the client counts, not the time the upstream takes
// to accept what was read: a client is not blamed for a slow upstream.
//
// It is a time budget. Each wait spends what it lasts; each byte that
// arrives earns back the time it is worth at the minimum rate. The budget
// starts at, and never exceeds, the slack (timeouts.header): a body may
// fall behind the rate by that much, and a client that sends nothing is
// cut after that long, as without a rate. Capping the credit keeps a
// client from sending fast first to trickle for long after. With no rate,
// each byte restores the whole slack: only silence is bounded.
//
// The zero Budget is none: Left is 0, and Timed false.
type Budget struct {
	perByte time.Duration // the time one byte earns; 0: no rate
	slack   time.Duration
	left    time.Duration
}

// New returns the budget of a body held to rate bytes per second (0:
// none) with slack.
func New(rate int64, slack time.Duration) Budget {
	p := Budget{slack: slack, left: slack}
	if rate > 0 {
		// A rate above a gigabyte a second earns nothing per byte at
		// nanosecond grain: it is one byte a nanosecond.
		p.perByte = max(time.Second/time.Duration(min(rate, int64(time.Second))), 1)
	}
	return p
}

// Timed reports whether the budget bounds anything (a slack was set).
func (p *Budget) Timed() bool { return p.slack > 0 }

// Left returns how long the next wait for body bytes may last; none
// left (≤ 0) means the body is too slow.
func (p *Budget) Left() time.Duration { return p.left }

// Waited accounts for a wait of d that brought n bytes (a read, or bytes
// that arrived while nothing waited: d = 0).
func (p *Budget) Waited(d time.Duration, n int) {
	if p.perByte == 0 {
		if n > 0 {
			p.left = p.slack
		} else {
			p.left -= d
		}
		return
	}
	earned := p.slack // n bytes are worth at least the whole slack
	if n < int(p.slack/p.perByte) {
		earned = time.Duration(n) * p.perByte
	}
	p.left = min(p.left-d+earned, p.slack)
}

// ErrTooSlow: the client sent its request body slower than
// limits.min_body_rate for longer than timeouts.header. It is a timeout
// (408).
var ErrTooSlow error = slowBody{}

type slowBody struct{}

func (slowBody) Error() string   { return "request body slower than limits.min_body_rate" }
func (slowBody) Timeout() bool   { return true }
func (slowBody) Temporary() bool { return false }
