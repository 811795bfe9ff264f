package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"golang.org/x/net/http2"

	"github.com/ebb-proxy/ebb/proxy/forward"
	"github.com/ebb-proxy/ebb/proxy/proxytest"
)

// h2Answer is what a raw HTTP/2 origin answers a stream with: a header
// block (fields in order, names as written, which may break HTTP/2's
// rules), then data, each DATA frame as given, the last one ending the
// stream ("" and no data: the header block ends it).
type h2Answer struct {
	fields [][2]string
	data   []string
}

// rawH2Origin is an HTTP/2 (h2c) origin that answers each stream as
// answers says for its :path, "200 <path>" for any other.
func rawH2Origin(t *testing.T, answers map[string]h2Answer) string {
	return proxytest.H2CFrames(t, true, func(c *proxytest.H2CConn, f http2.Frame) bool {
		h, ok := f.(*http2.MetaHeadersFrame)
		if !ok {
			return true
		}
		path := h.PseudoValue("path")
		a, ok := answers[path]
		if !ok {
			a = h2Answer{fields: [][2]string{{":status", "200"}, {"content-length", fmt.Sprint(len(path))}}, data: []string{path}}
		}
		err := c.Fr.WriteHeaders(http2.HeadersFrameParam{StreamID: h.StreamID, BlockFragment: c.Block(a.fields), EndHeaders: true, EndStream: len(a.data) == 0})
		for i, d := range a.data {
			if err == nil {
				err = c.Fr.WriteData(h.StreamID, i == len(a.data)-1, []byte(d))
			}
		}
		return err == nil
	})
}

// TestBrokenH2Origin plays an HTTP/2 origin that breaks the framing of a
// response or the rules of its fields, for an HTTP/1.1 and an HTTP/2
// client: the client gets the response as its framing says (no body after
// a 204, a 304 or a HEAD answer; a body cut where its content-length says
// it is wrong) or a 502, and the next request, on the same upstream
// connection, gets its own answer.
func TestBrokenH2Origin(t *testing.T) {
	answers := map[string]h2Answer{
		"/head-data":   {fields: [][2]string{{":status", "200"}, {"content-length", "8"}}, data: []string{"SMUGGLED"}},
		"/204-data":    {fields: [][2]string{{":status", "204"}}, data: []string{"SMUGGLED"}},
		"/304-data":    {fields: [][2]string{{":status", "304"}, {"content-length", "8"}}, data: []string{"SMUGGLED"}},
		"/more":        {fields: [][2]string{{":status", "200"}, {"content-length", "5"}}, data: []string{"hello", " world"}},
		"/fewer":       {fields: [][2]string{{":status", "200"}, {"content-length", "10"}}, data: []string{"hello", ""}},
		"/space":       {fields: [][2]string{{":status", "200"}, {"x bad", "1"}, {"content-length", "2"}}, data: []string{"ok"}},
		"/upper":       {fields: [][2]string{{":status", "200"}, {"X-Upper", "1"}, {"content-length", "2"}}, data: []string{"ok"}},
		"/nul":         {fields: [][2]string{{":status", "200"}, {"x-a", "a\x00b"}, {"content-length", "2"}}, data: []string{"ok"}},
		"/connection":  {fields: [][2]string{{":status", "200"}, {"connection", "keep-alive"}, {"content-length", "2"}}, data: []string{"ok"}},
		"/101":         {fields: [][2]string{{":status", "101"}}},
		"/no-type":     {fields: [][2]string{{":status", "200"}, {"content-length", "2"}}, data: []string{"ok"}},
		"/no-status":   {fields: [][2]string{{"content-length", "2"}}, data: []string{"ok"}},
		"/pseudo-late": {fields: [][2]string{{"x-a", "1"}, {":status", "200"}}, data: []string{"ok"}},
		"/status-2000": {fields: [][2]string{{":status", "2000"}, {"content-length", "2"}}, data: []string{"ok"}},
	}
	for _, down := range []proxytest.Downstream{proxytest.DownH1, proxytest.DownH2C} {
		for _, tc := range []struct {
			method, path string
			status       int
			body         string
			cut          bool // the body stops short, with an error
		}{
			{"HEAD", "/head-data", 200, "", false},
			{"GET", "/204-data", 204, "", false},
			{"GET", "/304-data", 304, "", false},
			{"GET", "/more", 200, "hello", true},
			{"GET", "/fewer", 200, "hello", true},
			{"GET", "/space", 502, forward.MsgUpstreamInvalid, false},
			{"GET", "/upper", 502, forward.MsgUpstreamInvalid, false},
			{"GET", "/nul", 502, forward.MsgUpstreamInvalid, false},
			{"GET", "/connection", 200, "ok", false},
			{"GET", "/101", 502, forward.MsgUpstreamInvalid, false},
			{"GET", "/no-type", 200, "ok", false},
			{"GET", "/no-status", 502, forward.MsgUpstreamInvalid, false},
			{"GET", "/pseudo-late", 502, forward.MsgUpstreamInvalid, false},
			{"GET", "/status-2000", 502, forward.MsgUpstreamInvalid, false},
		} {
			name := map[proxytest.Downstream]string{proxytest.DownH1: "h1", proxytest.DownH2C: "h2c"}[down] + tc.path
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				origin := rawH2Origin(t, answers)
				e := startEbb(t, oneClusterYAML(origin, nil, []string{"protocol: h2c"}))
				status, header, body, err := h2BrokenExchange(t, down, e.addr("public"), tc.method, tc.path)
				switch {
				case (err != nil) != tc.cut:
					t.Errorf("the client got %d %q (error %v), want %d %q (cut: %v)", status, body, err, tc.status, tc.body, tc.cut)
				case status == 0 && tc.cut:
					// The body failed before a byte of the response had
					// left: the HTTP/1.1 client's connection closed, the
					// HTTP/2 client's stream was reset.
				case status != tc.status || body != tc.body:
					t.Errorf("the client got %d %q (error %v), want %d %q (cut: %v)", status, body, err, tc.status, tc.body, tc.cut)
				}
				if tc.path == "/connection" && header.Get("Connection") != "" {
					t.Errorf("the client got Connection %q", header.Get("Connection"))
				}
				if tc.path == "/no-type" && header.Get("Content-Type") != "" {
					t.Errorf("the client got Content-Type %q, where the origin sent none", header.Get("Content-Type"))
				}
				if (tc.status == 204 || tc.status == 304) && header.Get("Content-Length") != "" {
					t.Errorf("the client got Content-Length %q on a %d", header.Get("Content-Length"), tc.status)
				}
				status, _, body, err = h2BrokenExchange(t, down, e.addr("public"), "GET", "/next")
				if status != 200 || body != "/next" || err != nil {
					t.Fatalf("the next request got %d %q (%v), want its own 200 \"/next\"", status, body, err)
				}
			})
		}
	}
}

// h2BrokenExchange is brokenExchange returning, rather than failing on,
// an error reading the response (HTTP/1.1) or its body: a response cut
// short is an expected outcome.
func h2BrokenExchange(t *testing.T, down proxytest.Downstream, addr, method, path string) (int, http.Header, string, error) {
	t.Helper()
	var resp *http.Response
	if down == proxytest.DownH1 {
		c := rawConn(t, addr)
		fmt.Fprintf(c, "%s %s HTTP/1.1\r\nHost: a\r\n\r\n", method, path)
		var err error
		resp, err = http.ReadResponse(bufio.NewReader(c), &http.Request{Method: method})
		if err != nil {
			return 0, nil, "", err
		}
	} else {
		client := proxytest.ModeClient(t, proxytest.Mode{Down: down}, nil)
		req, err := http.NewRequestWithContext(t.Context(), method, "http://"+addr+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if resp, err = client.Do(req); err != nil {
			// The stream reset before its header block left (the body
			// failed at once).
			return 0, nil, "", err
		}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, strings.Clone(string(b)), err
}
