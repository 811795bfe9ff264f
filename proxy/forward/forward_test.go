package forward_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.opentelemetry.io/otel/propagation"

	"github.com/ebb-proxy/ebb/proxy/access"
	"github.com/ebb-proxy/ebb/proxy/cluster"
	"github.com/ebb-proxy/ebb/proxy/downstream"
	"github.com/ebb-proxy/ebb/proxy/forward"
	"github.com/ebb-proxy/ebb/proxy/internal/enginetest"
	"github.com/ebb-proxy/ebb/proxy/paths"
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
	msg     string   // the last reply's
	paths   []string // what SetPath was called with
	trip    cluster.Trip
}

func (c *call) Refuse() (int, string)              { return 0, "" }
func (c *call) SetPath(p []byte)                   { c.paths = append(c.paths, string(p)) }
func (c *call) Prepare(*route.Route) (int, string) { return 0, "" }
func (c *call) Send(*route.Route, *cluster.Endpoint) (int, *cluster.Endpoint, error) {
	c.sent++
	return 200, nil, nil
}
func (c *call) Reply(_ int, msg string)  { c.replied++; c.msg = msg }
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
		_, status := forward.Serve(e.Listener, c, downstream.ProtoHTTP2, "example.com", "/", time.Now())
		if status != tc.status || c.sent != tc.sent || c.replied != 0 {
			t.Errorf("%s: status %d, sent %d, replies %d; want %d, %d, 0", tc.name, status, c.sent, c.replied, tc.status, tc.sent)
		}
	}
}

// TestServePaths: the listener's paths block rewrites the path before
// routing, and the engine is told (SetPath) only when the path changed;
// a path it refuses is answered 400 and sent nowhere. All off, nothing is
// rewritten.
func TestServePaths(t *testing.T) {
	e := enginetest.New(t, nil, proxytest.RefusedAddr(t))
	setPaths := func(o paths.Options) { e.SetTable(func(t *route.Table) { t.Paths = o }) }
	all := paths.Options{Normalize: true, MergeSlashes: true, EscapedSlashes: paths.RejectEscaped}
	for _, tc := range []struct {
		name   string
		o      paths.Options
		path   string
		status int
		msg    string
		set    []string
	}{
		{"off", paths.Options{}, "/public/../admin", 200, "", nil},
		{"unchanged", all, "/admin", 200, "", nil},
		{"dot-dot", all, "/public/../admin", 200, "", []string{"/admin"}},
		{"merged", all, "/a//b", 200, "", []string{"/a/b"}},
		{"escaped slash", all, "/public%2F..%2Fadmin", 400, forward.MsgEscapedSlash, nil},
		{"invalid encoding", all, "/a%zz", 400, forward.MsgBadPath, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			setPaths(tc.o)
			c := &call{ctx: context.Background()}
			_, status := forward.Serve(e.Listener, c, downstream.ProtoHTTP1, []byte("example.com"), []byte(tc.path), time.Now())
			wantSent := 1
			if tc.status != 200 {
				wantSent = 0
			}
			if status != tc.status || c.msg != tc.msg || c.sent != wantSent || fmt.Sprint(c.paths) != fmt.Sprint(tc.set) {
				t.Errorf("%q: status %d %q, sent %d, SetPath %q; want %d %q, sent %d, SetPath %q",
					tc.path, status, c.msg, c.sent, c.paths, tc.status, tc.msg, wantSent, tc.set)
			}
		})
	}
}
