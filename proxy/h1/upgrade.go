package h1

import (
	"bufio"
	"net"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/ebb-proxy/ebb/proxy/access"
	"github.com/ebb-proxy/ebb/proxy/cluster"
	"github.com/ebb-proxy/ebb/proxy/headers"
	"github.com/ebb-proxy/ebb/proxy/route"
	"github.com/ebb-proxy/ebb/proxy/tracing"
	"github.com/ebb-proxy/ebb/proxy/upstream"
)

// isWebSocket reports whether a request's Upgrade field asks for
// WebSocket alone, the one upgrade ebb relays: one line, one token,
// "websocket" (RFC 6455 §4.1). Any other offer, alone or in a list with
// websocket ("h2c, websocket"), is dropped with Upgrade, Connection and
// HTTP2-Settings as the hop-by-hop fields they are, and the request is
// served as HTTP/1.1, which RFC 9110 §7.8 allows: in a list, ebb could
// not tell which protocol an origin switched to, and an h2c tunnel would
// carry requests past ebb's routing.
func isWebSocket(h *fasthttp.RequestHeader) bool { return upstream.WebSocketOnly(h.All()) }

// sendUpgrade forwards a request asking for a WebSocket upgrade, on a
// connection of its own. On 101 the client connection is hijacked and
// its frames relayed both ways (wsTunnel) until either side closes; the
// connection is then a WebSocket tunnel in the registry, which the drain
// tells to go away with a close frame (downstream.Conn.Tunnel). Any other
// answer is relayed as an ordinary response, its body streamed from that
// connection, which closes after it.
func (c *call) sendUpgrade(rt *route.Route, ep *cluster.Endpoint) (_ int, _ *cluster.Endpoint, err error) {
	ctx, conn := c.ctx, c.conn
	req := &ctx.Request
	c.trip.Attempts = 1
	if tr := c.trip.Tracer; tr != nil {
		span := tr.StartAttempt(c.trip.Ctx, headers.FastCarrier{H: &req.Header}, tracing.Method(req.Header.Method()), rt.Cluster.Name(), ep.Addr(), 1)
		defer func() { tracing.EndAttempt(span, ctx.Response.StatusCode(), upgradeFailure(err)) }()
	}
	up, err := rt.Cluster.Dial(ep)
	if err != nil {
		return 0, ep, &upstream.Error{Kind: upstream.KindConnect, Err: err}
	}
	bw := bufio.NewWriter(up)
	if err := req.Write(bw); err == nil {
		err = bw.Flush()
	}
	if err != nil {
		up.Close()
		return 0, ep, &upstream.Error{Kind: upstream.KindBroken, Err: err}
	}
	timeout := rt.Cluster.Config().Timeouts.Response
	up.SetReadDeadline(time.Now().Add(timeout))
	br := bufio.NewReaderSize(up, upstream.ReadBufferSize)
	resp := &ctx.Response
	via := c.s.l.Table().Via11
	if _, err := upstream.ReadResponseHeader(resp, br, nil); err != nil {
		up.Close()
		kind := upstream.KindBroken
		if upstream.IsTimeout(err) {
			kind = upstream.KindTimeout
		}
		return 0, ep, &upstream.Error{Kind: kind, Err: err}
	}
	if resp.StatusCode() != fasthttp.StatusSwitchingProtocols {
		headers.FastResponse(&resp.Header, false, via)
		cl := resp.Header.ContentLength()
		if req.Header.IsHead() || cl == 0 || resp.StatusCode() == fasthttp.StatusNoContent || resp.StatusCode() == fasthttp.StatusNotModified {
			up.Close()
			return resp.StatusCode(), ep, nil
		}
		body := &closingBody{conn: up, timeout: timeout}
		body.up.Header.SetContentLength(cl)
		body.up.StreamBody = true
		if err := body.up.ReadBody(br, 0); err != nil {
			up.Close()
			return 0, ep, &upstream.Error{Kind: upstream.KindBroken, Err: err}
		}
		resp.SetBodyStream(body, max(cl, -1))
		return resp.StatusCode(), ep, nil
	}
	if !upstream.SwitchedToWebSocket(&resp.Header) {
		up.Close()
		return 0, ep, &upstream.Error{Kind: upstream.KindInvalid, Err: upstream.ErrNotWebSocket}
	}
	up.SetReadDeadline(time.Time{})
	headers.FastResponse(&resp.Header, true, via)
	head := append([]byte(nil), resp.Header.Header()...)
	tun := &tunnel{}
	c.tun = tun
	stats := &c.s.l.Registry.Stats
	ctx.HijackSetNoResponse(true)
	ctx.Hijack(func(down net.Conn) {
		if _, err := down.Write(head); err != nil {
			up.Close()
			tun.end(0, 0)
			return
		}
		ws := newTunnel(down, conn, up, br, stats)
		if conn != nil {
			conn.Tunnel(ws.ask)
		}
		tun.end(ws.run())
	})
	return fasthttp.StatusSwitchingProtocols, ep, nil
}

// upgradeFailure names an upgrade's failure for its client span ("": none).
func upgradeFailure(err error) string {
	if err == nil {
		return ""
	}
	return upstream.KindOf(err).ErrorKind()
}

// tunnel is an upgraded connection's relay, as the request's handler
// leaves it: entry is the access log entry (nil: the log is off) that the
// relay's end completes. The handler sets entry before it returns, and
// so before the relay starts.
type tunnel struct {
	entry *access.Entry
}

// end completes the entry with the bytes relayed each way.
func (t *tunnel) end(up, down int64) {
	if e := t.entry; e != nil {
		e.RequestBytes += up
		e.ResponseBytes = down
		e.End(time.Now())
	}
}

// closingBody streams a response body read from a connection of its own,
// and closes that connection when done. Each read has timeouts.response.
type closingBody struct {
	up      fasthttp.Response // holds fasthttp's body decoder
	conn    net.Conn
	timeout time.Duration
	// n counts the bytes read, for watch (nil: none).
	n     int64
	watch upstream.BodyWatcher
}

// Watch implements upstream.WatchedBody.
func (b *closingBody) Watch(w upstream.BodyWatcher) { b.watch = w }

func (b *closingBody) Read(p []byte) (int, error) {
	if err := b.conn.SetReadDeadline(time.Now().Add(b.timeout)); err != nil {
		return 0, err
	}
	n, err := b.up.BodyStream().Read(p)
	b.n += int64(n)
	return n, err
}

func (b *closingBody) Close() error {
	b.conn.Close()
	if b.watch != nil {
		b.watch.BodyRelayed(b.n)
		b.watch = nil
	}
	return b.up.CloseBodyStream()
}
