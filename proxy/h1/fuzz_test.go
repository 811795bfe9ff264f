package h1_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/ebb-proxy/ebb/proxy/internal/enginetest"
	"github.com/ebb-proxy/ebb/proxy/proxytest"
)

// strictOrigin is an origin that parses every request ebb sends it with
// net/http's strict reader, reads its body and answers 200; it counts the
// requests and keeps the first one it could not parse.
type strictOrigin struct {
	addr string
	mu   sync.Mutex
	n    int
	bad  string
}

func newStrictOrigin(tb testing.TB) *strictOrigin {
	o := &strictOrigin{}
	o.addr = proxytest.Origin(tb, func(c net.Conn, br *bufio.Reader) {
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				// A target with a bad percent escape is passed on as the
				// client sent it (routing reads the raw path); net/http's
				// parser refuses it, which is the origin's to decide.
				if err != io.EOF && !strings.Contains(err.Error(), "closed") && !strings.Contains(err.Error(), "invalid URL escape") {
					o.fail(fmt.Sprintf("the origin could not parse what ebb sent: %v", err))
				}
				return
			}
			_, err = io.Copy(io.Discard, req.Body)
			o.mu.Lock()
			o.n++
			o.mu.Unlock()
			if err != nil {
				o.fail(fmt.Sprintf("the origin could not read the body ebb sent: %v", err))
				return
			}
			if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"); err != nil {
				return
			}
		}
	})
	return o
}

func (o *strictOrigin) fail(msg string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.bad == "" {
		o.bad = msg
	}
}

// state returns how many requests arrived and the first failure.
func (o *strictOrigin) state() (int, string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.n, o.bad
}

// FuzzHTTP1Request sends requests, as fasthttp's server parses them from
// the fuzzed bytes, through the HTTP/1 engine to a strict origin. The
// engine never panics and always answers with a valid status; what
// reaches the origin is valid HTTP/1.1 with a body it can read; and a
// request with userinfo in its target or a header name that is not a
// token is refused (400, or 505 or 405 before that) and reaches nobody. The seed corpus is in
// testdata/fuzz/FuzzHTTP1Request.
func FuzzHTTP1Request(f *testing.F) {
	for _, seed := range []string{
		"GET / HTTP/1.1\r\nHost: example.com\r\n\r\n",
		"POST /up HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello",
		"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"GET http://user:pw@evil.test/ HTTP/1.1\r\nHost: good.test\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a\r\nTransfer Encoding: chunked\r\nContent-Length: 3\r\n\r\nabc",
		"GET / HTTP/1.0\r\nConnection: keep-alive, X-A\r\nX-A: 1\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: x\r\n\r\n",
		"OPTIONS * HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 0\r\n\r\n",
	} {
		f.Add([]byte(seed))
	}
	origin := newStrictOrigin(f)
	e := enginetest.New(f, nil, origin.addr)
	// The fuzzing must exercise the path to the origin, not only refusals.
	if ctx := e.Serve(http.MethodPost, []byte("hello")); ctx.Response.StatusCode() != http.StatusOK {
		f.Fatalf("a plain POST: status %d", ctx.Response.StatusCode())
	}
	if n, bad := origin.state(); n != 1 || bad != "" {
		f.Fatalf("a plain POST: the origin got %d requests (%s)", n, bad)
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		var req fasthttp.Request
		if err := req.Read(bufio.NewReader(bytes.NewReader(raw))); err != nil {
			return // fasthttp's server answers 400 itself
		}
		hostile := hasUserinfo(string(req.Header.RequestURI())) || !tokenNames(&req.Header)
		before, _ := origin.state()
		var ctx fasthttp.RequestCtx
		ctx.Init(&req, nil, nil)
		e.H1.Handle(&ctx)
		status := ctx.Response.StatusCode()
		if status < 100 || status > 599 {
			t.Fatalf("status %d for %q", status, raw)
		}
		if ctx.Response.IsBodyStream() {
			// Consume a streamed answer, as the server would.
			ctx.Response.Body()
		}
		after, bad := origin.state()
		if bad != "" {
			t.Fatalf("%s, for %q", bad, raw)
		}
		// 400, or an earlier refusal (505 for the version, 405 for
		// CONNECT).
		if hostile && (status < 400 || after != before) {
			t.Fatalf("hostile request %q: status %d, %d requests reached the origin; want a refusal and none", raw, status, after-before)
		}
	})
}

// hasUserinfo reports whether an absolute-form target has userinfo, as
// the engine must see it (written again here, independently).
func hasUserinfo(target string) bool {
	i := strings.Index(target, "://")
	if i < 0 || strings.HasPrefix(target, "/") {
		return false
	}
	auth := target[i+3:]
	if j := strings.IndexAny(auth, "/?#"); j >= 0 {
		auth = auth[:j]
	}
	return strings.Contains(auth, "@")
}

// tokenNames reports whether every header name is an RFC 9110 token.
func tokenNames(h *fasthttp.RequestHeader) bool {
	for k := range h.All() {
		if len(k) == 0 {
			return false
		}
		for _, b := range k {
			if b <= ' ' || b >= 0x7f || strings.IndexByte("\"(),/:;<=>?@[\\]{}", b) >= 0 {
				return false
			}
		}
	}
	return true
}
