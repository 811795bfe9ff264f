package headers

import (
	"bufio"
	"fmt"
	"net/http"
	"net/textproto"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

func bufioReader(s string) *bufio.Reader { return bufio.NewReader(strings.NewReader(s)) }

// adapter runs the request rules on raw header lines (after the request
// line, Host included) through one adapter, and returns the fields that
// went upstream as a map of canonical names to values.
type adapter struct {
	name string
	run  func(t *testing.T, raw string, hop Hop) http.Header
}

var adapters = []adapter{
	{"fasthttp", func(t *testing.T, raw string, hop Hop) http.Header {
		var h fasthttp.RequestHeader
		if err := h.Read(bufioReader("POST / HTTP/1.1\r\n" + raw + "\r\n")); err != nil {
			t.Fatal(err)
		}
		hop.Host = h.Host()
		FastRequest(&h, hop, nil)
		return fastFields(&h)
	}},
	{"net/http", func(t *testing.T, raw string, hop Hop) http.Header {
		mh, err := textproto.NewReader(bufioReader(raw + "\r\n")).ReadMIMEHeader()
		if err != nil {
			t.Fatal(err)
		}
		h := http.Header(mh)
		if v := h["Host"]; len(v) > 0 {
			hop.Host = []byte(v[0])
		}
		StdRequest(h, hop)
		return h
	}},
}

// fastFields lists a fasthttp request header's fields as net/http would
// hold them, without Host and the framing fields, which the net/http
// adapter leaves to the Transport.
func fastFields(h *fasthttp.RequestHeader) http.Header {
	out := http.Header{}
	for k, v := range h.All() {
		key := http.CanonicalHeaderKey(string(k))
		switch key {
		case "Host", "Content-Length", "Transfer-Encoding":
			continue
		}
		out[key] = append(out[key], string(v))
	}
	return out
}

func TestRequestRules(t *testing.T) {
	tests := []struct {
		name string
		raw  string // header lines after the request line
		hop  Hop
		gone []string
		want map[string][]string // exact values of these fields
	}{
		{
			name: "nothing to strip",
			raw:  "Host: example.com\r\nX-Ok: 1\r\nAccept: */*\r\n",
			want: map[string][]string{"X-Ok": {"1"}, "Accept": {"*/*"}},
		},
		{
			name: "fixed hop-by-hop set",
			raw:  "Host: example.com\r\nKeep-Alive: timeout=5\r\nProxy-Connection: keep-alive\r\nTE: trailers\r\nTrailer: X-T\r\nUpgrade: h2c\r\nX-Ok: 1\r\n",
			gone: []string{"Keep-Alive", "Proxy-Connection", "Te", "Upgrade"},
			want: map[string][]string{"X-Ok": {"1"}, "Trailer": {"X-T"}},
		},
		{
			name: "headers named by Connection",
			raw:  "Host: example.com\r\nConnection: keep-alive, X-Secret ,x-other, X-A, X-B, X-C, X-D, X-E, X-F, X-G\r\nX-Secret: s\r\nX-Other: o\r\nX-Ok: 1\r\nX-G: g\r\nX-A: a\r\nX-F: f\r\n",
			gone: []string{"Connection", "X-Secret", "X-Other", "X-A", "X-F", "X-G"},
			want: map[string][]string{"X-Ok": {"1"}},
		},
		{
			name: "Connection cannot remove framing or routing headers",
			raw:  "Host: example.com\r\nConnection: Content-Length, Host, Transfer-Encoding, X-Forwarded-Host\r\nContent-Length: 3\r\n",
			gone: []string{"Connection"},
			want: map[string][]string{"X-Forwarded-Host": {"example.com"}},
		},
		{
			name: "Connection on several lines",
			raw:  "Host: example.com\r\nConnection: keep-alive\r\nConnection: X-Secret\r\nX-Secret: s\r\nX-Ok: 1\r\n",
			gone: []string{"Connection", "X-Secret"},
			want: map[string][]string{"X-Ok": {"1"}},
		},
		{
			name: "upgrade forwarded on purpose",
			raw:  "Host: example.com\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nKeep-Alive: 5\r\n",
			hop:  Hop{Upgrade: true},
			gone: []string{"Keep-Alive"},
			want: map[string][]string{"Connection": {"Upgrade"}, "Upgrade": {"websocket"}},
		},
		{
			name: "TE: trailers towards HTTP/2",
			raw:  "Host: example.com\r\nTE: deflate, trailers;q=1\r\n",
			hop:  Hop{TETrailers: true},
			want: map[string][]string{"Te": {"trailers"}},
		},
		{
			name: "other TE towards HTTP/2",
			raw:  "Host: example.com\r\nTE: deflate\r\n",
			hop:  Hop{TETrailers: true},
			gone: []string{"Te"},
		},
		{
			name: "no Via unless asked",
			raw:  "Host: example.com\r\nVia: 1.1 waf\r\n",
			want: map[string][]string{"Via": {"1.1 waf"}},
		},
		{
			name: "Via added",
			raw:  "Host: example.com\r\n",
			hop:  Hop{Via: []byte("2 ebb")},
			want: map[string][]string{"Via": {"2 ebb"}},
		},
		{
			name: "Via appended to the list, one line",
			raw:  "Host: example.com\r\nVia: 1.0 fred, 1.1 p.example.net\r\nVia: 1.1 waf\r\n",
			hop:  Hop{Via: []byte("1.1 ebb")},
			want: map[string][]string{"Via": {"1.0 fred, 1.1 p.example.net, 1.1 waf, 1.1 ebb"}},
		},
		{
			name: "Expect goes",
			raw:  "Host: example.com\r\nExpect: 100-continue\r\n",
			gone: []string{"Expect"},
		},
		{
			name: "untrusted Forwarded goes",
			raw:  "Host: example.com\r\nForwarded: for=1.2.3.4;proto=https\r\n",
			gone: []string{"Forwarded"},
		},
		{
			name: "trusted Forwarded stays",
			raw:  "Host: example.com\r\nForwarded: for=1.2.3.4;proto=https\r\n",
			hop:  Hop{Trust: true},
			want: map[string][]string{"Forwarded": {"for=1.2.3.4;proto=https"}},
		},
		{
			name: "first hop",
			raw:  "Host: example.com\r\n",
			hop:  Hop{ClientIP: []byte("10.0.0.9")},
			want: map[string][]string{"X-Forwarded-For": {"10.0.0.9"}, "X-Forwarded-Proto": {"http"}, "X-Forwarded-Host": {"example.com"}},
		},
		{
			name: "appends to a trusted proxy's chain",
			raw:  "Host: example.com\r\nX-Forwarded-For: 1.1.1.1, 2.2.2.2\r\n",
			hop:  Hop{ClientIP: []byte("10.0.0.9"), Trust: true},
			want: map[string][]string{"X-Forwarded-For": {"1.1.1.1, 2.2.2.2, 10.0.0.9"}},
		},
		{
			name: "replaces an untrusted client's chain",
			raw:  "Host: example.com\r\nX-Forwarded-For: 1.1.1.1, 2.2.2.2\r\n",
			hop:  Hop{ClientIP: []byte("10.0.0.9")},
			want: map[string][]string{"X-Forwarded-For": {"10.0.0.9"}},
		},
		{
			name: "untrusted X-Real-IP goes",
			raw:  "Host: example.com\r\nX-Real-IP: 1.2.3.4\r\n",
			gone: []string{"X-Real-Ip"},
		},
		{
			name: "trusted X-Real-IP stays",
			raw:  "Host: example.com\r\nX-Real-IP: 1.2.3.4\r\n",
			hop:  Hop{Trust: true},
			want: map[string][]string{"X-Real-Ip": {"1.2.3.4"}},
		},
		{
			name: "overwrites untrusted proto and host",
			raw:  "Host: example.com\r\nX-Forwarded-Proto: https\r\nX-Forwarded-Host: evil\r\n",
			hop:  Hop{ClientIP: []byte("10.0.0.9")},
			want: map[string][]string{"X-Forwarded-Proto": {"http"}, "X-Forwarded-Host": {"example.com"}},
		},
		{
			name: "keeps trusted proto and host",
			raw:  "Host: example.com\r\nX-Forwarded-Proto: https\r\nX-Forwarded-Host: front\r\n",
			hop:  Hop{ClientIP: []byte("10.0.0.9"), Trust: true},
			want: map[string][]string{"X-Forwarded-Proto": {"https"}, "X-Forwarded-Host": {"front"}, "X-Forwarded-For": {"10.0.0.9"}},
		},
		{
			name: "tls",
			raw:  "Host: example.com\r\n",
			hop:  Hop{TLS: true},
			want: map[string][]string{"X-Forwarded-Proto": {"https"}},
		},
		{
			name: "tls upgrade",
			raw:  "Host: example.com\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nX-Forwarded-Proto: http\r\nForwarded: proto=http\r\n",
			hop:  Hop{TLS: true, Upgrade: true},
			gone: []string{"Forwarded"},
			want: map[string][]string{"X-Forwarded-Proto": {"https"}, "Upgrade": {"websocket"}},
		},
		{
			name: "repeated lines are replaced",
			raw:  "Host: example.com\r\nX-Forwarded-For: 1.1.1.1\r\nX-Forwarded-For: 2.2.2.2\r\nX-Forwarded-Proto: https\r\nX-Forwarded-Proto: https\r\nX-Forwarded-Host: a\r\nX-Forwarded-Host: b\r\n",
			hop:  Hop{ClientIP: []byte("10.0.0.9")},
			want: map[string][]string{"X-Forwarded-For": {"10.0.0.9"}, "X-Forwarded-Proto": {"http"}, "X-Forwarded-Host": {"example.com"}},
		},
		{
			name: "a trusted proxy's repeated lines are joined",
			raw:  "Host: example.com\r\nX-Forwarded-For: 1.1.1.1\r\nX-Forwarded-For: 2.2.2.2\r\n",
			hop:  Hop{ClientIP: []byte("10.0.0.9"), Trust: true},
			want: map[string][]string{"X-Forwarded-For": {"1.1.1.1, 2.2.2.2, 10.0.0.9"}},
		},
	}
	for _, a := range adapters {
		for _, tt := range tests {
			t.Run(a.name+"/"+tt.name, func(t *testing.T) {
				h := a.run(t, tt.raw, tt.hop)
				for _, k := range tt.gone {
					if v, ok := h[k]; ok {
						t.Errorf("%s: %q survived", k, v)
					}
				}
				for k, want := range tt.want {
					if got := h[k]; !slices.Equal(got, want) {
						t.Errorf("%s = %q, want %q", k, got, want)
					}
				}
			})
		}
	}
}

func TestHopIndexes(t *testing.T) {
	if hopByHop[hopConnection] != "Connection" || hopByHop[hopUpgrade] != "Upgrade" || hopByHop[hopTE] != "Te" {
		t.Fatal("hopConnection, hopTE or hopUpgrade does not index hopByHop")
	}
}

func TestFastRulesAllocs(t *testing.T) {
	var resp fasthttp.ResponseHeader
	rawResp := "HTTP/1.1 200 OK\r\nConnection: keep-alive, X-Hop\r\nKeep-Alive: timeout=5\r\nX-Hop: 1\r\nContent-Length: 0\r\n\r\n"
	var req fasthttp.RequestHeader
	rawReq := "GET / HTTP/1.1\r\nHost: example.com\r\nConnection: keep-alive\r\nX-Forwarded-For: 1.1.1.1\r\nX-Forwarded-For: 2.2.2.2\r\n\r\n"
	var scratch []byte
	clientIP := []byte("10.0.0.1") // as the connection holds it
	allocs := testing.AllocsPerRun(100, func() {
		if err := resp.Read(bufioReader(rawResp)); err != nil {
			t.Fatal(err)
		}
		FastResponse(&resp, false, nil)
		if err := req.Read(bufioReader(rawReq)); err != nil {
			t.Fatal(err)
		}
		scratch = FastRequest(&req, Hop{ClientIP: clientIP, Host: req.Host()}, scratch)
	})
	// Each bufioReader allocates its reader and buffer; the rules add
	// nothing.
	if allocs > 4 {
		t.Fatalf("%v allocations per request and response", allocs)
	}
}

func TestResponseRules(t *testing.T) {
	raw := "Connection: keep-alive, X-Hop\r\nKeep-Alive: timeout=5\r\nX-Hop: 1\r\nX-Ok: 1\r\nTransfer-Encoding: chunked\r\n"
	t.Run("fasthttp", func(t *testing.T) {
		var h fasthttp.ResponseHeader
		if err := h.Read(bufioReader("HTTP/1.1 200 OK\r\n" + raw + "\r\n")); err != nil {
			t.Fatal(err)
		}
		FastResponse(&h, false, nil)
		out := h.String()
		for _, bad := range []string{"Keep-Alive", "X-Hop", "Connection"} {
			if strings.Contains(out, bad) {
				t.Errorf("%s survived:\n%s", bad, out)
			}
		}
		if !strings.Contains(out, "X-Ok: 1") {
			t.Errorf("X-Ok lost:\n%s", out)
		}
	})
	t.Run("net/http", func(t *testing.T) {
		mh, err := textproto.NewReader(bufioReader(raw + "\r\n")).ReadMIMEHeader()
		if err != nil {
			t.Fatal(err)
		}
		h := http.Header(mh)
		StdResponse(h, nil)
		want := http.Header{"X-Ok": {"1"}}
		if !reflect.DeepEqual(h, want) {
			t.Errorf("got %v, want %v", h, want)
		}
	})
}

// TestResponseVia: headers.via appends ebb's entry to the upstream's Via
// list, as one line, through both adapters.
func TestResponseVia(t *testing.T) {
	const raw = "Via: 1.0 cache\r\nVia: 1.1 app-proxy\r\n"
	const want = "1.0 cache, 1.1 app-proxy, 1.1 ebb"
	var h fasthttp.ResponseHeader
	if err := h.Read(bufioReader("HTTP/1.1 200 OK\r\n" + raw + "\r\n")); err != nil {
		t.Fatal(err)
	}
	FastResponse(&h, false, []byte("1.1 ebb"))
	if got := h.PeekAll("Via"); len(got) != 1 || string(got[0]) != want {
		t.Errorf("fasthttp: Via %q, want one line %q", got, want)
	}
	mh, err := textproto.NewReader(bufioReader(raw + "\r\n")).ReadMIMEHeader()
	if err != nil {
		t.Fatal(err)
	}
	std := http.Header(mh)
	StdResponse(std, []byte("1.1 ebb"))
	if got := std["Via"]; len(got) != 1 || got[0] != want {
		t.Errorf("net/http: Via %q, want one line %q", got, want)
	}
}

// TestFastDeleteKeepsOrder: deleting hop-by-hop fields leaves the lines of
// every other field in their order, in requests and responses, also when
// fasthttp's own delete would reorder them (it moves the last line into
// the deleted one's place) and when the header has more lines than the
// check looks at on the stack.
func TestFastDeleteKeepsOrder(t *testing.T) {
	many := ""
	for i := range maxNames {
		many += fmt.Sprintf("X-Filler-%d: %d\r\n", i, i)
	}
	for _, tc := range []struct{ name, fields string }{
		{"after Connection", "Connection: keep-alive\r\nX-A: 1\r\nX-A: 2\r\n"},
		{"around Keep-Alive", "X-A: 1\r\nKeep-Alive: 5\r\nX-B: 1\r\nX-A: 2\r\nX-B: 2\r\nConnection: keep-alive\r\nX-A: 3\r\n"},
		{"named by Connection", "Connection: X-Drop\r\nX-Drop: x\r\nX-A: 1\r\nX-A: 2\r\nX-Drop: y\r\nX-A: 3\r\n"},
		{"many lines", "Connection: keep-alive\r\n" + many + "X-A: 1\r\nX-A: 2\r\nX-A: 3\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var req fasthttp.RequestHeader
			if err := req.Read(bufioReader("GET / HTTP/1.1\r\nHost: a\r\n" + tc.fields + "\r\n")); err != nil {
				t.Fatal(err)
			}
			FastRequest(&req, Hop{Host: req.Host()}, nil)
			var resp fasthttp.ResponseHeader
			if err := resp.Read(bufioReader("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n" + tc.fields + "\r\n")); err != nil {
				t.Fatal(err)
			}
			FastResponse(&resp, false, nil)
			for side, got := range map[string][][]byte{"request": req.PeekAll("X-A"), "response": resp.PeekAll("X-A")} {
				want := strings.Count(tc.fields, "X-A:")
				if len(got) != want {
					t.Fatalf("%s: X-A %q, want %d lines", side, got, want)
				}
				for i, v := range got {
					if string(v) != fmt.Sprint(i+1) {
						t.Fatalf("%s: X-A lines %q, want 1, 2, ... in order", side, got)
					}
				}
			}
			if v := req.PeekAll("X-Drop"); len(v) != 0 {
				t.Fatalf("X-Drop %q survived", v)
			}
		})
	}
}
