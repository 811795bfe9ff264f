package proxy

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/ebb-proxy/ebb/proxy/proxytest"
)

// An HTTP/2 upstream that turns on ebb (proxytest.HostileH2C) must cost
// ebb no more than the request it was sent: the client of that request
// gets its answer in a bounded time, the clients of other clusters are
// served meanwhile, and what the upstream floods ebb with is not held: ebb
// closes the connection before the upstream has written more than a
// bound. The tests play the upstream and look at ebb from its clients'
// side and the upstream's, whatever HTTP/2 client ebb uses upstream.

const (
	// hostileResponse is the hostile cluster's timeouts.response.
	hostileResponse = 2 * time.Second
	// floodFor is how long an attack floods before it gives up: past
	// the response timeout, so that a flood outlasts the request.
	floodFor = hostileResponse + 500*time.Millisecond
	// hostileGuard bounds every wait of these tests: the hostile
	// request's answer, the attack's end, the other clients' answers.
	hostileGuard = floodFor + time.Second
	// floodLimit is what an attack writes at most: far more than ebb
	// needs to read to see the attack for what it is, and than the
	// socket buffers between the two hold (on Linux, up to a few MiB
	// each way: the acknowledgements of a flood of PINGs fill ebb's send
	// buffer before any queue of ebb's own grows).
	floodLimit = 64 << 20
)

// hostileYAML is ebb with one listener, "public", whose requests under
// /healthy/ go to cluster healthy and all others to cluster hostile (one
// try each, so that a request meets the hostile upstream once).
func hostileYAML(hostile, healthy string) string {
	return fmt.Sprintf(`
admin: { address: 127.0.0.1:0 }
listeners:
  - name: public
    address: 127.0.0.1:0
    routes:
      - match: { path_prefix: "/healthy/" }
        cluster: healthy
      - match: { path_prefix: "/" }
        cluster: hostile
clusters:
  - name: hostile
    protocol: h2c
    discovery: { static: [%q] }
    timeouts: { connect: 1s, response: %s }
    retries: { attempts: 1 }
  - name: healthy
    protocol: h2c
    discovery: { static: [%q] }
`, hostile, hostileResponse, healthy)
}

// hostileCase is one way an upstream turns on ebb.
type hostileCase struct {
	name string
	// settings are the upstream's SETTINGS; attack is what it does once
	// the request's HEADERS has come, returning what ebb did wrong ("":
	// nothing).
	settings []http2.Setting
	attack   func(c *proxytest.HostileConn) string
	// raw, instead, is an upstream that speaks no HTTP/2 at all: it is
	// handed each connection as it is accepted.
	raw func(c net.Conn) string
	// request is the client's, raw HTTP/1.1 (default: a GET of /).
	request string
	// want is the statuses the client may get; body, if set, the body.
	want []int
	body string
	// cut: the response has begun (want 200) and its body must end
	// short, with an error, once the attack is over.
	cut bool
}

// TestHostileH2Origin plays, for each hostileCase, the upstream of an h2c
// cluster that turns on ebb once a request has come.
func TestHostileH2Origin(t *testing.T) {
	for _, tc := range hostileCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			runHostile(t, tc)
		})
	}
}

var hostileCases = []hostileCase{
	// The floods of frames that each ask for an answer, which the
	// upstream does not read: ebb must close the connection rather than
	// queue the answers (ENHANCE_YOUR_CALM or not). Answering each one
	// with a blocking write also bounds what ebb holds, but has it read
	// the flood for as long as the upstream pleases.
	{
		// CVE-2019-9515: each SETTINGS asks for an acknowledgement.
		name: "settings-flood",
		attack: func(c *proxytest.HostileConn) string {
			return mustCut(proxytest.Flood(c.Conn, proxytest.Frames(proxytest.FloodChunk, func(fr *http2.Framer) error {
				return fr.WriteSettings()
			}), floodLimit, floodFor))
		},
		want: []int{http.StatusBadGateway, http.StatusGatewayTimeout},
	},
	{
		// CVE-2019-9512: each PING asks for its PING ACK.
		name: "ping-flood",
		attack: func(c *proxytest.HostileConn) string {
			return mustCut(proxytest.Flood(c.Conn, proxytest.Frames(proxytest.FloodChunk, func(fr *http2.Framer) error {
				return fr.WritePing(false, [8]byte{'f', 'l', 'o', 'o', 'd'})
			}), floodLimit, floodFor))
		},
		want: []int{http.StatusBadGateway, http.StatusGatewayTimeout},
	},
	{
		// RST_STREAM on streams ebb never opened: the even ones (a server
		// opens those, with PUSH_PROMISE, which ebb does not allow) and
		// odd ones far above ebb's. RFC 9113 §6.4 makes each a connection
		// error (PROTOCOL_ERROR): the first one ends the connection.
		name: "rst-flood-idle-streams",
		attack: func(c *proxytest.HostileConn) string {
			var i uint32
			return mustCut(proxytest.Flood(c.Conn, proxytest.Frames(proxytest.FloodChunk, func(fr *http2.Framer) error {
				i++
				id := 2 * i
				if i%2 == 1 {
					id = 1<<30 + 2*i + 1
				}
				return fr.WriteRSTStream(id, http2.ErrCodeCancel)
			}), floodLimit, floodFor))
		},
		want: []int{http.StatusBadGateway, http.StatusGatewayTimeout},
	},
	{
		// A stream that ebb closed, reset again and again: RFC 9113 §5.1
		// lets such frames arrive after the stream's end (ebb may ignore
		// them, or end the connection). The request's stream is reset
		// first (CANCEL), so its client gets a 502 at once; then ebb
		// either closes the connection or reads the whole flood and
		// still answers a PING on it.
		name: "rst-flood-closed-stream",
		attack: func(c *proxytest.HostileConn) string {
			if err := c.Fr.WriteRSTStream(c.Stream, http2.ErrCodeCancel); err != nil {
				return fmt.Sprintf("resetting the request's stream: %v", err)
			}
			r := proxytest.Flood(c.Conn, proxytest.Frames(proxytest.FloodChunk, func(fr *http2.Framer) error {
				return fr.WriteRSTStream(c.Stream, http2.ErrCodeCancel)
			}), 1<<20, floodFor)
			switch {
			case r.Cut:
				return ""
			case r.Err != nil:
				return "the flood of RST_STREAM on a closed stream: " + r.String()
			}
			if err := c.Fr.WritePing(false, [8]byte{'a', 'f', 't', 'e', 'r'}); err != nil {
				return ""
			}
			f, ended := c.Await(hostileGuard, func(f http2.Frame) bool {
				p, ok := f.(*http2.PingFrame)
				return ok && p.IsAck()
			})
			if f == nil && !ended {
				return fmt.Sprintf("after a flood of RST_STREAM on a closed stream (%s), ebb neither answered a PING nor closed the connection within %v", r, hostileGuard)
			}
			return ""
		},
		want: []int{http.StatusBadGateway},
	},
	{
		// The upstream never opens a window for the request's body:
		// SETTINGS_INITIAL_WINDOW_SIZE 0, and no WINDOW_UPDATE. Until ebb
		// has read those SETTINGS it may use the default window, but
		// never more than the connection's, 65,535 bytes, which no
		// SETTINGS changes (RFC 9113 §6.9.2); the body is larger.
		name:     "window-never-opened",
		settings: []http2.Setting{{ID: http2.SettingInitialWindowSize, Val: 0}},
		request:  "POST /upload HTTP/1.1\r\nHost: a\r\nContent-Length: 102400\r\n\r\n" + strings.Repeat("b", 102400),
		attack: func(c *proxytest.HostileConn) string {
			data := 0
			f, ended := c.Await(hostileGuard, func(f http2.Frame) bool {
				if d, ok := f.(*http2.DataFrame); ok && d.StreamID == c.Stream {
					data += len(d.Data())
				}
				return c.Ended(f)
			})
			switch {
			case data > 65535:
				return fmt.Sprintf("ebb sent %d bytes of DATA, more than the connection's window of 65535, which the upstream never opened", data)
			case f == nil && !ended:
				return fmt.Sprintf("ebb neither reset the stream nor closed the connection within %v of a request whose body could not be sent", hostileGuard)
			}
			return ""
		},
		want: []int{http.StatusBadGateway, http.StatusGatewayTimeout},
	},
	{
		// A response header block that never ends, growing: CONTINUATION
		// frames of fields (CVE-2024-27316).
		name: "continuation-flood",
		attack: func(c *proxytest.HostileConn) string {
			if err := c.Fr.WriteHeaders(http2.HeadersFrameParam{StreamID: c.Stream, BlockFragment: c.Block([][2]string{{":status", "200"}})}); err != nil {
				return ""
			}
			junk := proxytest.JunkFields(15000)
			return mustCut(proxytest.Flood(c.Conn, proxytest.Frames(proxytest.FloodChunk, func(fr *http2.Framer) error {
				return fr.WriteContinuation(c.Stream, false, junk)
			}), floodLimit, floodFor))
		},
		want: []int{http.StatusBadGateway, http.StatusGatewayTimeout},
	},
	{
		// A response header block that never ends, of empty CONTINUATION
		// frames: it never grows, it only never ends.
		name: "continuation-empty-flood",
		attack: func(c *proxytest.HostileConn) string {
			if err := c.Fr.WriteHeaders(http2.HeadersFrameParam{StreamID: c.Stream, BlockFragment: c.Block([][2]string{{":status", "200"}})}); err != nil {
				return ""
			}
			return mustCut(proxytest.Flood(c.Conn, proxytest.Frames(proxytest.FloodChunk, func(fr *http2.Framer) error {
				return fr.WriteContinuation(c.Stream, false, nil)
			}), floodLimit, floodFor))
		},
		want: []int{http.StatusBadGateway, http.StatusGatewayTimeout},
	},
	{
		// A response header block that ends, after 1 MiB of fields: the
		// response is refused (502), and ebb resets the stream or closes
		// the connection.
		name: "header-list-1MiB",
		attack: func(c *proxytest.HostileConn) string {
			var b bytes.Buffer
			fr := http2.NewFramer(&b, nil)
			junk := proxytest.JunkFields(15000)
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: c.Stream, BlockFragment: c.Block([][2]string{{":status", "200"}}), EndStream: true})
			for b.Len() < 1<<20 {
				fr.WriteContinuation(c.Stream, false, junk)
			}
			fr.WriteContinuation(c.Stream, true, junk)
			c.Conn.SetWriteDeadline(time.Now().Add(floodFor))
			if _, err := c.Conn.Write(b.Bytes()); err != nil {
				return "" // ebb closed the connection
			}
			if f, ended := c.Await(hostileGuard, c.Ended); f == nil && !ended {
				return fmt.Sprintf("ebb neither reset the stream nor closed the connection within %v of a 1 MiB header block", hostileGuard)
			}
			return ""
		},
		want: []int{http.StatusBadGateway},
	},
	{
		// The response's body, sent with no regard for the window ebb
		// advertised: its client reads none of it, so ebb's window
		// closes; what the upstream sends past it breaks flow control
		// (RFC 9113 §6.9.1), and ebb ends the connection.
		name: "data-beyond-window",
		attack: func(c *proxytest.HostileConn) string {
			if err := c.Fr.WriteHeaders(http2.HeadersFrameParam{StreamID: c.Stream, BlockFragment: c.Block([][2]string{{":status", "200"}}), EndHeaders: true}); err != nil {
				return fmt.Sprintf("writing the response's HEADERS: %v", err)
			}
			piece := bytes.Repeat([]byte("d"), 16<<10)
			return mustCut(proxytest.Flood(c.Conn, proxytest.Frames(proxytest.FloodChunk, func(fr *http2.Framer) error {
				return fr.WriteData(c.Stream, false, piece)
			}), floodLimit, floodFor))
		},
		want: []int{http.StatusOK},
		cut:  true,
	},
	{
		// GOAWAY after GOAWAY, each with 1000 bytes of debug data, the
		// last stream id going down to the request's stream and then
		// staying there: each one is legal (RFC 9113 §6.8), and the
		// request, which each keeps, is answered at the end.
		name: "goaway-storm",
		attack: func(c *proxytest.HostileConn) string {
			debug := bytes.Repeat([]byte("g"), 1000)
			const n = 4096
			var b bytes.Buffer
			fr := http2.NewFramer(&b, nil)
			step := (1<<31 - 1 - c.Stream) / n
			for i := range uint32(n) {
				fr.WriteGoAway(1<<31-1-i*step, http2.ErrCodeNo, debug)
			}
			for range n {
				fr.WriteGoAway(c.Stream, http2.ErrCodeNo, debug)
			}
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: c.Stream, BlockFragment: c.Block([][2]string{{":status", "200"}, {"content-length", "8"}}), EndHeaders: true})
			fr.WriteData(c.Stream, true, []byte("survived"))
			c.Conn.SetWriteDeadline(time.Now().Add(floodFor))
			if _, err := c.Conn.Write(b.Bytes()); err != nil {
				return fmt.Sprintf("ebb closed the connection under %d GOAWAY frames that each kept the request's stream: %v", 2*n, err)
			}
			closeGracefully(c.Conn, c.Reader)
			return ""
		},
		want: []int{http.StatusOK},
		body: "survived",
	},
	{
		// An HTTP/1.1 server's answer where the SETTINGS should be, its
		// body endless.
		name: "not-http2-response",
		raw: func(c net.Conn) string {
			if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n"); err != nil {
				return ""
			}
			return mustCut(proxytest.Flood(c, bytes.Repeat([]byte("hello\n"), proxytest.FloodChunk/6), floodLimit, floodFor))
		},
		want: []int{http.StatusBadGateway},
	},
	{
		// Endless bytes that mean nothing.
		name: "not-http2-garbage",
		raw: func(c net.Conn) string {
			return mustCut(proxytest.Flood(c, proxytest.RandBytes(38, proxytest.FloodChunk), floodLimit, floodFor))
		},
		want: []int{http.StatusBadGateway},
	},
}

// mustCut is the verdict on a flood that ebb must end by closing the
// connection before the upstream has written all it would.
func mustCut(r proxytest.FloodResult) string {
	if r.Cut {
		return ""
	}
	return "ebb did not close the connection under the flood: " + r.String()
}

// closeGracefully ends an upstream connection as a server does once it
// has written its last frame: its side closed first, then what the client
// still sends read until it closes. Closing with bytes unread would send
// a reset, which can destroy the last frames before the client reads
// them.
func closeGracefully(c net.Conn, br *bufio.Reader) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
	c.SetReadDeadline(time.Now().Add(hostileGuard))
	io.Copy(io.Discard, br)
}

// runHostile runs one hostileCase: a client sends its request to the
// hostile cluster; while the upstream attacks, clients of the healthy
// cluster are served; the request's client gets one of the statuses the
// case allows within hostileGuard; the upstream's verdict on what ebb did
// is empty; and the healthy cluster is still served after.
func runHostile(t *testing.T, tc hostileCase) {
	verdicts := make(chan string, 8)
	attacking := make(chan struct{})
	var once sync.Once
	began := func() { once.Do(func() { close(attacking) }) }
	var origin string
	if tc.raw != nil {
		origin = proxytest.HostileOrigin(t, func(c net.Conn, _ *bufio.Reader) {
			began()
			verdicts <- tc.raw(c)
		})
	} else {
		origin = proxytest.HostileH2C(t, tc.settings, func(c *proxytest.HostileConn) {
			began()
			verdicts <- tc.attack(c)
		})
	}
	healthy := proxytest.H2CServer(t, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "healthy")
	}))
	e := startEbb(t, hostileYAML(origin, healthy))
	clients := []*http.Client{newClient(t), proxytest.ModeClient(t, proxytest.Mode{Down: proxytest.DownH2C}, nil)}

	request := tc.request
	if request == "" {
		request = "GET / HTTP/1.1\r\nHost: a\r\n\r\n"
	}
	type answer struct {
		resp *http.Response
		err  error
	}
	answered := make(chan answer, 1)
	c := rawConn(t, e.addr("public"))
	c.SetDeadline(time.Now().Add(hostileGuard))
	var client sync.WaitGroup
	defer client.Wait()
	defer c.Close() // before the wait: ends a read still blocked
	// The request is written on a goroutine of its own: ebb may answer
	// before it has read a body the upstream would not take.
	client.Go(func() { io.WriteString(c, request) })
	client.Go(func() {
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		answered <- answer{resp, err}
	})

	within(t, attacking, hostileGuard, "the upstream to receive the request")
	checkHealthy(t, e, clients, "while the upstream attacks")
	a := within(t, answered, hostileGuard, "the hostile request's answer")
	switch {
	case a.err != nil:
		t.Errorf("the hostile request got no answer: %v", a.err)
	case !slices.Contains(tc.want, a.resp.StatusCode):
		t.Errorf("the hostile request got %d, want one of %v", a.resp.StatusCode, tc.want)
	case !tc.cut:
		body, err := io.ReadAll(a.resp.Body)
		if err != nil {
			t.Errorf("reading the hostile request's body: %v", err)
		} else if tc.body != "" && string(body) != tc.body {
			t.Errorf("the hostile request got the body %q, want %q", body, tc.body)
		}
	}
	if v := within(t, verdicts, hostileGuard, "the attack's end"); v != "" {
		t.Error(v)
	}
	if tc.cut && a.err == nil {
		if n, err := io.Copy(io.Discard, a.resp.Body); err == nil {
			t.Errorf("the hostile response's body ended cleanly after %d bytes, want it cut", n)
		}
	}
	checkHealthy(t, e, clients, "after the attack")
}

// checkHealthy has each client get /healthy/ from ebb's healthy cluster,
// within hostileGuard.
func checkHealthy(t *testing.T, e *inproc, clients []*http.Client, when string) {
	t.Helper()
	for i, c := range clients {
		ctx, cancel := context.WithTimeout(t.Context(), hostileGuard)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.url("public", "/healthy/"), nil)
		if err != nil {
			t.Fatal(err)
		}
		code, body, err := exchangeWith(c, req)
		cancel()
		if err != nil || code != http.StatusOK || body != "healthy" {
			t.Errorf("%s, client %d of the healthy cluster got %d %q (%v), want 200 \"healthy\"", when, i, code, body, err)
		}
	}
}

// exchangeWith sends req with c and reads the whole response.
func exchangeWith(c *http.Client, req *http.Request) (int, string, error) {
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// within waits up to d for a value on ch.
func within[T any](t *testing.T, ch <-chan T, d time.Duration, what string) T {
	t.Helper()
	timeout, stop := after(d)
	defer stop()
	select {
	case v := <-ch:
		return v
	case <-timeout:
		t.Fatalf("timed out after %v waiting for %s", d, what)
	}
	panic("unreachable")
}
