package proxytest

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// ClosingOrigin answers one request per connection with keep-alive headers
// and then closes the connection, as an upstream does when its idle timeout
// fires. Each closed connection is reported on the returned channel.
func ClosingOrigin(t testing.TB) (string, <-chan struct{}) {
	closed := make(chan struct{}, 16)
	addr := Origin(t, func(c net.Conn, br *bufio.Reader) {
		ReadHeader(br)
		c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"))
		c.Close()
		closed <- struct{}{}
	})
	return addr, closed
}

// SilentOrigin reads one request per connection and closes it without
// answering, reporting each request it received.
func SilentOrigin(t testing.TB) (string, <-chan struct{}) {
	got := make(chan struct{}, 16)
	addr := Origin(t, func(c net.Conn, br *bufio.Reader) {
		ReadHeader(br)
		got <- struct{}{}
	})
	return addr, got
}

// RecordingOrigin answers each request with response and reports the raw
// request header it received, and each new connection.
func RecordingOrigin(t testing.TB, response string) (addr string, heads <-chan string, conns <-chan struct{}) {
	h, c := make(chan string, 16), make(chan struct{}, 16)
	addr = Origin(t, func(conn net.Conn, br *bufio.Reader) {
		c <- struct{}{}
		for {
			var head strings.Builder
			for {
				line, err := br.ReadString('\n')
				if err != nil {
					return
				}
				head.WriteString(line)
				if line == "\r\n" {
					break
				}
			}
			if n := ContentLength(head.String()); n > 0 {
				io.CopyN(io.Discard, br, int64(n))
			}
			h <- head.String()
			if _, err := io.WriteString(conn, response); err != nil {
				return
			}
		}
	})
	return addr, h, c
}

func ContentLength(head string) int {
	for line := range strings.SplitSeq(head, "\r\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.EqualFold(k, "Content-Length") {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return 0
}

// KeepAliveOrigin answers each request (reading its body) with "ok" on a
// kept-alive connection, reports each request on got, and hands each new
// connection's server side to conns.
func KeepAliveOrigin(t testing.TB) (addr string, got <-chan string, conns <-chan net.Conn) {
	g, cs := make(chan string, 16), make(chan net.Conn, 16)
	addr = Origin(t, func(c net.Conn, br *bufio.Reader) {
		cs <- c
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			body, err := io.ReadAll(req.Body)
			if err != nil {
				return
			}
			g <- req.Method + " " + string(body)
			if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"); err != nil {
				return
			}
		}
	})
	return addr, g, cs
}

// UnansweringOrigin answers the first request on each connection, reads
// the second whole and closes the connection without a word, reporting
// each request it read.
func UnansweringOrigin(t testing.TB) (addr string, got <-chan string) {
	g := make(chan string, 16)
	addr = Origin(t, func(c net.Conn, br *bufio.Reader) {
		for i := range 2 {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			body, _ := io.ReadAll(req.Body)
			g <- req.Method + " " + string(body)
			if i == 0 {
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
			}
		}
	})
	return addr, g
}
