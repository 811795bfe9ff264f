package headers

import (
	"maps"
	"net/http"
	"net/textproto"
	"slices"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

// hopOf decodes a fuzzed byte into the options of a hop.
func hopOf(flags byte) Hop {
	h := Hop{
		TLS:        flags&1 != 0,
		Trust:      flags&2 != 0,
		Upgrade:    flags&4 != 0,
		TETrailers: flags&8 != 0,
	}
	if flags&16 != 0 {
		h.ClientIP = []byte("192.0.2.7")
	}
	h.RequestID = RequestIDPolicy(flags >> 5 % 3)
	return h
}

// FuzzRequestRules feeds header sections to both adapters of the request
// rules and checks what went upstream: no hop-by-hop field and none the
// Connection field named (beyond what the hop keeps on purpose), no
// Expect, no untrusted Forwarded or X-Real-IP, one X-Forwarded-* line
// each, with ebb's values unless trusted. When fasthttp and net/http parse the section
// into the same fields, the two adapters must also agree on the result.
// The seed corpus is in testdata/fuzz/FuzzRequestRules.
func FuzzRequestRules(f *testing.F) {
	f.Add("Host: example.com\r\nConnection: keep-alive, X-A\r\nX-A: 1\r\nX-B: 2\r\n", byte(16))
	f.Add("Host: a\r\nTE: trailers\r\nUpgrade: websocket\r\nConnection: upgrade\r\n", byte(12))
	f.Add("Host: a\r\nX-Forwarded-For: 1.1.1.1\r\nX-Forwarded-For: 2.2.2.2\r\nX-Forwarded-Proto: https\r\n", byte(19))
	f.Add("Host: a\r\nForwarded: for=1.2.3.4\r\nExpect: 100-continue\r\nKeep-Alive: 5\r\n", byte(0))
	f.Add("Host: a\r\nX-Request-Id: abc\r\nX-Request-Id: d e\r\nConnection: X-Request-Id\r\n", byte(0x22))
	f.Fuzz(func(t *testing.T, raw string, flags byte) {
		hop := hopOf(flags)
		var fh fasthttp.RequestHeader
		if err := fh.Read(bufioReader("GET / HTTP/1.1\r\n" + raw + "\r\n")); err != nil {
			return
		}
		mh, err := textproto.NewReader(bufioReader(raw + "\r\n")).ReadMIMEHeader()
		if err != nil {
			return
		}
		std := http.Header(mh)
		before := fastFields(&fh)
		sameInput := maps.EqualFunc(before, withoutFraming(std), slices.Equal)
		named := connectionOptions(std["Connection"])

		fastHop, stdHop := hop, hop
		fastHop.Host = fh.Host()
		if v := std["Host"]; len(v) > 0 {
			stdHop.Host = []byte(v[0])
		}
		FastRequest(&fh, fastHop, nil)
		StdRequest(std, stdHop)
		fast := fastFields(&fh)
		for name, out := range map[string]http.Header{"fasthttp": fast, "net/http": std} {
			checkRequestInvariants(t, name, out, hop, named)
			if ids := out[XRequestID]; len(ids) == 1 && newID.MatchString(ids[0]) {
				out[XRequestID] = []string{"new"} // each adapter made its own
			}
		}
		if sameInput && !maps.EqualFunc(fast, std, slices.Equal) {
			t.Fatalf("adapters disagree on %q (flags %08b):\nfasthttp %v\nnet/http %v", raw, flags, fast, std)
		}
	})
}

func withoutFraming(h http.Header) http.Header {
	out := h.Clone()
	delete(out, "Host")
	delete(out, "Content-Length")
	delete(out, "Transfer-Encoding")
	return out
}

// connectionOptions returns the canonical names a Connection field lists.
func connectionOptions(lines []string) []string {
	var out []string
	for _, line := range lines {
		for opt := range strings.SplitSeq(line, ",") {
			if opt = strings.TrimSpace(opt); opt != "" {
				out = append(out, textproto.CanonicalMIMEHeaderKey(opt))
			}
		}
	}
	return out
}

func checkRequestInvariants(t *testing.T, adapter string, h http.Header, hop Hop, named []string) {
	t.Helper()
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf(adapter+": "+format+"\nfields: %v", append(args, h)...)
	}
	for _, name := range hopByHop {
		v, ok := h[name]
		switch {
		case !ok:
		case hop.Upgrade && (name == "Connection" || name == "Upgrade"):
		case hop.TETrailers && name == "Te" && slices.Equal(v, []string{"trailers"}):
		default:
			fail("hop-by-hop %s survived", name)
		}
	}
	if !hop.Upgrade {
		for _, name := range named {
			if _, ok := h[name]; ok && !isProtected(name) && hopBit(name) == 0 && !forwardedByEbb(name) &&
				!(name == XRequestID && hop.RequestID != RequestIDOff) {
				fail("%s survived although Connection named it", name)
			}
		}
	}
	if _, ok := h["Expect"]; ok {
		fail("Expect survived")
	}
	if ids := h[XRequestID]; hop.RequestID != RequestIDOff && (len(ids) != 1 || !validRequestID([]byte(ids[0]))) {
		fail("X-Request-Id %q, want one valid id", ids)
	}
	if _, ok := h["Forwarded"]; ok && !hop.Trust {
		fail("untrusted Forwarded survived")
	}
	for _, name := range []string{XForwardedFor, XForwardedProto, XForwardedHost} {
		if n := len(h[name]); n > 1 && !(hop.Trust && name != XForwardedFor) {
			fail("%d lines of %s", n, name)
		}
	}
	if !hop.Trust {
		want := "http"
		if hop.TLS {
			want = "https"
		}
		if got := h[XForwardedProto]; !slices.Equal(got, []string{want}) {
			fail("X-Forwarded-Proto %q, want %q", got, want)
		}
		// An untrusted client's chain is replaced by the address ebb saw.
		var wantFor []string
		if len(hop.ClientIP) > 0 {
			wantFor = []string{string(hop.ClientIP)}
		}
		if got := h[XForwardedFor]; !slices.Equal(got, wantFor) {
			fail("X-Forwarded-For %q from an untrusted client, want %q", got, wantFor)
		}
		if _, ok := h["X-Real-Ip"]; ok {
			fail("untrusted X-Real-IP survived")
		}
	}
}

// forwardedByEbb reports whether name is one of the fields ebb sets
// itself after stripping: a Connection option naming it removes the
// client's lines, and ebb's own take their place.
func forwardedByEbb(name string) bool {
	return name == XForwardedFor || name == XForwardedProto || name == XForwardedHost
}
