package proxy

import (
	"bytes"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/ebb-proxy/ebb/proxy/proxytest"
)

// The tests here send HTTP/2 requests frame by frame through ebb to
// origins that record exactly what reaches them: a request RFC 9113
// calls malformed must reach no origin, and a trailer field must reach
// the origin, or the client, exactly once.

// h2Client speaks HTTP/2 to ebb frame by frame (h2c with prior
// knowledge), to send what net/http's client would not and to see every
// field ebb sends back. One request at a time.
type h2Client struct {
	t    *testing.T
	fr   *http2.Framer
	enc  *hpack.Encoder
	hbuf bytes.Buffer
	next uint32
}

func dialH2(t *testing.T, addr string) *h2Client {
	t.Helper()
	c := rawConn(t, addr)
	cl := &h2Client{t: t, fr: http2.NewFramer(c, c), next: 1}
	cl.enc = hpack.NewEncoder(&cl.hbuf)
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	if err := cl.fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	return cl
}

// h2Result is how ebb answered one request.
type h2Result struct {
	status   string
	body     string
	trailers []string // "name: value", as they came
	reset    bool
	code     http2.ErrCode // the RST_STREAM's, if reset
}

func (cl *h2Client) block(id uint32, end bool, fields [][2]string) {
	cl.t.Helper()
	cl.hbuf.Reset()
	for _, f := range fields {
		_ = cl.enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	if err := cl.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: cl.hbuf.Bytes(), EndStream: end, EndHeaders: true}); err != nil {
		cl.t.Fatal(err)
	}
}

// do sends a request (its header block, a DATA frame per piece of data,
// then its trailers; the last ends the stream) and reads ebb's answer
// to its end or reset.
func (cl *h2Client) do(fields [][2]string, data []string, trailers [][2]string) h2Result {
	cl.t.Helper()
	id := cl.next
	cl.next += 2
	cl.block(id, len(data) == 0 && len(trailers) == 0, fields)
	for i, d := range data {
		if err := cl.fr.WriteData(id, i == len(data)-1 && len(trailers) == 0, []byte(d)); err != nil {
			cl.t.Fatal(err)
		}
	}
	if len(trailers) > 0 {
		cl.block(id, true, trailers)
	}
	var r h2Result
	for {
		f, err := cl.fr.ReadFrame()
		if err != nil {
			cl.t.Fatalf("reading stream %d's answer: %v", id, err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				if err := cl.fr.WriteSettingsAck(); err != nil {
					cl.t.Fatal(err)
				}
			}
		case *http2.GoAwayFrame:
			cl.t.Fatalf("GOAWAY %v while waiting for stream %d", f.ErrCode, id)
		case *http2.RSTStreamFrame:
			if f.StreamID == id {
				r.reset, r.code = true, f.ErrCode
				return r
			}
		case *http2.HeadersFrame:
			if f.StreamID != id {
				continue
			}
			// ebb encodes without a dynamic table: each block decodes
			// alone.
			hf, err := hpack.NewDecoder(4096, nil).DecodeFull(f.HeaderBlockFragment())
			if err != nil {
				cl.t.Fatal(err)
			}
			// After the final response header, a block is trailers.
			trailers := r.status != "" && r.status[0] != '1'
			for _, h := range hf {
				switch {
				case trailers:
					r.trailers = append(r.trailers, h.Name+": "+h.Value)
				case h.Name == ":status":
					r.status = h.Value
				}
			}
			if f.StreamEnded() {
				return r
			}
		case *http2.DataFrame:
			if f.StreamID != id {
				continue
			}
			r.body += string(f.Data())
			if f.StreamEnded() {
				return r
			}
		}
	}
}

var h2Post = [][2]string{{":method", "POST"}, {":scheme", "http"}, {":authority", "app.test"}, {":path", "/upload"}}

// withFields returns base followed by more.
func withFields(base [][2]string, more ...[2]string) [][2]string {
	return append(append([][2]string(nil), base...), more...)
}

// TestH2MalformedNotForwarded sends requests RFC 9113 calls malformed
// through ebb to an HTTP/1 origin: each stream is reset with
// PROTOCOL_ERROR, and the origin receives nothing but the well-formed
// request sent after them on the same connection.
func TestH2MalformedNotForwarded(t *testing.T) {
	origin := newRawOrigin(t)
	e := startEbb(t, singleClusterYAML(origin.addr))
	cl := dialH2(t, e.addr("public"))
	get := [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", "app.test"}, {":path", "/"}}
	for _, tc := range []struct {
		name   string
		fields [][2]string
		data   []string
	}{
		{"END_STREAM on HEADERS with content-length", withFields(h2Post, [2]string{"content-length", "5"}), nil},
		{"content-length not a number", withFields(h2Post, [2]string{"content-length", "5x"}), []string{"hello"}},
		{"content-length repeated, different", withFields(h2Post, [2]string{"content-length", "5"}, [2]string{"content-length", "6"}), []string{"hello"}},
		{"leading space in a value", withFields(get, [2]string{"x-a", " 1"}), nil},
		{"trailing tab in a value", withFields(get, [2]string{"x-a", "1\t"}), nil},
		{"NUL in a value", withFields(get, [2]string{"x-a", "1\x002"}), nil},
		{"CRLF in a value", withFields(get, [2]string{"x-a", "1\r\nx-b: 2"}), nil},
		{"upper-case name", withFields(get, [2]string{"X-A", "1"}), nil},
		{"transfer-encoding", withFields(h2Post, [2]string{"transfer-encoding", "chunked"}), []string{"hello"}},
		{"te: gzip", withFields(get, [2]string{"te", "gzip"}), nil},
		{"host other than :authority", withFields(get, [2]string{"host", "admin.internal"}), nil},
		{":path without /", [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", "app.test"}, {":path", "admin"}}, nil},
		{"empty :path", [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", "app.test"}, {":path", ""}}, nil},
	} {
		r := cl.do(tc.fields, tc.data, nil)
		if !r.reset || r.code != http2.ErrCodeProtocol {
			t.Errorf("%s: got %+v, want RST_STREAM(PROTOCOL_ERROR)", tc.name, r)
		}
	}
	// The same connection goes on; the origin answers this one, so it has
	// recorded every request it received before.
	r := cl.do(withFields(get, [2]string{"host", "app.test"}), nil, nil)
	if r.reset || r.status != "200" || r.body != "ok" {
		t.Fatalf("a well-formed request after the malformed ones: %+v", r)
	}
	got := origin.received()
	if len(got) != 1 || !strings.HasPrefix(got[0], "GET / HTTP/1.1\r\n") || !strings.Contains(got[0], "\r\nHost: app.test\r\n") {
		t.Fatalf("the origin received %q, want only the well-formed request", got)
	}
}

// h1Trailer is a request with trailers sent through ebb to an HTTP/1
// origin, and the exact bytes the origin must receive after the request
// header: the chunked body and the trailer section.
type h1Trailer struct {
	name     string
	fields   [][2]string
	data     []string
	trailers [][2]string
	// trailerField is the Trailer field the head must have ("": none).
	trailerField string
	// chunked: the body goes chunked (else with the Content-Length).
	chunked bool
	rest    string
}

// TestH2RequestTrailersToHTTP1 sends requests with trailers, announced
// in a trailer field or not, through ebb to an HTTP/1 origin: the origin
// receives a chunked body whose trailer section holds each trailer field
// exactly once. A body read whole first (retries.buffer_body) goes
// chunked when it has trailers; one that streams with a Content-Length
// and announced none cannot carry them (HTTP/1.1 has trailers only after
// chunks), so they are dropped.
func TestH2RequestTrailersToHTTP1(t *testing.T) {
	origin := newRawOrigin(t)
	e := startEbb(t, oneClusterYAML(origin.addr, nil, []string{"retries: { buffer_body: 4 }"}))
	cl := dialH2(t, e.addr("public"))
	announce := [2]string{"trailer", "x-sum, x-note"}
	two := [][2]string{{"x-sum", "1"}, {"x-note", "a"}}
	chunks := "5\r\nhello\r\n0\r\n"
	for _, tc := range []h1Trailer{
		{name: "announced", fields: withFields(h2Post, announce), data: []string{"hello"}, trailers: two,
			trailerField: "X-Sum, X-Note", chunked: true, rest: chunks + "X-Sum: 1\r\nX-Note: a\r\n\r\n"},
		{name: "not announced", fields: h2Post, data: []string{"hello"}, trailers: two,
			chunked: true, rest: chunks + "X-Sum: 1\r\nX-Note: a\r\n\r\n"},
		{name: "announced, with content-length", fields: withFields(h2Post, announce, [2]string{"content-length", "5"}), data: []string{"hello"}, trailers: two,
			trailerField: "X-Sum, X-Note", chunked: true, rest: chunks + "X-Sum: 1\r\nX-Note: a\r\n\r\n"},
		{name: "not announced, content-length, buffered", fields: withFields(h2Post, [2]string{"content-length", "3"}), data: []string{"abc"}, trailers: two,
			trailerField: "X-Sum, X-Note", chunked: true, rest: "3\r\nabc\r\n0\r\nX-Sum: 1\r\nX-Note: a\r\n\r\n"},
		{name: "not announced, content-length, streamed", fields: withFields(h2Post, [2]string{"content-length", "5"}), data: []string{"hello"}, trailers: two,
			rest: "hello"},
		{name: "a name twice", fields: withFields(h2Post, [2]string{"trailer", "x-sum"}), data: []string{"hello"}, trailers: [][2]string{{"x-sum", "1"}, {"x-sum", "2"}},
			trailerField: "X-Sum", chunked: true, rest: chunks + "X-Sum: 1\r\nX-Sum: 2\r\n\r\n"},
		{name: "names HTTP/1.1 forbids in trailers", fields: h2Post, data: []string{"hello"}, trailers: [][2]string{{"content-length", "9"}, {"host", "evil.test"}, {"x-ok", "1"}},
			chunked: true, rest: chunks + "X-Ok: 1\r\n\r\n"},
	} {
		before := len(origin.received())
		r := cl.do(tc.fields, tc.data, tc.trailers)
		if r.reset || r.status != "200" || r.body != "ok" {
			t.Errorf("%s: got %+v, want 200 \"ok\"", tc.name, r)
			continue
		}
		got := origin.received()
		if len(got) != before+1 {
			t.Errorf("%s: the origin received %d requests, want 1", tc.name, len(got)-before)
			continue
		}
		head, rest, _ := strings.Cut(got[before], "\r\n\r\n")
		if rest != tc.rest {
			t.Errorf("%s: after the head the origin received %q, want %q", tc.name, rest, tc.rest)
		}
		var trailer []string
		hasCL, isChunked := false, false
		for _, line := range strings.Split(head, "\r\n")[1:] {
			k, v, _ := strings.Cut(line, ": ")
			switch strings.ToLower(k) {
			case "trailer":
				trailer = append(trailer, v)
			case "content-length":
				hasCL = true
			case "transfer-encoding":
				isChunked = v == "chunked"
			}
		}
		if want := []string{tc.trailerField}; tc.trailerField == "" && len(trailer) != 0 || tc.trailerField != "" && !slices.Equal(trailer, want) {
			t.Errorf("%s: Trailer fields %q, want %q", tc.name, trailer, tc.trailerField)
		}
		if isChunked != tc.chunked || hasCL == tc.chunked {
			t.Errorf("%s: head %q, want chunked %v (and a Content-Length otherwise)", tc.name, head, tc.chunked)
		}
	}
}

// h2cRequest is what the raw h2c origin received on one stream: its
// regular fields and its trailers as "name: value", in order, its body,
// and the frame that ended it ("HEADERS", "DATA", or "empty DATA").
type h2cRequest struct {
	fields, trailers []string
	body, end        string
}

// rawH2COrigin is an h2c origin, frame by frame, that reports each
// request it receives and answers it with 200, "ok" and respTrailers (if
// any) in a trailing HEADERS frame.
func rawH2COrigin(t *testing.T, respTrailers [][2]string) (addr string, got <-chan h2cRequest) {
	ch := make(chan h2cRequest, 64) // more than a test sends: a send never blocks
	reqs := map[*proxytest.H2CConn]map[uint32]*h2cRequest{}
	var mu sync.Mutex // reqs: each connection's, on its own goroutine
	addr = proxytest.H2CFrames(t, true, func(c *proxytest.H2CConn, f http2.Frame) bool {
		mu.Lock()
		streams := reqs[c]
		if streams == nil {
			streams = map[uint32]*h2cRequest{}
			reqs[c] = streams
		}
		mu.Unlock()
		var id uint32
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			id = f.StreamID
			r := streams[id]
			if r == nil {
				r = &h2cRequest{}
				streams[id] = r
				for _, h := range f.RegularFields() {
					r.fields = append(r.fields, h.Name+": "+h.Value)
				}
			} else {
				for _, h := range f.RegularFields() {
					r.trailers = append(r.trailers, h.Name+": "+h.Value)
				}
			}
			if !f.StreamEnded() {
				return true
			}
			r.end = "HEADERS"
		case *http2.DataFrame:
			id = f.StreamID
			r := streams[id]
			if r == nil {
				return true
			}
			r.body += string(f.Data())
			if !f.StreamEnded() {
				return true
			}
			r.end = "DATA"
			if len(f.Data()) == 0 {
				r.end = "empty DATA"
			}
		default:
			return true
		}
		r := streams[id]
		delete(streams, id)
		ch <- *r
		if c.Fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.Block([][2]string{{":status", "200"}}), EndHeaders: true}) != nil ||
			c.Fr.WriteData(id, len(respTrailers) == 0, []byte("ok")) != nil {
			return false
		}
		return len(respTrailers) == 0 || c.Fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.Block(respTrailers), EndStream: true, EndHeaders: true}) == nil
	})
	return addr, ch
}

// TestH2RequestTrailersToH2C sends requests with trailers, announced or
// not, through ebb to an h2c origin (ebb's HTTP/2 client): the origin
// receives each trailer field once, and the announcing trailer field
// once.
func TestH2RequestTrailersToH2C(t *testing.T) {
	addr, got := rawH2COrigin(t, nil)
	e := startEbb(t, oneClusterYAML(addr, nil, []string{"protocol: h2c", "retries: { buffer_body: 4 }"}))
	cl := dialH2(t, e.addr("public"))
	two := [][2]string{{"x-sum", "1"}, {"x-note", "a"}}
	for _, tc := range []struct {
		name         string
		fields       [][2]string
		data         []string
		trailers     [][2]string
		trailerField []string // the trailer fields the origin must receive, sorted
		want         []string // the trailers it must receive, sorted
		end          string   // the frame that must end the request upstream
	}{
		{"announced", withFields(h2Post, [2]string{"trailer", "x-sum, x-note"}), []string{"hel", "lo"}, two,
			[]string{"trailer: X-Note,X-Sum"}, []string{"x-note: a", "x-sum: 1"}, "HEADERS"},
		{"announced, with content-length", withFields(h2Post, [2]string{"trailer", "x-sum, x-note"}, [2]string{"content-length", "5"}), []string{"hello"}, two,
			[]string{"trailer: X-Note,X-Sum"}, []string{"x-note: a", "x-sum: 1"}, "HEADERS"},
		{"not announced", h2Post, []string{"hel", "lo"}, two,
			nil, []string{"x-note: a", "x-sum: 1"}, "HEADERS"},
		{"not announced, content-length, streamed", withFields(h2Post, [2]string{"content-length", "5"}), []string{"hello"}, two,
			nil, []string{"x-note: a", "x-sum: 1"}, "HEADERS"},
		{"not announced, content-length, buffered", withFields(h2Post, [2]string{"content-length", "3"}), []string{"abc"}, two,
			[]string{"trailer: X-Note,X-Sum"}, []string{"x-note: a", "x-sum: 1"}, "HEADERS"},
		{"a name twice", withFields(h2Post, [2]string{"trailer", "x-sum"}), []string{"hello"}, [][2]string{{"x-sum", "1"}, {"x-sum", "2"}},
			[]string{"trailer: X-Sum"}, []string{"x-sum: 1", "x-sum: 2"}, "HEADERS"},
		{"framing names dropped", h2Post, []string{"hello"}, [][2]string{{"content-length", "9"}, {"host", "evil.test"}, {"x-ok", "1"}},
			nil, []string{"x-ok: 1"}, "HEADERS"},
		// Without trailers, a body that may have had some ends with an
		// empty DATA frame; a gRPC request, which never has any, with
		// its last DATA frame, as the client sent it.
		{"no trailers", h2Post, []string{"hello"}, nil, nil, nil, "empty DATA"},
		{"gRPC, no trailers", withFields(h2Post, [2]string{"content-type", "application/grpc"}), []string{"\x00\x00\x00\x00\x00"}, nil,
			nil, nil, "DATA"},
		{"gRPC, announced", withFields(h2Post, [2]string{"content-type", "application/grpc"}, [2]string{"trailer", "x-sum"}), []string{"\x00\x00\x00\x00\x00"}, [][2]string{{"x-sum", "1"}},
			[]string{"trailer: X-Sum"}, []string{"x-sum: 1"}, "HEADERS"},
	} {
		r := cl.do(tc.fields, tc.data, tc.trailers)
		if r.reset || r.status != "200" || r.body != "ok" {
			t.Fatalf("%s: got %+v, want 200 \"ok\"", tc.name, r)
		}
		req := recv(t, got, tc.name+"'s request at the origin")
		var trailerField []string
		for _, f := range req.fields {
			if strings.HasPrefix(f, "trailer: ") {
				trailerField = append(trailerField, f)
			}
		}
		if !slices.Equal(trailerField, tc.trailerField) {
			t.Errorf("%s: the origin's trailer fields %q, want %q", tc.name, trailerField, tc.trailerField)
		}
		// The order of the names is not what this test checks: what the
		// origin received is sorted by name, as the expected fields are
		// written, a name's values kept in their order.
		slices.SortStableFunc(req.trailers, func(a, b string) int {
			an, _, _ := strings.Cut(a, ":")
			bn, _, _ := strings.Cut(b, ":")
			return strings.Compare(an, bn)
		})
		if want := strings.Join(tc.data, ""); req.body != want || !slices.Equal(req.trailers, tc.want) || req.end != tc.end {
			t.Errorf("%s: the origin received body %q, trailers %q, ended by %s; want %q, %q, %s", tc.name, req.body, req.trailers, req.end, want, tc.want, tc.end)
		}
	}
}

// TestH2ResponseTrailersOnce has an HTTP/1 origin and an h2c origin
// answer with trailers, one announced and one not: the HTTP/2 client
// receives each once, in the HEADERS frame that ends the stream.
func TestH2ResponseTrailersOnce(t *testing.T) {
	h1 := proxytest.RawOrigin(t, []byte("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum\r\n\r\n"+
		"2\r\nok\r\n0\r\nX-Sum: 1\r\nX-Late: 2\r\n\r\n"))
	h2c, _ := rawH2COrigin(t, [][2]string{{"x-sum", "1"}, {"x-late", "2"}})
	for _, up := range []struct{ name, yaml string }{
		{"HTTP/1 origin", singleClusterYAML(h1)},
		{"h2c origin", oneClusterYAML(h2c, nil, []string{"protocol: h2c"})},
	} {
		t.Run(up.name, func(t *testing.T) {
			e := startEbb(t, up.yaml)
			cl := dialH2(t, e.addr("public"))
			get := [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", "app.test"}, {":path", "/"}}
			r := cl.do(get, nil, nil)
			slices.Sort(r.trailers)
			if r.reset || r.status != "200" || r.body != "ok" || !slices.Equal(r.trailers, []string{"x-late: 2", "x-sum: 1"}) {
				t.Fatalf("got %+v, want 200 \"ok\" with the trailers x-late: 2 and x-sum: 1, once each", r)
			}
		})
	}
}
