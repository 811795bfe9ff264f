package h1

import (
	"bytes"
	"errors"
	"testing"
)

// TestHeadScan feeds heads to the watcher split at every byte: a head
// whose lines all end in CR LF is never taken for one with a bare LF,
// whatever its body holds (the scan stops at the head's end), and one
// with a bare LF always is. Then: when the next head is watched.
func TestHeadScan(t *testing.T) {
	for _, tc := range []struct {
		name, bytes string
		bare        bool
	}{
		{"plain", "GET / HTTP/1.1\r\nHost: a\r\n\r\n", false},
		{"body with bare LFs", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 9\r\n\r\na\nb\n\nc\r\n", false},
		{"body starting with LF", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\n\n\n", false},
		{"no headers", "GET / HTTP/1.0\r\n\r\n\n", false},
		{"bare LF ends the head", "GET / HTTP/1.1\r\nHost: a\r\n\n", true},
		{"bare LF line ends", "GET / HTTP/1.1\nHost: a\n\n", true},
		{"bare LF inside", "GET / HTTP/1.1\r\nHost: a\nX: b\r\n\r\n", true},
		{"CR alone is not a line end", "GET / HTTP/1.1\r\nHost: a\rX: b\r\n\r\n", false},
	} {
		for split := range len(tc.bytes) + 1 {
			h := newHead()
			for _, part := range []string{tc.bytes[:split], tc.bytes[split:]} {
				h.pass([]byte(part), len(part), nil)
			}
			if got := errors.Is(h.err, errBareLF); got != tc.bare {
				t.Errorf("%s split at %d: bare LF %v, want %v", tc.name, split, got, tc.bare)
			}
			if !h.lineEnded {
				t.Errorf("%s split at %d: no line ended", tc.name, split)
			}
		}
	}
	// After a request, the next head is watched only when what was read
	// is exactly that request: otherwise the engine may hold bytes of the
	// next head unseen, and the scan would begin in its middle.
	const get = "GET / HTTP/1.1\r\nHost: a\r\n\r\n"
	const post = "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\n"
	for _, tc := range []struct {
		name  string
		read  []string // the reads before expect
		body  int64
		watch bool
	}{
		{"a GET, alone", []string{get}, 0, true},
		{"a POST and its body", []string{post, "a\nb\nc"}, 5, true},
		{"a POST and its body, one read", []string{post + "a\nb\nc"}, 5, true},
		{"a GET and the next, pipelined", []string{get + "GET /2 HT"}, 0, false},
		{"a POST and the next, pipelined", []string{post + "a\nb\nc" + "GET / HTTP/1.1\r\n"}, 5, false},
		{"a chunked body", []string{post, "5\r\na\nb\nc\r\n0\r\n\r\n"}, -1, false},
	} {
		h := newHead()
		for _, r := range tc.read {
			h.pass([]byte(r), len(r), nil)
		}
		h.done()
		h.expect(tc.body)
		if h.active != tc.watch || h.err != nil {
			t.Errorf("%s: watching the next head %v (err %v), want %v", tc.name, h.active, h.err, tc.watch)
		}
	}
	// Watched, the next head's bare LF is seen from its first byte.
	h := newHead()
	h.pass([]byte(get), len(get), nil)
	h.expect(0)
	next := "\nGET / HTTP/1.1\r\n\r\n"
	if h.pass([]byte(next), len(next), nil); h.err == nil {
		t.Error("a bare LF first in a watched head was not seen")
	}
}

// BenchmarkHeadScan is what watching a typical request head costs per
// request.
func BenchmarkHeadScan(b *testing.B) {
	req := []byte("GET /index.html?q=1 HTTP/1.1\r\nHost: example.com\r\nUser-Agent: Mozilla/5.0 (X11; Linux x86_64) bench\r\n" +
		"Accept: text/html,application/xhtml+xml\r\nAccept-Language: en\r\nAccept-Encoding: gzip, br\r\nCookie: a=1; b=2\r\nConnection: keep-alive\r\n\r\n")
	h := newHead()
	for b.Loop() {
		h.pass(req, len(req), nil)
		h.expect(0)
	}
	if !h.active || h.err != nil {
		b.Fatal("the head was not seen whole")
	}
}

// FuzzHeadScan: however a head's bytes are split into reads, the watcher
// comes to the same verdict as on the bytes in one read, and it finds a
// bare LF exactly when one comes before the head's end (CR LF CR LF).
// The seed corpus is in testdata/fuzz/FuzzHeadScan.
func FuzzHeadScan(f *testing.F) {
	for _, seed := range []string{
		"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
		"GET / HTTP/1.1\nHost: a\n\n",
		"POST / HTTP/1.1\r\nHost: a\r\n\r\nbody\nwith\nLFs",
		"GET / HTTP/1.1\r\nX: a\rb\r\n\r\n",
		"\r\n\r\n\n",
	} {
		f.Add([]byte(seed), uint16(len(seed)/2))
	}
	f.Fuzz(func(t *testing.T, data []byte, at uint16) {
		split := int(at) % (len(data) + 1)
		one, two := newHead(), newHead()
		one.pass(data, len(data), nil)
		two.pass(data[:split], split, nil)
		two.pass(data[split:], len(data)-split, nil)
		if one.active != two.active || one.lineEnded != two.lineEnded || one.err != two.err || one.end != two.end {
			t.Fatalf("split at %d: %+v, whole: %+v", split, two, one)
		}
		// The reference, line by line: a line not ending in CR LF before
		// the head's end (its empty line, after the request line; empty
		// lines before that are skipped).
		bare := false
		{
			started := false
			for rest := data; ; {
				i := bytes.IndexByte(rest, '\n')
				if i < 0 {
					break
				}
				line := rest[:i]
				rest = rest[i+1:]
				if !bytes.HasSuffix(line, []byte("\r")) {
					bare = true
					break
				}
				if len(line) == 1 && started {
					break
				}
				started = started || len(line) > 1
			}
		}
		if got := one.err != nil; got != bare {
			t.Fatalf("%q: bare LF %v, want %v", data, got, bare)
		}
	})
}
