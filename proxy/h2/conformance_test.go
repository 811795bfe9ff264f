package h2

import (
	"errors"
	"io"
	"strings"
	"testing"

	"golang.org/x/net/http2"
)

// The tests here hold the engine to RFC 9113's rules for requests
// (§8.1.1, §8.2, §8.3.1): a malformed request is a stream error of type
// PROTOCOL_ERROR, and the connection goes on.

// served is what a conformance test's handler saw of one request.
type served struct {
	authority, path, body, trailers string
	err                             error // the body's read
}

// outcome is how a request ended, as the test expects it.
type outcome int

const (
	// refused: RST_STREAM(PROTOCOL_ERROR) and the handler never ran.
	refused outcome = iota
	// resetMidway: the handler ran (the header block was well formed),
	// then RST_STREAM(PROTOCOL_ERROR), and its read of the body failed.
	resetMidway
	// answered: the handler read the body whole and answered 200.
	answered
)

func (o outcome) String() string {
	return [...]string{"refused", "reset midway", "answered"}[o]
}

// requestCase is one request: its header block, then its DATA frames,
// then its trailers; the last of them ends the stream.
type requestCase struct {
	name     string
	fields   [][2]string
	data     []string
	trailers [][2]string
	want     outcome
}

var getFields = [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", "example.com"}, {":path", "/"}}

// with returns base followed by more.
func with(base [][2]string, more ...[2]string) [][2]string {
	return append(append([][2]string(nil), base...), more...)
}

// runRequestCases sends each case on a stream of one connection, one at a
// time, and checks how it ended. Each case's header block ends with an
// x-case field naming it, which the handler reports with what it saw; once
// every case is done the connection is closed, and when it has been
// served to its end (every handler returned), the reports are exactly
// those of the cases the handler was to see.
func runRequestCases(t *testing.T, cases []requestCase, check func(t *testing.T, tc requestCase, s served)) {
	t.Helper()
	reports := make(chan [2]any, len(cases))
	addr, conns, _ := testServer(t, HandlerFunc(func(st *Stream) {
		s := served{authority: string(st.Authority()), path: string(st.Path())}
		b, err := io.ReadAll(st.Body())
		s.body, s.err = string(b), err
		if err == nil {
			var tr []string
			for i := range st.Trailers().Len() {
				k, v := st.Trailers().At(i)
				tr = append(tr, string(k)+": "+string(v))
			}
			s.trailers = strings.Join(tr, "\n")
		}
		reports <- [2]any{string(st.Fields().Get("x-case")), s}
		reply(st, "ok")
	}))
	rc := dialRaw(t, addr)
	cn := <-conns
	id := uint32(1)
	for _, tc := range cases {
		last := len(tc.data) == 0 && len(tc.trailers) == 0
		rc.headers(id, last, with(tc.fields, [2]string{"x-case", tc.name})...)
		for i, d := range tc.data {
			if err := rc.fr.WriteData(id, i == len(tc.data)-1 && len(tc.trailers) == 0, []byte(d)); err != nil {
				t.Fatal(err)
			}
		}
		if len(tc.trailers) > 0 {
			rc.headers(id, true, tc.trailers...)
		}
		f := rc.until(tc.name, func(f http2.Frame) bool { return rstOf(id)(f) || endOf(id)(f) })
		if tc.want == answered {
			if r, ok := f.(*http2.RSTStreamFrame); ok {
				t.Errorf("%s: RST_STREAM %v, want an answer", tc.name, r.ErrCode)
			}
		} else if r, ok := f.(*http2.RSTStreamFrame); !ok || r.ErrCode != http2.ErrCodeProtocol {
			t.Errorf("%s: got %v, want RST_STREAM(PROTOCOL_ERROR)", tc.name, f)
		}
		id += 2
	}
	rc.conn.Close()
	<-cn.Done() // every handler has returned: every report is in
	close(reports)
	got := map[string]served{}
	for r := range reports {
		got[r[0].(string)] = r[1].(served)
	}
	for _, tc := range cases {
		s, ran := got[tc.name]
		switch {
		case tc.want == refused && ran:
			t.Errorf("%s: the handler saw the request (%+v); it must be refused before", tc.name, s)
		case tc.want != refused && !ran:
			t.Errorf("%s: the handler never saw the request", tc.name)
		case tc.want == resetMidway && !errors.Is(s.err, ErrStreamReset):
			t.Errorf("%s: the handler's read ended with %v (body %q), want ErrStreamReset", tc.name, s.err, s.body)
		case tc.want == answered && s.err != nil:
			t.Errorf("%s: the handler's read failed: %v", tc.name, s.err)
		case tc.want == answered && check != nil:
			check(t, tc, s)
		}
	}
}

// checkBodyAndTrailers checks that an answered case's handler read the
// body and trailers the case sent.
func checkBodyAndTrailers(t *testing.T, tc requestCase, s served) {
	var tr []string
	for _, f := range tc.trailers {
		tr = append(tr, f[0]+": "+f[1])
	}
	if want := strings.Join(tc.data, ""); s.body != want {
		t.Errorf("%s: the handler read %q, want %q", tc.name, s.body, want)
	}
	if want := strings.Join(tr, "\n"); s.trailers != want {
		t.Errorf("%s: the handler's trailers %q, want %q", tc.name, s.trailers, want)
	}
}

// TestContentLength covers RFC 9113 §8.1.1: a request is malformed if
// its content-length is not the length of its DATA frames, a HEADERS
// frame that ends the stream included, trailers or not; or if its
// content-length is not one number.
func TestContentLength(t *testing.T) {
	upload := with(getFields[:3], [2]string{":path", "/upload"})
	upload[0][1] = "POST"
	cl := func(v ...string) [][2]string {
		f := with(upload)
		for _, v := range v {
			f = append(f, [2]string{"content-length", v})
		}
		return f
	}
	trailer := [][2]string{{"x-sum", "1"}}
	runRequestCases(t, []requestCase{
		{name: "END_STREAM on HEADERS, content-length 5", fields: cl("5"), want: refused},
		{name: "END_STREAM on HEADERS, content-length 1", fields: cl("1"), want: refused},
		{name: "END_STREAM on HEADERS, content-length 0", fields: cl("0"), want: answered},
		{name: "END_STREAM on HEADERS, GET with content-length 3", fields: with(getFields, [2]string{"content-length", "3"}), want: refused},
		{name: "not a number", fields: cl("abc"), data: []string{"abc"}, want: refused},
		{name: "negative", fields: cl("-3"), data: []string{"abc"}, want: refused},
		{name: "empty", fields: cl(""), data: []string{"abc"}, want: refused},
		{name: "a list", fields: cl("3, 3"), data: []string{"abc"}, want: refused},
		{name: "a sign", fields: cl("+3"), data: []string{"abc"}, want: refused},
		{name: "too large a number", fields: cl("9999999999999999999"), data: []string{"abc"}, want: refused},
		{name: "repeated, different", fields: cl("3", "4"), data: []string{"abc"}, want: refused},
		{name: "repeated, same", fields: cl("3", "3"), data: []string{"abc"}, want: answered},
		{name: "DATA longer", fields: cl("2"), data: []string{"ab", "c"}, want: resetMidway},
		{name: "DATA shorter", fields: cl("5"), data: []string{"ab", "c"}, want: resetMidway},
		{name: "DATA equal", fields: cl("3"), data: []string{"ab", "c"}, want: answered},
		{name: "DATA shorter, then trailers", fields: cl("5"), data: []string{"abc"}, trailers: trailer, want: resetMidway},
		{name: "no DATA, then trailers", fields: cl("5"), trailers: trailer, want: resetMidway},
		{name: "DATA equal, then trailers", fields: cl("3"), data: []string{"abc"}, trailers: trailer, want: answered},
		{name: "no content-length, then trailers", fields: upload, data: []string{"abc"}, trailers: trailer, want: answered},
	}, checkBodyAndTrailers)
}

// TestFieldValidity covers RFC 9113 §8.2: field names and values HTTP/2
// forbids, in the header block and in trailers, and the
// connection-specific fields of §8.2.2.
func TestFieldValidity(t *testing.T) {
	upload := with(getFields[:3], [2]string{":path", "/upload"})
	upload[0][1] = "POST"
	var cases []requestCase
	for _, f := range []struct {
		name  string
		field [2]string
		want  outcome
	}{
		// §8.2.1: values.
		{"leading space", [2]string{"x-v", " v"}, refused},
		{"trailing space", [2]string{"x-v", "v "}, refused},
		{"leading tab", [2]string{"x-v", "\tv"}, refused},
		{"trailing tab", [2]string{"x-v", "v\t"}, refused},
		{"only a space", [2]string{"x-v", " "}, refused},
		{"NUL", [2]string{"x-v", "a\x00b"}, refused},
		{"CR", [2]string{"x-v", "a\rb"}, refused},
		{"LF", [2]string{"x-v", "a\nb"}, refused},
		{"CRLF injection", [2]string{"x-v", "a\r\nx-injected: 1"}, refused},
		{"DEL", [2]string{"x-v", "a\x7fb"}, refused},
		{"inner space and tab", [2]string{"x-v", "a b\tc"}, answered},
		{"empty value", [2]string{"x-v", ""}, answered},
		{"obs-text", [2]string{"x-v", "caf\xc3\xa9"}, answered},
		// §8.2.1: names.
		{"upper-case name", [2]string{"X-V", "1"}, refused},
		{"space in a name", [2]string{"x v", "1"}, refused},
		{"colon in a name", [2]string{"x:v", "1"}, refused},
		{"separator in a name", [2]string{"x(v)", "1"}, refused},
		{"NUL in a name", [2]string{"x\x00v", "1"}, refused},
		{"non-ASCII name", [2]string{"x\xc3\xa9", "1"}, refused},
		{"empty name", [2]string{"", "1"}, refused},
		// §8.2.2: connection-specific fields.
		{"connection", [2]string{"connection", "close"}, refused},
		{"keep-alive", [2]string{"keep-alive", "timeout=5"}, refused},
		{"proxy-connection", [2]string{"proxy-connection", "keep-alive"}, refused},
		{"transfer-encoding", [2]string{"transfer-encoding", "chunked"}, refused},
		{"upgrade", [2]string{"upgrade", "websocket"}, refused},
		{"te: gzip", [2]string{"te", "gzip"}, refused},
		{"te: trailers, deflate", [2]string{"te", "trailers, deflate"}, refused},
		{"te: empty", [2]string{"te", ""}, refused},
		{"te: trailers", [2]string{"te", "trailers"}, answered},
	} {
		cases = append(cases, requestCase{name: "header: " + f.name, fields: with(getFields, f.field), want: f.want})
		// In trailers, the header block was fine: the handler runs, then
		// the trailers reset the stream.
		tw := f.want
		if tw == refused {
			tw = resetMidway
		}
		cases = append(cases, requestCase{name: "trailer: " + f.name, fields: upload, data: []string{"abc"}, trailers: [][2]string{f.field}, want: tw})
	}
	cases = append(cases,
		requestCase{name: "trailer: pseudo-header field", fields: upload, data: []string{"abc"}, trailers: [][2]string{{":path", "/"}}, want: resetMidway},
		requestCase{name: "pseudo: space in :scheme", fields: [][2]string{{":method", "GET"}, {":scheme", "http "}, {":authority", "example.com"}, {":path", "/"}}, want: refused},
		requestCase{name: "pseudo: NUL in :scheme", fields: [][2]string{{":method", "GET"}, {":scheme", "ht\x00tp"}, {":authority", "example.com"}, {":path", "/"}}, want: refused},
		requestCase{name: "pseudo: space in :authority", fields: [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", " example.com"}, {":path", "/"}}, want: refused},
		requestCase{name: "pseudo: tab in :method", fields: [][2]string{{":method", "GET\t"}, {":scheme", "http"}, {":authority", "example.com"}, {":path", "/"}}, want: refused},
	)
	runRequestCases(t, cases, nil)
}

// TestPseudoHeaders covers RFC 9113 §8.3.1: :path, and a host field
// beside :authority. ebb refuses a host that names another target than
// :authority (the RFC's SHOULD): an upstream that reads host would see
// another request than the one ebb routed. Without :authority, the host
// field is the authority.
func TestPseudoHeaders(t *testing.T) {
	req := func(method, path string, more ...[2]string) [][2]string {
		return with([][2]string{{":method", method}, {":scheme", "http"}, {":authority", "example.com"}, {":path", path}}, more...)
	}
	noAuthority := func(more ...[2]string) [][2]string {
		return with([][2]string{{":method", "GET"}, {":scheme", "http"}, {":path", "/"}}, more...)
	}
	cases := []requestCase{
		{name: "empty :path", fields: req("GET", ""), want: refused},
		{name: ":path without /", fields: req("GET", "index.html"), want: refused},
		{name: ":path absolute", fields: req("GET", "http://example.com/"), want: refused},
		{name: ":path * for GET", fields: req("GET", "*"), want: refused},
		{name: ":path * for OPTIONS", fields: req("OPTIONS", "*"), want: answered},
		{name: ":path without / for OPTIONS", fields: req("OPTIONS", "x"), want: refused},
		{name: ":path /", fields: req("GET", "/?q=1"), want: answered},
		{name: "host as :authority", fields: req("GET", "/", [2]string{"host", "example.com"}), want: answered},
		{name: "host as :authority, another case", fields: req("GET", "/", [2]string{"host", "Example.COM"}), want: answered},
		{name: "host other than :authority", fields: req("GET", "/", [2]string{"host", "admin.internal"}), want: refused},
		{name: "host with a port :authority lacks", fields: req("GET", "/", [2]string{"host", "example.com:8080"}), want: refused},
		{name: "second host other than :authority", fields: req("GET", "/", [2]string{"host", "example.com"}, [2]string{"host", "admin.internal"}), want: refused},
		{name: "host without :authority", fields: noAuthority([2]string{"host", "other.example"}), want: answered},
		{name: "two hosts without :authority", fields: noAuthority([2]string{"host", "other.example"}, [2]string{"host", "admin.internal"}), want: refused},
	}
	runRequestCases(t, cases, func(t *testing.T, tc requestCase, s served) {
		want := "example.com"
		if tc.name == "host without :authority" {
			want = "other.example"
		}
		if s.authority != want {
			t.Errorf("%s: the handler's authority %q, want %q", tc.name, s.authority, want)
		}
		var path string
		for _, f := range tc.fields {
			if f[0] == ":path" {
				path = f[1]
			}
		}
		if s.path != path {
			t.Errorf("%s: the handler's path %q, want %q", tc.name, s.path, path)
		}
	})
}
