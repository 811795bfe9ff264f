package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ebb-proxy/ebb/proxy/forward"
	"github.com/ebb-proxy/ebb/proxy/proxytest"
)

// smuggled is a whole response a broken origin writes where ebb expects
// none: if it ever reaches a client, that client got another request's
// answer.
const smuggled = "HTTP/1.1 200 OK\r\nContent-Length: 8\r\nX-Smuggled: yes\r\n\r\nSMUGGLED"

// brokenOrigin is an HTTP/1.1 origin whose first answer on each
// connection is a broken one (answer, then late once the test says so);
// it answers any other request "200 <its path>". It records the paths of
// the requests each connection carried, and reports each connection's
// end.
type brokenOrigin struct {
	addr    string
	answer  string // the first answer of a connection
	late    string // written once release is closed ("": nothing)
	release chan struct{}
	// delivered is closed once late has reached ebb's socket (or could
	// not be written).
	delivered chan struct{}
	ended     chan int // a connection's number, when ebb has closed it
	mu        sync.Mutex
	conns     [][]string // per connection, the paths of its requests
}

func newBrokenOrigin(t *testing.T, answer, late string) *brokenOrigin {
	o := &brokenOrigin{answer: answer, late: late, release: make(chan struct{}), delivered: make(chan struct{}), ended: make(chan int, 16)}
	var once sync.Once
	o.addr = proxytest.Origin(t, func(c net.Conn, br *bufio.Reader) {
		o.mu.Lock()
		n := len(o.conns)
		o.conns = append(o.conns, nil)
		o.mu.Unlock()
		defer func() { o.ended <- n }()
		for first := true; ; first = false {
			req, err := http.ReadRequest(br)
			if err != nil {
				return // ebb closed the connection
			}
			io.Copy(io.Discard, req.Body)
			o.mu.Lock()
			o.conns[n] = append(o.conns[n], req.URL.Path)
			o.mu.Unlock()
			if !first || !strings.HasPrefix(req.URL.Path, "/broken") {
				fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(req.URL.Path), req.URL.Path)
				continue
			}
			io.WriteString(c, o.answer)
			if o.late == "" {
				continue
			}
			select {
			case <-o.release:
			case <-t.Context().Done():
				return
			}
			if _, err := io.WriteString(c, o.late); err == nil {
				waitDelivered(t, c)
			}
			once.Do(func() { close(o.delivered) })
		}
	})
	return o
}

// requests returns the paths each connection carried.
func (o *brokenOrigin) requests() [][]string {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make([][]string, len(o.conns))
	for i, c := range o.conns {
		out[i] = append([]string(nil), c...)
	}
	return out
}

// waitDelivered waits until every byte written on c has been
// acknowledged by the peer's TCP stack, so that it is in ebb's socket,
// where ebb's check of an idle connection sees it (on loopback that is
// as good as at once; the wait makes it certain), or until the peer has
// reset the connection (ebb had closed it).
func waitDelivered(t *testing.T, c net.Conn) {
	t.Helper()
	raw, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	timeout := time.After(proxytest.WaitTimeout)
	for {
		done := true
		raw.Control(func(fd uintptr) {
			info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
			done = err != nil || info.State == unix.BPF_TCP_CLOSE || info.Unacked == 0 && info.Notsent_bytes == 0
		})
		if done {
			return
		}
		select {
		case <-tick.C:
		case <-timeout:
			t.Error("the origin's bytes were never acknowledged")
			return
		}
	}
}

// brokenAnswer is one way an origin breaks the framing of a response,
// and what the client that asked must get for it.
type brokenAnswer struct {
	name   string
	method string // "GET" if empty
	answer string // the origin's answer to the request
	late   string // what the origin writes on the connection afterwards
	// status and body are what the client gets (a 502 is ebb's, with
	// forward.MsgUpstreamInvalid); absent lists fields it must not get.
	status int
	body   string
	absent []string
	// reused: the answer is sound, and its connection carries the next
	// request.
	reused bool
}

var brokenAnswers = []brokenAnswer{
	// RFC 9112 §6.3: no body after a 204, whatever its fields say. The
	// connection is not used again.
	{name: "204 with Content-Length, a response later", answer: "HTTP/1.1 204 No Content\r\nContent-Length: 63\r\n\r\n", late: smuggled,
		status: 204, absent: []string{"Content-Length", "X-Smuggled"}},
	{name: "204 with Content-Length and a body", answer: "HTTP/1.1 204 No Content\r\nContent-Length: 63\r\n\r\n" + smuggled,
		status: 204, absent: []string{"Content-Length", "X-Smuggled"}},
	{name: "204 chunked", answer: "HTTP/1.1 204 No Content\r\nTransfer-Encoding: chunked\r\n\r\n", late: "3c\r\n" + smuggled + "\r\n0\r\n\r\n",
		status: 204, absent: []string{"Content-Length", "Transfer-Encoding", "X-Smuggled"}},
	// A 304 and a HEAD answer may say how long the body would be; a body
	// that comes anyway is found before the connection is used again.
	{name: "304 with a body later", answer: "HTTP/1.1 304 Not Modified\r\nContent-Length: 63\r\n\r\n", late: smuggled,
		status: 304, absent: []string{"X-Smuggled"}},
	{name: "304 with a body", answer: "HTTP/1.1 304 Not Modified\r\nContent-Length: 63\r\n\r\n" + smuggled,
		status: 304, absent: []string{"X-Smuggled"}},
	{name: "HEAD answered with a body later", method: "HEAD", answer: "HTTP/1.1 200 OK\r\nContent-Length: 63\r\n\r\n", late: smuggled,
		status: 200, absent: []string{"X-Smuggled"}},
	{name: "HEAD answered with a body", method: "HEAD", answer: "HTTP/1.1 200 OK\r\nContent-Length: 63\r\n\r\n" + smuggled,
		status: 200, absent: []string{"X-Smuggled"}},
	// Bytes beyond a body whose length is known.
	{name: "bytes beyond Content-Length", answer: "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello" + smuggled,
		status: 200, body: "hello", absent: []string{"X-Smuggled"}},
	{name: "bytes beyond Content-Length, later", answer: "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", late: smuggled,
		status: 200, body: "hello", absent: []string{"X-Smuggled"}},
	{name: "bytes beyond the last chunk", answer: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n" + smuggled,
		status: 200, body: "hello", absent: []string{"X-Smuggled"}},
	{name: "bytes beyond a streamed body", answer: "HTTP/1.1 200 OK\r\nContent-Length: 70000\r\n\r\n" + strings.Repeat("s", 70000) + smuggled,
		status: 200, body: strings.Repeat("s", 70000), absent: []string{"X-Smuggled"}},
	// Conflicting framing is refused, not guessed (RFC 9112 §6.3).
	{name: "Content-Length and chunked", answer: "HTTP/1.1 200 OK\r\nContent-Length: 63\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + smuggled,
		status: 502},
	{name: "chunked and Content-Length", answer: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 0\r\n\r\n3c\r\n" + smuggled + "\r\n0\r\n\r\n",
		status: 502},
	{name: "two Content-Lengths", answer: "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello", status: 502},
	{name: "chunked in HTTP/1.0", answer: "HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: keep-alive\r\n\r\n3c\r\n" + smuggled + "\r\n0\r\n\r\n",
		status: 502},
	// A switch of protocols nobody asked for (RFC 9110 §15.2.2).
	{name: "101 to a GET", answer: "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n" + smuggled,
		status: 502},
	// Fields that are no fields.
	{name: "space in a field name", answer: "HTTP/1.1 200 OK\r\nX Bad: 1\r\nContent-Length: 2\r\n\r\nok", status: 502},
	{name: "Transfer Encoding", answer: "HTTP/1.1 200 OK\r\nTransfer Encoding: chunked\r\nContent-Length: 2\r\n\r\nok", status: 502},
	{name: "separator in a field name", answer: "HTTP/1.1 200 OK\r\nX(Y): 1\r\nContent-Length: 2\r\n\r\nok", status: 502},
	{name: "control in a field value", answer: "HTTP/1.1 200 OK\r\nX-A: a\x01b\r\nContent-Length: 2\r\n\r\nok", status: 502},
	{name: "CR in a field value", answer: "HTTP/1.1 200 OK\r\nX-A: a\rb\r\nContent-Length: 2\r\n\r\nok", status: 502},
	{name: "obs-fold", answer: "HTTP/1.1 200 OK\r\nX-A: a\r\n b\r\nContent-Length: 2\r\n\r\nok", status: 502},
	{name: "bare LF", answer: "HTTP/1.1 200 OK\nContent-Length: 2\n\nok\r\n\r\n", status: 502},
	// No CR LF CR LF to wait for: refused at once, not at timeouts.response.
	{name: "bare LF only", answer: "HTTP/1.1 200 OK\nContent-Length: 2\n\nok", status: 502},
	{name: "bytes before the status line", answer: "\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", status: 502},
	{name: "head over 16 KiB", answer: "HTTP/1.1 200 OK\r\nX-Big: " + strings.Repeat("x", 16<<10) + "\r\nContent-Length: 2\r\n\r\nok", status: 502},
	{name: "HTTP/2.0 status line", answer: "HTTP/2.0 200 OK\r\nContent-Length: 2\r\n\r\nok", status: 502},
	{name: "status 000", answer: "HTTP/1.1 000 Zero\r\nContent-Length: 2\r\n\r\nok", status: 502},
	{name: "status 099", answer: "HTTP/1.1 099 Low\r\nContent-Length: 2\r\n\r\nok", status: 502},
	{name: "status 600", answer: "HTTP/1.1 600 High\r\nContent-Length: 2\r\n\r\nok", status: 502},
	{name: "status of four digits", answer: "HTTP/1.1 2000 OK\r\nContent-Length: 2\r\n\r\nok", status: 502},
	{name: "status without a reason", answer: "HTTP/1.1 200\r\nContent-Length: 2\r\n\r\nok", status: 200, body: "ok", reused: true},
	// What holds: white space before a colon is removed (RFC 9112
	// §5.1), and no Content-Type is added where the origin sent none.
	{name: "space before the colon", answer: "HTTP/1.1 200 OK\r\nX-A : 1\r\nContent-Length: 2\r\n\r\nok", status: 200, body: "ok", absent: []string{"X-A "}, reused: true},
	{name: "no Content-Type", answer: "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", status: 200, body: "ok", absent: []string{"Content-Type"}, reused: true},
	{name: "HEAD answered", method: "HEAD", answer: "HTTP/1.1 200 OK\r\nContent-Length: 63\r\n\r\n", status: 200, reused: true},
	{name: "304 answered", answer: "HTTP/1.1 304 Not Modified\r\nETag: \"a\"\r\nContent-Length: 63\r\n\r\n", status: 304, absent: []string{"Content-Length"}, reused: true},
	{name: "204 answered", answer: "HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n", status: 204, absent: []string{"Content-Length"}, reused: true},
	{name: "chunked with trailers", answer: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nX-T: 1\r\n\r\n", status: 200, body: "hello", reused: true},
	{name: "streamed body", answer: "HTTP/1.1 200 OK\r\nContent-Length: 70000\r\n\r\n" + strings.Repeat("s", 70000), status: 200, body: strings.Repeat("s", 70000), reused: true},
	{name: "streamed chunked body", answer: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n11170\r\n" + strings.Repeat("s", 70000) + "\r\n0\r\n\r\n", status: 200, body: strings.Repeat("s", 70000), reused: true},
}

// TestBrokenOrigin plays an origin that breaks the framing of a response
// (or the rules of its fields), for an HTTP/1.1 and an HTTP/2 client: the
// client that asked gets a clean answer (the response as its framing
// says, or 502), ebb closes the origin's connection, and the next
// request, from another client connection, gets its own response on a
// new one.
func TestBrokenOrigin(t *testing.T) {
	for _, down := range []proxytest.Downstream{proxytest.DownH1, proxytest.DownH2C} {
		for _, tc := range brokenAnswers {
			name := fmt.Sprintf("%s/%s", map[proxytest.Downstream]string{proxytest.DownH1: "h1", proxytest.DownH2C: "h2c"}[down], tc.name)
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				testBrokenOrigin(t, down, tc)
			})
		}
	}
}

func testBrokenOrigin(t *testing.T, down proxytest.Downstream, tc brokenAnswer) {
	o := newBrokenOrigin(t, tc.answer, tc.late)
	e := startEbb(t, singleClusterYAML(o.addr))
	method := tc.method
	if method == "" {
		method = "GET"
	}
	status, header, body := brokenExchange(t, down, e.addr("public"), method, "/broken")
	want := tc.body
	if tc.status == http.StatusBadGateway {
		want = forward.MsgUpstreamInvalid
	}
	if status != tc.status || body != want {
		t.Errorf("the client got %d %q, want %d %q", status, body, tc.status, want)
	}
	for _, f := range tc.absent {
		if v, ok := header[http.CanonicalHeaderKey(f)]; ok {
			t.Errorf("the client got %s: %q", f, v)
		}
	}
	if status == http.StatusSwitchingProtocols {
		t.Fatal("the client got a 101")
	}
	if tc.late != "" {
		close(o.release)
		recv(t, o.delivered, "the origin's late bytes")
	}
	// Another client, on a connection of its own.
	status, header, body = brokenExchange(t, down, e.addr("public"), "GET", "/next")
	if status != 200 || body != "/next" || header.Get("X-Smuggled") != "" {
		t.Fatalf("the next request got %d %q %v, want its own 200 \"/next\"", status, body, header)
	}
	if tc.reused {
		if got := o.requests(); len(got) != 1 || strings.Join(got[0], " ") != "/broken /next" {
			t.Fatalf("the origin's connections carried %q, want [[/broken /next]]", got)
		}
		return
	}
	if n := recv(t, o.ended, "ebb closing the broken connection"); n != 0 {
		t.Fatalf("connection %d ended first, want the broken one (0)", n)
	}
	if got := o.requests(); len(got) != 2 || len(got[0]) != 1 || got[0][0] != "/broken" || len(got[1]) != 1 || got[1][0] != "/next" {
		t.Fatalf("the origin's connections carried %q, want [[/broken] [/next]]", got)
	}
}

// brokenExchange sends one request on a connection of its own, as an
// HTTP/1.1 client (raw) or an h2c one, and returns what it got.
func brokenExchange(t *testing.T, down proxytest.Downstream, addr, method, path string) (int, http.Header, string) {
	t.Helper()
	if down == proxytest.DownH1 {
		c := rawConn(t, addr)
		fmt.Fprintf(c, "%s %s HTTP/1.1\r\nHost: a\r\n\r\n", method, path)
		resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: method})
		if err != nil {
			t.Fatalf("%s %s: reading the response: %v", method, path, err)
		}
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("%s %s: reading the body: %v", method, path, err)
		}
		return resp.StatusCode, resp.Header, string(b)
	}
	client := proxytest.ModeClient(t, proxytest.Mode{Down: down}, nil)
	req, err := http.NewRequestWithContext(t.Context(), method, "http://"+addr+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	status, b, resp := do(t, client, req)
	if resp.ProtoMajor != 2 {
		t.Fatalf("the client spoke HTTP/%d.%d", resp.ProtoMajor, resp.ProtoMinor)
	}
	return status, resp.Header, string(b)
}
