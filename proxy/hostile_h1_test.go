package proxy

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"

	"golang.org/x/net/http2"

	"github.com/ebb-proxy/ebb/proxy/proxytest"
)

// rawOrigin is an origin that records the raw bytes of every request it
// receives (header and body) and answers each with 200 "ok". It reads
// requests with net/http's strict parser; one it cannot parse is recorded
// and ends the connection.
type rawOrigin struct {
	addr string
	mu   sync.Mutex
	got  []string
}

func newRawOrigin(t *testing.T) *rawOrigin {
	o := &rawOrigin{}
	o.addr = proxytest.Origin(t, func(c net.Conn, _ *bufio.Reader) {
		// ebb sends the next request on a connection only once it has the
		// answer to this one: what was read is exactly one request.
		var raw bytes.Buffer
		br := bufio.NewReader(io.TeeReader(c, &raw))
		for {
			req, err := http.ReadRequest(br)
			if err == nil {
				_, err = io.Copy(io.Discard, req.Body)
			}
			if raw.Len() > 0 {
				o.mu.Lock()
				o.got = append(o.got, raw.String())
				o.mu.Unlock()
			}
			raw.Reset()
			if err != nil {
				return
			}
			if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"); err != nil {
				return
			}
		}
	})
	return o
}

// received returns the request headers received so far.
func (o *rawOrigin) received() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.got...)
}

// TestHostileHTTP1 sends requests an edge proxy must not pass on as they
// are: each gets a 400 from ebb and the origin receives nothing, while a
// well-formed request after them goes through (the listener is unharmed).
func TestHostileHTTP1(t *testing.T) {
	origin := newRawOrigin(t)
	e := startEbb(t, singleClusterYAML(origin.addr))
	for _, tc := range []struct {
		name, request, want string
	}{
		{"userinfo", "GET http://user:pw@evil.test/ HTTP/1.1\r\nHost: good.test\r\n\r\n", "userinfo"},
		{"userinfo without password", "GET http://user@good.test/x HTTP/1.1\r\nHost: good.test\r\n\r\n", "userinfo"},
		{"empty userinfo", "GET http://@good.test/ HTTP/1.1\r\nHost: good.test\r\n\r\n", "userinfo"},
		{"space in a header name", "POST / HTTP/1.1\r\nHost: app\r\nTransfer Encoding: chunked\r\nContent-Length: 3\r\n\r\nabc", "invalid header field name"},
		// fasthttp's parser turns these away itself.
		{"separator in a header name", "GET / HTTP/1.1\r\nHost: app\r\nX(Y): 1\r\n\r\n", "malformed request"},
		{"control in a header name", "GET / HTTP/1.1\r\nHost: app\r\nX\x01Y: 1\r\n\r\n", "malformed request"},
		{"non-ASCII header name", "GET / HTTP/1.1\r\nHost: app\r\nX\xc3\xa9: 1\r\n\r\n", "malformed request"},
		{"tab in a header name", "GET / HTTP/1.1\r\nHost: app\r\nX\tY: 1\r\n\r\n", "malformed request"},
		{"space before the colon", "POST / HTTP/1.1\r\nHost: app\r\nContent-Length : 3\r\n\r\nabc", "malformed request"},
		// A Host that is no host[:port] (RFC 9112 §3.2, RFC 3986 §3.2.2)
		// is refused before routing: a lenient origin could read it as
		// another host than the one ebb routed on.
		{"userinfo in Host", "GET / HTTP/1.1\r\nHost: a.test@evil.test\r\n\r\n", "invalid host"},
		{"port out of range", "GET / HTTP/1.1\r\nHost: a.test:65536\r\n\r\n", "invalid host"},
		{"empty port", "GET / HTTP/1.1\r\nHost: a.test:\r\n\r\n", "invalid host"},
		{"IPv6 zone", "GET / HTTP/1.1\r\nHost: [fe80::1%25eth0]\r\n\r\n", "invalid host"},
		{"quote in Host", "GET / HTTP/1.1\r\nHost: a\"b\r\n\r\n", "invalid host"},
		// fasthttp's parser turns these away itself.
		{"space in Host", "GET / HTTP/1.1\r\nHost: a.test evil.test\r\n\r\n", "malformed request"},
		{"path in Host", "GET / HTTP/1.1\r\nHost: evil.test/a\r\n\r\n", "malformed request"},
		{"port that is no number", "GET / HTTP/1.1\r\nHost: a.test:http\r\n\r\n", "malformed request"},
		{"absolute form with a space in its host", "GET http://a%20b/ HTTP/1.1\r\nHost: good.test\r\n\r\n", "malformed request"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := rawExchange(t, e.addr("public"), tc.request)
			if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), tc.want) {
				t.Errorf("got %d %q, want 400 naming %q", resp.StatusCode, body, tc.want)
			}
		})
	}
	// An '@' in the path, not the authority, is no userinfo.
	resp, body := rawExchange(t, e.addr("public"), "GET http://good.test/a@b HTTP/1.1\r\nHost: good.test\r\n\r\n")
	if resp.StatusCode != http.StatusOK || string(body) != "ok" {
		t.Fatalf("a well-formed request after the hostile ones: %d %q", resp.StatusCode, body)
	}
	got := origin.received()
	if len(got) != 1 || !strings.HasPrefix(got[0], "GET /a@b HTTP/1.1\r\n") || strings.Contains(strings.ToLower(got[0]), "authorization") {
		t.Fatalf("the origin received %q, want only the well-formed request, without Authorization", got)
	}
}

// TestHTTP1Framing brings the HTTP/1 request framing cases that hold
// today into the suite: they rest on fasthttp's parser, and an upgrade
// could regress them silently. Each case is sent on its own connection;
// the test checks the status the client gets and the exact bytes that
// reach the origin (none for a refusal).
func TestHTTP1Framing(t *testing.T) {
	origin := newRawOrigin(t)
	e := startEbb(t, singleClusterYAML(origin.addr))
	// What ebb adds: the forwarding fields and a new request id (any
	// UUID: see generatedID).
	const fwd = "X-Forwarded-For: 127.0.0.1\r\nX-Forwarded-Proto: http\r\nX-Forwarded-Host: a\r\nX-Request-Id: <uuid>\r\n\r\n"
	many := "GET / HTTP/1.1\r\nHost: a\r\n" + strings.Repeat("X-Padding: 0123456789abcdef\r\n", 2000) + "\r\n"
	for _, tc := range []struct {
		name, request string
		status        int
		origin        string // "" for nothing
		closes        bool   // the answer ends the connection
	}{
		// Both framings: Transfer-Encoding wins, Content-Length goes,
		// and the connection ends after the answer (RFC 9112 §6.3).
		{"CL.TE", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 6\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nG", 200,
			"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n" + fwd + "0\r\n\r\n", true},
		{"TE.CL", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n3\r\nabc\r\n0\r\n\r\n", 200,
			"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n" + fwd + "3\r\nabc\r\n0\r\n\r\n", true},
		{"two different Content-Lengths", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 5\r\n\r\nabcde", 400, "", true},
		{"two equal Content-Lengths", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc", 400, "", true},
		{"unknown transfer coding", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: xchunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", 400, "", true},
		{"chunked not last", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, identity\r\n\r\n3\r\nabc\r\n0\r\n\r\n", 400, "", true},
		{"gzip alone", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\nabc", 400, "", true},
		// obs-fold is replaced by a space (RFC 9112 §5.2): one framing.
		{"obs-fold in Transfer-Encoding", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding:\r\n chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", 200,
			"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n" + fwd + "3\r\nabc\r\n0\r\n\r\n", false},
		{"obs-fold in Content-Length", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n 4\r\n\r\nabcd", 400, "", true},
		{"bad chunk size", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n", 400, "", true},
		{"chunk extension dropped", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3;ext=1\r\nabc\r\n0\r\n\r\n", 200,
			"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n" + fwd + "3\r\nabc\r\n0\r\n\r\n", false},
		{"NUL in a value", "GET / HTTP/1.1\r\nHost: a\r\nX-A: a\x00b\r\n\r\n", 400, "", true},
		{"CR in a value", "GET / HTTP/1.1\r\nHost: a\r\nX-A: a\rb\r\n\r\n", 400, "", true},
		{"two Hosts", "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400, "", true},
		{"no Host", "GET / HTTP/1.1\r\n\r\n", 400, "", false},
		{"bare LF line ends", "GET / HTTP/1.1\nHost: a\n\n", 400, "", true},
		{"bare LF ends the head", "GET / HTTP/1.1\r\nHost: a\r\n\n", 400, "", true},
		{"bare LF inside the head", "GET / HTTP/1.1\r\nHost: a\nX-A: b\r\n\r\n", 400, "", true},
		{"bare LF after the request line", "GET / HTTP/1.1\nHost: a\r\n\r\n", 400, "", true},
		{"header section over max_header_bytes", many, 431, "", true},
		// A request line longer than the whole buffer: the URI is what is
		// too long (RFC 9110 §15.5.15), not the header section.
		{"request line over max_header_bytes", "GET /" + strings.Repeat("a", 40<<10) + " HTTP/1.1\r\nHost: a\r\n\r\n", 414, "", true},
		{"long URI, headers over max_header_bytes", "GET /" + strings.Repeat("a", 1000) + " HTTP/1.1\r\nHost: a\r\n" + strings.Repeat("X-Padding: 0123456789abcdef\r\n", 2000) + "\r\n", 431, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(origin.received())
			c := rawConn(t, e.addr("public"))
			if _, err := io.WriteString(c, tc.request); err != nil {
				t.Fatal(err)
			}
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("reading the answer: %v", err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.status {
				t.Errorf("status %d, want %d", resp.StatusCode, tc.status)
			}
			if tc.closes && !resp.Close {
				t.Errorf("the answer keeps the connection open, want it closed")
			}
			got := origin.received()[before:]
			for i := range got {
				got[i] = generatedID.ReplaceAllString(got[i], "X-Request-Id: <uuid>\r\n")
			}
			switch {
			case tc.origin == "" && len(got) != 0:
				t.Errorf("the origin received %q, want nothing", got)
			case tc.origin != "" && (len(got) != 1 || got[0] != tc.origin):
				t.Errorf("the origin received %q, want exactly %q", got, tc.origin)
			}
		})
	}
}

// generatedID matches the X-Request-Id line of a request id ebb made: a
// version 4 UUID.
var generatedID = regexp.MustCompile(`X-Request-Id: [0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}\r\n`)

// TestLongURIOnKeepAlive: a request line too long for the buffer gets 414
// on a connection that has served requests before, too (the engine marks
// where each head begins).
func TestLongURIOnKeepAlive(t *testing.T) {
	origin := newRawOrigin(t)
	e := startEbb(t, singleClusterYAML(origin.addr))
	c := rawConn(t, e.addr("public"))
	br := bufio.NewReader(c)
	for i, want := range []int{200, 200, 414} {
		req := "GET /ok HTTP/1.1\r\nHost: a\r\n\r\n"
		if want == 414 {
			req = "GET /" + strings.Repeat("a", 40<<10) + " HTTP/1.1\r\nHost: a\r\n\r\n"
		}
		if _, err := io.WriteString(c, req); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("request %d: %d, want %d", i, resp.StatusCode, want)
		}
	}
}

// TestHTTP1HeadOverTLS: what ebb tells from a request head's bytes it
// tells from the decrypted ones on a TLS listener: a request line longer
// than the buffer gets 414 and a bare LF 400, as in cleartext, and a
// plain request is served.
func TestHTTP1HeadOverTLS(t *testing.T) {
	origin := newRawOrigin(t)
	cert, key, pool := proxytest.WriteTestCert(t, t.TempDir())
	e := startEbb(t, oneClusterYAML(origin.addr, []string{fmt.Sprintf("tls: { cert: %q, key: %q }", cert, key)}, nil))
	for _, tc := range []struct {
		name, request string
		status        int
	}{
		{"plain", "GET / HTTP/1.1\r\nHost: a\r\n\r\n", 200},
		{"request line over max_header_bytes", "GET /" + strings.Repeat("a", 40<<10) + " HTTP/1.1\r\nHost: a\r\n\r\n", 414},
		{"headers over max_header_bytes", "GET / HTTP/1.1\r\nHost: a\r\n" + strings.Repeat("X-Padding: 0123456789abcdef\r\n", 2000) + "\r\n", 431},
		{"bare LF line ends", "GET / HTTP/1.1\nHost: a\n\n", 400},
		{"bare LF inside the head", "GET / HTTP/1.1\r\nHost: a\nX-A: b\r\n\r\n", 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := tls.Dial("tcp", e.addr("public"), &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", NextProtos: []string{"http/1.1"}})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := io.WriteString(c, tc.request); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatalf("reading the answer: %v", err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d", resp.StatusCode, tc.status)
			}
		})
	}
}

// TestHeadWatchOnKeepAlive: on a keep-alive connection, a later request
// whose head has a bare LF gets 400 at once too; and pipelined requests
// whose bodies hold bare LFs, read together, are served: the watcher
// does not take a body for a head.
func TestHeadWatchOnKeepAlive(t *testing.T) {
	origin := newRawOrigin(t)
	e := startEbb(t, singleClusterYAML(origin.addr))
	read := func(br *bufio.Reader, want int) {
		t.Helper()
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("reading an answer: %v", err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("status %d, want %d", resp.StatusCode, want)
		}
	}
	c := rawConn(t, e.addr("public"))
	br := bufio.NewReader(c)
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: a\r\n\r\n")
	read(br, 200)
	io.WriteString(c, "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\na\nb\nc")
	read(br, 200)
	io.WriteString(c, "GET / HTTP/1.1\nHost: a\n\n")
	read(br, 400)

	p := rawConn(t, e.addr("public"))
	pr := bufio.NewReader(p)
	io.WriteString(p, "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\na\nb\nc"+
		"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 6\r\n\r\nd\n\ne\nf"+
		"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
	for range 3 {
		read(pr, 200)
	}
}

// TestPipelinedAfter400: after a request ebb refuses as malformed, the
// requests pipelined behind it on the connection are not served: the
// refused one may not have been framed as its client meant, and what
// follows could be the rest of it. The 400 closes the connection.
func TestPipelinedAfter400(t *testing.T) {
	origin := newRawOrigin(t)
	e := startEbb(t, singleClusterYAML(origin.addr))
	for _, first := range []string{
		"GET / HTTP/1.1\r\nHost: a\r\nX Bad: 1\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a\r\nTransfer Encoding: chunked\r\nContent-Length: 3\r\n\r\nabc",
		"GET / HTTP/1.1\r\nHost: a.test@evil.test\r\n\r\n",
		"GET http://user@a/ HTTP/1.1\r\nHost: a\r\n\r\n",
		"GET / HTTP/1.1\r\n\r\n",
	} {
		c := rawConn(t, e.addr("public"))
		io.WriteString(c, first+"GET /second HTTP/1.1\r\nHost: a\r\n\r\n")
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%q: reading the answer: %v", first, err)
		}
		io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != http.StatusBadRequest || !resp.Close {
			t.Errorf("%q: got %d (Connection: close %v), want 400 closing the connection", first, resp.StatusCode, resp.Close)
		}
		if rest, err := io.ReadAll(br); err != nil || len(rest) != 0 {
			t.Errorf("%q: after the 400 the connection carried %q (%v), want nothing", first, rest, err)
		}
	}
	if got := origin.received(); len(got) != 0 {
		t.Fatalf("the origin received %q, want nothing", got)
	}
}

// TestHostileAuthority: on HTTP/2 too, an :authority that is no
// host[:port] is refused before routing, and the origin receives
// nothing: the HTTP/2 engine resets the stream (PROTOCOL_ERROR) of a
// request RFC 9113 §8.3.1 calls malformed (userinfo, characters no
// authority holds), and the skeleton answers 400 to the rest (a port
// that is no number); either way the connection goes on.
func TestHostileAuthority(t *testing.T) {
	origin := newRawOrigin(t)
	e := startEbb(t, singleClusterYAML(origin.addr))
	cl := dialH2(t, e.addr("public"))
	get := func(authority string) [][2]string {
		return [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", authority}, {":path", "/"}}
	}
	for _, tc := range []struct {
		authority string
		reset     bool
	}{
		{"a.test@evil.test", true}, {"user:pw@evil.test", true}, {"a b", true}, {"evil.test/a", true},
		{"a.test:http", false}, {"a.test:65536", false}, {"a.test:", false}, {"[fe80::1%25eth0]", false}, {"a\"b", false},
	} {
		r := cl.do(get(tc.authority), nil, nil)
		switch {
		case tc.reset && (!r.reset || r.code != http2.ErrCodeProtocol):
			t.Errorf(":authority %q: got %+v, want RST_STREAM(PROTOCOL_ERROR)", tc.authority, r)
		case !tc.reset && (r.status != "400" || !strings.Contains(r.body, "invalid host")):
			t.Errorf(":authority %q: got %+v, want 400 naming the invalid host", tc.authority, r)
		}
	}
	if r := cl.do(get("[::1]:8080"), nil, nil); r.status != "200" || r.body != "ok" {
		t.Fatalf("a well-formed request after the hostile ones: %+v", r)
	}
	if got := origin.received(); len(got) != 1 || !strings.Contains(got[0], "\r\nHost: [::1]:8080\r\n") {
		t.Fatalf("the origin received %q, want only the well-formed request", got)
	}
}
