package forward_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/propagation"

	"github.com/ebb-proxy/ebb/drain"
	"github.com/ebb-proxy/ebb/proxy/access"
	"github.com/ebb-proxy/ebb/proxy/cluster"
	"github.com/ebb-proxy/ebb/proxy/forward"
	"github.com/ebb-proxy/ebb/proxy/internal/enginetest"
	"github.com/ebb-proxy/ebb/proxy/proxytest"
	"github.com/ebb-proxy/ebb/proxy/route"
	"github.com/ebb-proxy/ebb/proxy/tracing"
	"github.com/ebb-proxy/ebb/proxy/upstream"
)

// call is a Call that records what the skeleton asks of it.
type call struct {
	ctx     context.Context
	sent    int
	replied int
	trip    cluster.Trip
}

func (c *call) Refuse() (int, string)              { return 0, "" }
func (c *call) Prepare(*route.Route) (int, string) { return 0, "" }
func (c *call) Send(*route.Route, *cluster.Endpoint) (int, *cluster.Endpoint, error) {
	c.sent++
	return 200, nil, nil
}
func (c *call) Reply(int, string)        { c.replied++ }
func (c *call) Body() *upstream.Body     { return nil }
func (c *call) Context() context.Context { return c.ctx }
func (c *call) Trip() *cluster.Trip      { return &c.trip }
func (c *call) Traced() (tracing.Carrier, tracing.Request) {
	return propagation.MapCarrier{}, tracing.Request{Method: []byte("GET")}
}
func (c *call) Finish(_ int, e *access.Entry) {
	if e != nil {
		e.End(time.Now())
	}
}

// TestForwardClientGone: a request whose client has left by the time it
// is to be forwarded (an HTTP/2 stream reset before its handler got that
// far, many times a second in a rapid-reset flood) sends nothing
// upstream and is recorded 499; one whose client is there is sent once.
func TestForwardClientGone(t *testing.T) {
	e := enginetest.New(t, nil, proxytest.RefusedAddr(t))
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name   string
		ctx    context.Context
		status int
		sent   int
	}{
		{"client gone", gone, forward.StatusClientClosed, 0},
		{"client there", context.Background(), 200, 1},
	} {
		c := &call{ctx: tc.ctx}
		_, status := forward.Serve(e.Listener, c, drain.ProtoHTTP2, "example.com", "/", time.Now())
		if status != tc.status || c.sent != tc.sent || c.replied != 0 {
			t.Errorf("%s: status %d, sent %d, replies %d; want %d, %d, 0", tc.name, status, c.sent, c.replied, tc.status, tc.sent)
		}
	}
}
