package upstream

import (
	"bufio"
	"errors"
	"strings"
	"testing"
	"testing/iotest"
)

// TestCheckHead: what a response head may not be, each with its reason;
// the system tests (proxy's TestBrokenOrigin) check what clients get.
func TestCheckHead(t *testing.T) {
	for _, tc := range []struct {
		head string
		want error
	}{
		{"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n", nil},
		{"HTTP/1.1 200\r\n\r\n", nil},
		{"HTTP/1.0 204 No Content\r\nX-A : 1\r\n\r\n", nil},
		{"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", nil},
		{"HTTP/1.1 599 Weird\r\nX-A: a b\t c\r\n\r\n", nil},
		{"\r\nHTTP/1.1 200 OK\r\n\r\n", errHeadStart},
		{"HTTP/2.0 200 OK\r\n\r\n", errVersion},
		{"HTTP/1.1 2000 OK\r\n\r\n", errStatusLine},
		{"HTTP/1.1 099 Low\r\n\r\n", errStatusLine},
		{"HTTP/1.1 600 High\r\n\r\n", errStatusLine},
		{"HTTP/1.1 20x OK\r\n\r\n", errStatusLine},
		{"HTTP/1.1 200 O\x00K\r\n\r\n", errStatusLine},
		{"HTTP/1.1 200 OK\rX\r\n\r\n", errLineEnd},
		{"HTTP/1.1 200 OK\r\nX-A: a\rb\r\n\r\n", errLineEnd},
		{"HTTP/1.1 200 OK\r\nX-A: a\nX-B: b\r\n\r\n", errLineEnd},
		{"HTTP/1.1 200 OK\r\nX-A: a\r\n b\r\n\r\n", errObsFold},
		{"HTTP/1.1 200 OK\r\nX Bad: 1\r\n\r\n", errFieldName},
		{"HTTP/1.1 200 OK\r\nX(Y): 1\r\n\r\n", errFieldName},
		{"HTTP/1.1 200 OK\r\n: 1\r\n\r\n", errFieldName},
		{"HTTP/1.1 200 OK\r\nX-A\r\n\r\n", errFieldLine},
		{"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n", errBothFramings},
		{"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ncontent-length: 2\r\n\r\n", errBothFramings},
		{"HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", errHTTP10Chunked},
	} {
		br := bufio.NewReaderSize(strings.NewReader(tc.head+"body"), ReadBufferSize)
		head, _, err := peekHead(br)
		if err == nil {
			err = checkHead(head)
		}
		if !errors.Is(err, tc.want) {
			t.Errorf("%q: %v, want %v", tc.head, err, tc.want)
		}
	}
}

// TestPeekHead: a head is waited for whole, and one of bare-LF lines
// fails at once; nothing is consumed.
func TestPeekHead(t *testing.T) {
	br := bufio.NewReaderSize(strings.NewReader("HTTP/1.1 200 OK\nX: 1\n\nbody"), ReadBufferSize)
	if _, _, err := peekHead(br); err != errLineEnd {
		t.Fatalf("bare LF lines: %v, want %v", err, errLineEnd)
	}
	br = bufio.NewReaderSize(iotest.OneByteReader(strings.NewReader("HTTP/1.1 200 OK\r\nX: 1\r\n\r\nbody")), ReadBufferSize)
	head, none, err := peekHead(br)
	if err != nil || none || string(head) != "HTTP/1.1 200 OK\r\nX: 1\r\n\r\n" || br.Buffered() < len(head) {
		t.Fatalf("got %q (nothing %v, %v), %d buffered", head, none, err, br.Buffered())
	}
	big := "HTTP/1.1 200 OK\r\nX-Big: " + strings.Repeat("x", ReadBufferSize) + "\r\n\r\n"
	if _, _, err := peekHead(bufio.NewReaderSize(strings.NewReader(big), ReadBufferSize)); err != errHeadTooLarge {
		t.Fatalf("a head over the buffer: %v, want %v", err, errHeadTooLarge)
	}
	if _, none, err := peekHead(bufio.NewReader(strings.NewReader(""))); !none || err == nil {
		t.Fatalf("an empty stream: nothing %v, %v", none, err)
	}
}

// BenchmarkCheckHead is what checking a head costs a response, before
// fasthttp parses it.
func BenchmarkCheckHead(b *testing.B) {
	head := []byte("HTTP/1.1 200 OK\r\nServer: raw\r\nContent-Type: text/plain\r\nConnection: keep-alive\r\nContent-Length: 64\r\nDate: Mon, 07 Dec 2026 12:00:00 GMT\r\nCache-Control: no-cache\r\n\r\n")
	for b.Loop() {
		if checkHead(head) != nil {
			b.Fatal("refused")
		}
	}
}
