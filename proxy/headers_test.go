package proxy

import (
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

func TestStripHopByHopRequest(t *testing.T) {
	tests := []struct {
		name        string
		raw         string // header lines after the request line
		keepUpgrade bool
		gone, kept  []string
	}{
		{
			name: "nothing to strip",
			raw:  "X-Ok: 1\r\nAccept: */*\r\n",
			kept: []string{"X-Ok", "Accept"},
		},
		{
			name: "fixed hop-by-hop set",
			raw:  "Keep-Alive: timeout=5\r\nProxy-Connection: keep-alive\r\nTE: trailers\r\nTrailer: X-T\r\nUpgrade: h2c\r\nX-Ok: 1\r\n",
			gone: []string{"Keep-Alive", "Proxy-Connection", "Te", "Upgrade"},
			kept: []string{"X-Ok"},
		},
		{
			name: "headers named by Connection",
			raw:  "Connection: keep-alive, X-Secret ,x-other, X-A, X-B, X-C, X-D, X-E, X-F, X-G\r\nX-Secret: s\r\nX-Other: o\r\nX-Ok: 1\r\nX-G: g\r\nX-A: a\r\nX-F: f\r\n",
			gone: []string{"Connection", "X-Secret", "X-Other", "X-A", "X-F", "X-G"},
			kept: []string{"X-Ok"},
		},
		{
			name: "Connection cannot remove framing or routing headers",
			raw:  "Connection: Content-Length, Host, Transfer-Encoding\r\nContent-Length: 3\r\n",
			gone: []string{"Connection"},
			kept: []string{"Content-Length", "Host"},
		},
		{
			name: "Connection on several lines",
			raw:  "Connection: keep-alive\r\nConnection: X-Secret\r\nX-Secret: s\r\nX-Ok: 1\r\n",
			gone: []string{"Connection", "X-Secret"},
			kept: []string{"X-Ok"},
		},
		{
			name:        "upgrade forwarded on purpose",
			raw:         "Connection: Upgrade\r\nUpgrade: websocket\r\nKeep-Alive: 5\r\n",
			keepUpgrade: true,
			gone:        []string{"Keep-Alive"},
			kept:        []string{"Connection", "Upgrade"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var h fasthttp.RequestHeader
			raw := "POST / HTTP/1.1\r\nHost: example.com\r\n" + tt.raw + "\r\n"
			if err := h.Read(bufioReader(raw)); err != nil {
				t.Fatal(err)
			}
			stripRequestHopByHop(&h, tt.keepUpgrade)
			for _, k := range tt.gone {
				if v := h.Peek(k); len(v) > 0 {
					t.Errorf("%s: %q survived", k, v)
				}
			}
			for _, k := range tt.kept {
				if k == "Content-Length" {
					if h.ContentLength() != 3 {
						t.Errorf("Content-Length = %d", h.ContentLength())
					}
					continue
				}
				if len(h.Peek(k)) == 0 {
					t.Errorf("%s was removed", k)
				}
			}
		})
	}
}

func TestHopIndexes(t *testing.T) {
	if hopByHop[hopConnection] != "Connection" || hopByHop[hopUpgrade] != "Upgrade" {
		t.Fatal("hopConnection or hopUpgrade does not index hopByHop")
	}
}

func TestStripHopByHopAllocs(t *testing.T) {
	var h fasthttp.ResponseHeader
	raw := "HTTP/1.1 200 OK\r\nConnection: keep-alive, X-Hop\r\nKeep-Alive: timeout=5\r\nX-Hop: 1\r\nContent-Length: 0\r\n\r\n"
	allocs := testing.AllocsPerRun(100, func() {
		if err := h.Read(bufioReader(raw)); err != nil {
			t.Fatal(err)
		}
		stripResponseHopByHop(&h, false)
	})
	// bufioReader allocates its reader and buffer; stripping adds nothing.
	if allocs > 2 {
		t.Fatalf("%v allocations per strip", allocs)
	}
}

func TestStripHopByHopResponse(t *testing.T) {
	var h fasthttp.ResponseHeader
	raw := "HTTP/1.1 200 OK\r\nConnection: keep-alive, X-Hop\r\nKeep-Alive: timeout=5\r\nX-Hop: 1\r\nX-Ok: 1\r\nContent-Length: 0\r\n\r\n"
	if err := h.Read(bufioReader(raw)); err != nil {
		t.Fatal(err)
	}
	stripResponseHopByHop(&h, false)
	out := h.String()
	for _, bad := range []string{"Keep-Alive", "X-Hop", "Connection"} {
		if strings.Contains(out, bad) {
			t.Errorf("%s survived:\n%s", bad, out)
		}
	}
	if !strings.Contains(out, "X-Ok: 1") {
		t.Errorf("X-Ok lost:\n%s", out)
	}
}

func TestSetForwarded(t *testing.T) {
	tests := []struct {
		name               string
		prior              map[string]string
		tls, trust         bool
		wantFor, wantProto string
		wantHost           string
	}{
		{name: "first hop", wantFor: "10.0.0.9", wantProto: "http", wantHost: "example.com"},
		{name: "appends to a chain", prior: map[string]string{"X-Forwarded-For": "1.1.1.1, 2.2.2.2"}, wantFor: "1.1.1.1, 2.2.2.2, 10.0.0.9", wantProto: "http", wantHost: "example.com"},
		{name: "overwrites untrusted proto and host", prior: map[string]string{"X-Forwarded-Proto": "https", "X-Forwarded-Host": "evil"}, tls: false, wantFor: "10.0.0.9", wantProto: "http", wantHost: "example.com"},
		{name: "keeps trusted proto and host", prior: map[string]string{"X-Forwarded-Proto": "https", "X-Forwarded-Host": "front"}, trust: true, wantFor: "10.0.0.9", wantProto: "https", wantHost: "front"},
		{name: "tls", tls: true, wantFor: "10.0.0.9", wantProto: "https", wantHost: "example.com"},
		{name: "repeated lines are joined or replaced", prior: map[string]string{"X-Forwarded-For": "1.1.1.1|2.2.2.2", "X-Forwarded-Proto": "https|https", "X-Forwarded-Host": "a|b"}, wantFor: "1.1.1.1, 2.2.2.2, 10.0.0.9", wantProto: "http", wantHost: "example.com"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var h fasthttp.RequestHeader
			h.SetHost("example.com")
			for k, vs := range tt.prior {
				for v := range strings.SplitSeq(vs, "|") {
					h.Add(k, v)
				}
			}
			setForwarded(&h, []byte("10.0.0.9"), tt.tls, tt.trust, nil)
			for k, want := range map[string]string{"X-Forwarded-For": tt.wantFor, "X-Forwarded-Proto": tt.wantProto, "X-Forwarded-Host": tt.wantHost} {
				if got := h.PeekAll(k); len(got) != 1 || string(got[0]) != want {
					t.Errorf("%s = %q, want exactly %q", k, got, want)
				}
			}
		})
	}
}

func TestFillHeader(t *testing.T) {
	var src fasthttp.ResponseHeader
	src.SetContentType("text/plain")
	src.SetContentLength(5)
	src.Add("Set-Cookie", "a=1")
	src.Add("Set-Cookie", "b=2")
	src.Add("X-Custom", "v")
	src.SetConnectionClose()
	dst := http.Header{}
	fillHeader(dst, &src)
	want := http.Header{
		"Content-Type":   {"text/plain"},
		"Content-Length": {"5"},
		"Set-Cookie":     {"a=1", "b=2"},
		"X-Custom":       {"v"},
	}
	if !reflect.DeepEqual(dst, want) {
		t.Fatalf("got %v\nwant %v", dst, want)
	}
	// Appending to one field must not overwrite another's value.
	dst["Set-Cookie"] = append(dst["Set-Cookie"], "c=3")
	if dst["X-Custom"][0] != "v" || dst["Content-Length"][0] != "5" {
		t.Fatalf("fields share storage: %v", dst)
	}
	if n := testing.AllocsPerRun(100, func() { fillHeader(http.Header{}, &src) }); n > 8 {
		t.Errorf("%v allocations for 5 fields", n)
	}
}
