package proxy

import (
	"bufio"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestHTTP10UnknownLength: a response of unknown length (the origin
// streams it, chunked) reaches an HTTP/1.0 client without chunked coding,
// which HTTP/1.0 does not have (RFC 9112 §7): the body unframed, ended by
// the close of the connection, keep-alive or not. A response with a
// Content-Length keeps it and the connection; an HTTP/1.1 client still
// gets chunked coding.
func TestHTTP10UnknownLength(t *testing.T) {
	origin := newOrigin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/fixed" {
			io.WriteString(w, "fixed")
			return
		}
		io.WriteString(w, "part1,")
		w.(http.Flusher).Flush()
		io.WriteString(w, "part2")
	}))
	e := startEbb(t, singleClusterYAML(hostPort(origin)))
	exchange := func(t *testing.T, request string) (*http.Response, string, bool) {
		t.Helper()
		c := rawConn(t, e.addr("public"))
		if _, err := io.WriteString(c, request); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("reading the answer: %v", err)
		}
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("reading the body: %v (framing %v, length %d)", err, resp.TransferEncoding, resp.ContentLength)
		}
		// Is the connection still open? A second read either times out
		// (open) or ends (closed).
		c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		_, err = br.ReadByte()
		closed := err == io.EOF
		return resp, string(body), closed
	}
	for _, req := range []string{
		"GET /stream HTTP/1.0\r\nHost: app\r\n\r\n",
		"GET /stream HTTP/1.0\r\nHost: app\r\nConnection: keep-alive\r\n\r\n",
	} {
		t.Run(strings.Fields(req)[0]+" keep-alive="+strconv.FormatBool(strings.Contains(req, "keep-alive")), func(t *testing.T) {
			resp, body, closed := exchange(t, req)
			if resp.StatusCode != 200 || len(resp.TransferEncoding) != 0 || resp.ContentLength != -1 {
				t.Errorf("status %d, Transfer-Encoding %q, Content-Length %d; want 200 without either", resp.StatusCode, resp.TransferEncoding, resp.ContentLength)
			}
			if body != "part1,part2" {
				t.Errorf("body %q, want part1,part2 unframed", body)
			}
			if !resp.Close || !closed {
				t.Errorf("Connection: close %v, connection closed %v; want both", resp.Close, closed)
			}
		})
	}
	t.Run("HTTP/1.0 fixed length", func(t *testing.T) {
		resp, body, closed := exchange(t, "GET /fixed HTTP/1.0\r\nHost: app\r\nConnection: keep-alive\r\n\r\n")
		if resp.ContentLength != 5 || body != "fixed" || closed {
			t.Errorf("Content-Length %d, body %q, closed %v; want 5, fixed, kept open", resp.ContentLength, body, closed)
		}
	})
	t.Run("HTTP/1.1", func(t *testing.T) {
		resp, body, closed := exchange(t, "GET /stream HTTP/1.1\r\nHost: app\r\n\r\n")
		if len(resp.TransferEncoding) != 1 || resp.TransferEncoding[0] != "chunked" || body != "part1,part2" || closed {
			t.Errorf("Transfer-Encoding %q, body %q, closed %v; want chunked, part1,part2, kept open", resp.TransferEncoding, body, closed)
		}
	})
}
