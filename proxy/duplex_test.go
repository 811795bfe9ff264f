package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ebb-proxy/ebb/config"
	echoorigin "github.com/ebb-proxy/ebb/examples/echo"
	"github.com/ebb-proxy/ebb/proxy/proxytest"
)

// TestFullDuplexHTTP1Upstream: an HTTP/2 client's request body streams
// up to an http1 cluster while the response streams down, and to an auto
// cluster's endpoint that speaks HTTP/1.1 over TLS (the same transport).
// The origin, examples/echo's, echoes each piece of the body as it reads
// it; the client sends a piece only once the previous one's echo has come
// back through ebb, which a proxy that writes the whole body before it
// reads the response never lets happen. The body is sent chunked, then
// with a Content-Length too large to be buffered (retries.buffer_body).
// Each time the body ends, the response ends cleanly, and the upstream
// connection, both its directions over, serves the next request: the
// origin sees one connection in all.
func TestFullDuplexHTTP1Upstream(t *testing.T) {
	t.Parallel()
	// 72 KiB in all, beyond retries.buffer_body's 64 KiB, in pieces of
	// one byte to more than two HTTP/2 frames.
	var pieces []string
	for i, n := range []int{1, 1000, 40 << 10, 30 << 10} {
		pieces = append(pieces, string(randBytes(byte(i), n)))
	}
	for _, auto := range []bool{false, true} {
		name := "http1"
		if auto {
			name = "auto, HTTP/1.1 over TLS"
		}
		t.Run(name, func(t *testing.T) {
			var conns atomic.Int32
			origin := newUnstartedOrigin(t, flushEach(echoorigin.Handler("origin")))
			origin.Config.ConnState = func(_ net.Conn, s http.ConnState) {
				if s == http.StateNew {
					conns.Add(1)
				}
			}
			var url string
			if auto {
				origin.TLS = &tls.Config{NextProtos: []string{"http/1.1"}}
				origin.StartTLS()
				url = "http://" + startedClusterProxy(t, func(c *config.Cluster) {
					c.Protocol = config.ProtocolAuto
					c.TLS.InsecureSkipVerify = true
				}, hostPort(origin)) + "/echo"
			} else {
				origin.Start()
				url = startEbb(t, singleClusterYAML(hostPort(origin))).url("public", "/echo")
			}
			tr := h2cTransport(t)
			for _, known := range []bool{false, true} {
				name := "chunked"
				if known {
					name = "content-length"
				}
				t.Run(name, func(t *testing.T) { echoPieces(t, tr, url, pieces, known) })
			}
			if n := conns.Load(); n != 1 {
				t.Fatalf("the origin saw %d connections, want 1 (reused once each exchange was over both ways)", n)
			}
		})
	}
}

func flushEach(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(flushingWriter{w}, r)
	})
}

type flushingWriter struct{ http.ResponseWriter }

func (w flushingWriter) Write(p []byte) (int, error) {
	n, err := w.ResponseWriter.Write(p)
	if err == nil {
		err = http.NewResponseController(w.ResponseWriter).Flush()
	}
	return n, err
}

// Unwrap lets http.ResponseController reach the server's writer (for
// EnableFullDuplex).
func (w flushingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// echoPieces POSTs pieces to url, an echo, through tr: each piece is
// written once the previous one's echo has arrived whole, the body then
// ends, and the response must end right after the last echo. known sends
// the body's length in advance; the body then ends with its last piece,
// as Go's HTTP/2 client holds the last bytes of a body of known length
// until its reader says it has ended.
func echoPieces(t *testing.T, tr http.RoundTripper, url string, pieces []string, known bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	var reader sync.WaitGroup
	defer reader.Wait()
	defer cancel()
	pr, pw := io.Pipe()
	defer pw.Close()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, pr)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = -1
	if known {
		req.ContentLength = 0
		for _, p := range pieces {
			req.ContentLength += int64(len(p))
		}
	}
	type read struct {
		b   []byte
		err error
	}
	reads := make(chan read)
	reader.Go(func() {
		send := func(r read) bool {
			select {
			case reads <- r:
				return true
			case <-ctx.Done():
				return false
			}
		}
		resp, err := tr.RoundTrip(req)
		if err != nil {
			send(read{err: err})
			return
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			send(read{err: fmt.Errorf("status %d", resp.StatusCode)})
			return
		}
		for {
			b := make([]byte, 32<<10)
			n, err := resp.Body.Read(b)
			if n > 0 && !send(read{b: b[:n]}) {
				return
			}
			if err != nil {
				send(read{err: err})
				return
			}
		}
	})
	for i, p := range pieces {
		if _, err := io.WriteString(pw, p); err != nil {
			t.Fatalf("sending piece %d: %v", i, err)
		}
		if known && i == len(pieces)-1 {
			pw.Close()
		}
		var got []byte
		for len(got) < len(p) {
			r := recv(t, reads, fmt.Sprintf("the echo of piece %d (%d of %d bytes back)", i, len(got), len(p)))
			if r.err != nil {
				t.Fatalf("the echo of piece %d, %d of %d bytes back: %v", i, len(got), len(p), r.err)
			}
			got = append(got, r.b...)
		}
		if string(got) != p {
			t.Fatalf("the echo of piece %d differs from it (%d bytes, want %d)", i, len(got), len(p))
		}
	}
	pw.Close()
	if r := recv(t, reads, "the response's end"); r.err != io.EOF || len(r.b) != 0 {
		t.Fatalf("after the last echo: %d bytes, %v; want the end", len(r.b), r.err)
	}
}

// TestEarlyAnswerHTTP1Upstream: an http1 origin that answers an HTTP/2
// client's upload at once (413), without reading its body, is heard
// while the client is still sending, whether the answer is read whole
// (a Content-Length) or streamed (chunked). ebb closes that upstream
// connection, whose request was never whole, rather than pool it: the
// pool would keep it longer (timeouts.idle) than the test waits for the
// close. The next request is answered on another connection.
func TestEarlyAnswerHTTP1Upstream(t *testing.T) {
	t.Parallel()
	const answer = "the upload is too large\n"
	closed := make(chan error, 4) // how each upload's connection ended
	origin := proxytest.Origin(t, func(c net.Conn, br *bufio.Reader) {
		for {
			line, err := br.ReadString('\n')
			if err != nil || !proxytest.ReadHeader(br) {
				return
			}
			if strings.Contains(line, "/chunked") {
				_, err = fmt.Fprintf(c, "HTTP/1.1 413 Content Too Large\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", len(answer), answer)
			} else {
				_, err = fmt.Fprintf(c, "HTTP/1.1 413 Content Too Large\r\nContent-Length: %d\r\n\r\n%s", len(answer), answer)
			}
			if err != nil {
				return
			}
			if strings.HasPrefix(line, "POST ") {
				// An upload's first bytes follow, and then ebb's close.
				_, err = io.Copy(io.Discard, br)
				closed <- err
				return
			}
		}
	})
	e := startEbb(t, oneClusterYAML(origin, nil, []string{"timeouts: { idle: 1m }"}))
	tr := h2cTransport(t)
	for _, framing := range []string{"length", "chunked"} {
		t.Run(framing, func(t *testing.T) {
			earlyAnswer(t, tr, e.url("public", "/upload/"+framing), answer)
			if err := recv(t, closed, "ebb to close the upstream connection"); err != nil {
				t.Fatalf("the upstream connection ended with %v, want ebb's close", err)
			}
			next, err := http.NewRequestWithContext(t.Context(), http.MethodGet, e.url("public", "/next/"+framing), nil)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := tr.RoundTrip(next)
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != http.StatusRequestEntityTooLarge || string(b) != answer {
				t.Fatalf("the next request: %d %q (%v), want the origin's 413 %q", resp.StatusCode, b, err, answer)
			}
		})
	}
}

// earlyAnswer sends the first 1000 bytes of a 1 MiB upload to url through
// tr and wants the answer, 413 and body, while the upload is unfinished.
// (The answer may come before the client has written a byte: ebb sends
// the request's head at once, and the origin answers it alone.)
func earlyAnswer(t *testing.T, tr http.RoundTripper, url, body string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	var client sync.WaitGroup
	defer client.Wait()
	defer cancel()
	pr, pw := io.Pipe()
	defer pw.Close() // ends the write below if the body is no longer read
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, pr)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = 1 << 20
	type response struct {
		status int
		body   string
		err    error
	}
	responses := make(chan response, 1)
	client.Go(func() {
		resp, err := tr.RoundTrip(req)
		if err != nil {
			responses <- response{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		responses <- response{status: resp.StatusCode, body: string(b), err: err}
	})
	client.Go(func() { io.WriteString(pw, strings.Repeat("x", 1000)) })
	if r := recv(t, responses, "the early answer"); r.err != nil || r.status != http.StatusRequestEntityTooLarge || r.body != body {
		t.Fatalf("got %d %q (%v), want the origin's 413 %q", r.status, r.body, r.err, body)
	}
}

// TestFullDuplexBodyLimit: limits.max_body_bytes holds for an HTTP/2
// client's body that streams to an http1 cluster while the response is
// read. Before the origin has answered, the client gets ebb's 413; once
// the origin's answer streams (an echo), the client's stream is cut
// short. Either way the origin never gets a whole request: its read of
// the body fails, as ebb closes the connection in the middle of it.
func TestFullDuplexBodyLimit(t *testing.T) {
	t.Parallel()
	bodyErr := make(chan error, 4) // how the origin's read of each body ended
	mux := http.NewServeMux()
	mux.HandleFunc("POST /sink", func(w http.ResponseWriter, r *http.Request) {
		_, err := io.Copy(io.Discard, r.Body)
		bodyErr <- err
		if err == nil {
			io.WriteString(w, "the whole body\n")
		}
	})
	mux.HandleFunc("POST /echo", func(w http.ResponseWriter, r *http.Request) {
		if err := http.NewResponseController(w).EnableFullDuplex(); err != nil {
			bodyErr <- err
			return
		}
		_, err := io.Copy(flushingWriter{w}, r.Body)
		bodyErr <- err
	})
	origin := newOrigin(t, mux)
	e := startEbb(t, oneClusterYAML(hostPort(origin), []string{"limits: { max_body_bytes: 1KiB }"}, nil))
	tr := h2cTransport(t)

	t.Run("before the answer", func(t *testing.T) {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, e.url("public", "/sink"), io.NopCloser(strings.NewReader(strings.Repeat("x", 8<<10))))
		if err != nil {
			t.Fatal(err)
		}
		req.ContentLength = -1 // unknown: found too large as it streams
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusRequestEntityTooLarge || string(b) != "ebb: request body too large\n" {
			t.Fatalf("got %d %q (%v), want ebb's 413", resp.StatusCode, b, err)
		}
		if err := recv(t, bodyErr, "the origin's read of the body"); err == nil {
			t.Fatal("the origin read a whole body of 8 KiB through a limit of 1 KiB")
		}
	})
	t.Run("after the answer began", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
		defer cancel()
		pr, pw := io.Pipe()
		defer pw.Close()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.url("public", "/echo"), pr)
		if err != nil {
			t.Fatal(err)
		}
		req.ContentLength = -1
		var writer sync.WaitGroup
		defer writer.Wait()
		defer pw.Close() // ends the write below if the body is no longer read
		writer.Go(func() { io.WriteString(pw, strings.Repeat("a", 512)) })
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d, want the echo's 200", resp.StatusCode)
		}
		if _, err := io.ReadFull(resp.Body, make([]byte, 512)); err != nil {
			t.Fatalf("the echo of the first 512 bytes: %v", err)
		}
		writer.Wait()
		writer.Go(func() { io.WriteString(pw, strings.Repeat("b", 1024)) }) // 1536 bytes in all
		rest, err := io.ReadAll(resp.Body)
		if err == nil {
			t.Fatalf("the response ended cleanly (%d more bytes) after a body over the limit, want its stream reset", len(rest))
		}
		if err := recv(t, bodyErr, "the origin's read of the body"); err == nil {
			t.Fatal("the origin read a whole body through the limit")
		}
	})
}

// TestUpstreamDropMidBodyDuplex: an http1 origin that reads the start of
// an HTTP/2 client's upload and closes the connection without a word
// fails the request at once (502: the upstream may have processed it,
// and the body, streamed, cannot be sent again), while the client is
// still to send the rest: the exchange hears the close as it happens,
// rather than once the client's body has stalled.
func TestUpstreamDropMidBodyDuplex(t *testing.T) {
	t.Parallel()
	requests := make(chan struct{}, 4)
	origin := proxytest.Origin(t, func(c net.Conn, br *bufio.Reader) {
		if proxytest.ReadHeader(br) {
			io.ReadFull(br, make([]byte, 100))
			requests <- struct{}{}
		}
	})
	e := startEbb(t, oneClusterYAML(origin, []string{"timeouts: { header: 1m }"}, nil))
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	defer cancel()
	pr, pw := io.Pipe()
	var writer sync.WaitGroup
	defer writer.Wait()
	defer pw.Close()
	writer.Go(func() { io.WriteString(pw, strings.Repeat("x", 1000)) })
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.url("public", "/upload"), pr)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = 100000
	resp, err := h2cTransport(t).RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("status %d, want 502", resp.StatusCode)
	}
	recv(t, requests, "the request at the origin")
	if n := len(requests); n != 0 {
		t.Fatalf("the origin got the request %d more times, want once", n)
	}
}
