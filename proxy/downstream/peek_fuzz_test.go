package downstream

import (
	"bytes"
	"io"
	"net"
	"testing"
	"time"
)

// chunkConn is a net.Conn whose reads return data a few bytes at a time,
// as a client's segments may arrive, then io.EOF.
type chunkConn struct {
	data  []byte
	chunk int
}

func (c *chunkConn) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), c.chunk)], c.data)
	c.data = c.data[n:]
	return n, nil
}
func (c *chunkConn) Write(p []byte) (int, error)      { return len(p), nil }
func (c *chunkConn) Close() error                     { return nil }
func (c *chunkConn) LocalAddr() net.Addr              { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1} }
func (c *chunkConn) RemoteAddr() net.Addr             { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 2} }
func (c *chunkConn) SetDeadline(time.Time) error      { return nil }
func (c *chunkConn) SetReadDeadline(time.Time) error  { return nil }
func (c *chunkConn) SetWriteDeadline(time.Time) error { return nil }

// FuzzPeek feeds the protocol sniffing arbitrary first bytes, in
// arbitrary segments: Peek says "HTTP/2 preface" exactly when the bytes
// begin with it, stops at the first byte that differs, and consumes
// nothing: what the connection reads afterwards is every byte sent, in
// order. The seed corpus is in testdata/fuzz/FuzzPeek.
func FuzzPeek(f *testing.F) {
	const preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
	for _, seed := range []struct {
		data  string
		chunk uint8
	}{
		{preface + "\x00\x00\x00\x04\x00\x00\x00\x00\x00", 1},
		{preface, 24},
		{"PRI * HTTP/2.0\r\n\r\nXX", 3},
		{"GET / HTTP/1.1\r\nHost: a\r\n\r\n", 5},
		{"P", 1},
		{"", 1},
		{"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03", 7},
	} {
		f.Add([]byte(seed.data), seed.chunk)
	}
	f.Fuzz(func(t *testing.T, data []byte, chunk uint8) {
		c := NewRegistry().Track(&chunkConn{data: bytes.Clone(data), chunk: int(chunk%16) + 1}, "l", true, nil)
		defer c.Close()
		match, err := c.Peek([]byte(preface))
		if want := bytes.HasPrefix(data, []byte(preface)); match != want {
			t.Fatalf("match %v, want %v (err %v)", match, want, err)
		}
		peeked := c.Peeked()
		if !bytes.HasPrefix(data, peeked) || len(peeked) > len(preface) {
			t.Fatalf("peeked %q: not a prefix of what was sent, or longer than the preface", peeked)
		}
		// It stops at the first byte that differs: no read after the one
		// that brought it.
		size := int(chunk%16) + 1
		d := 0
		for d < len(peeked) && peeked[d] == preface[d] {
			d++
		}
		if d < len(peeked) && len(peeked)-d > size {
			t.Fatalf("peeked %q in reads of %d: read on past the byte that differs (at %d)", peeked, size, d)
		}
		got, err := io.ReadAll(c)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("read back %q (%v), want every byte sent, %q", got, err, data)
		}
	})
}
