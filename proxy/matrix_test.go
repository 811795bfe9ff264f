package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/ebb-proxy/ebb/proxy/proxytest"
)

// TestMatrixExchanges checks plain exchanges in every mode: GET, HEAD,
// POST echoed back (small, larger than a frame and a buffer, of unknown
// length) and a 204.
func TestMatrixExchanges(t *testing.T) {
	mid := randBytes(3, 100<<10)
	run(t, func(t *testing.T, m mode) {
		e := newEnv(t, m, proxytest.ExchangeOrigin())
		ctx := t.Context()

		t.Run("get", func(t *testing.T) {
			resp, body := e.Exchange(t, proxytest.NewRequest(t, ctx, "GET", e.URL("/hello"), nil))
			if resp.StatusCode != 200 || string(body) != "hello, world\n" {
				t.Fatalf("status %d, body %q; want 200 \"hello, world\\n\"", resp.StatusCode, body)
			}
			if resp.ContentLength != 13 {
				t.Errorf("Content-Length %d, want 13", resp.ContentLength)
			}
		})
		t.Run("head", func(t *testing.T) {
			resp, body := e.Exchange(t, proxytest.NewRequest(t, ctx, "HEAD", e.URL("/hello"), nil))
			if resp.StatusCode != 200 || len(body) != 0 {
				t.Fatalf("status %d, body %q; want 200 and no body", resp.StatusCode, body)
			}
			if resp.ContentLength != 13 {
				t.Errorf("Content-Length %d, want 13 (the GET's)", resp.ContentLength)
			}
		})
		for _, tc := range []struct {
			name    string
			body    []byte
			unknown bool // sent without a length: chunked on HTTP/1
		}{
			{"post empty", []byte{}, false},
			{"post small", []byte("ping"), false},
			{"post 100KiB", mid, false},
			{"post 100KiB unknown length", mid, true},
		} {
			t.Run(tc.name, func(t *testing.T) {
				req := proxytest.NewRequest(t, ctx, "POST", e.URL("/echo"), bytes.NewReader(tc.body))
				wantLength := strconv.Itoa(len(tc.body))
				if tc.unknown {
					req.Body = io.NopCloser(bytes.NewReader(tc.body))
					req.ContentLength = -1
					wantLength = "-1"
				}
				req.Header.Set("Content-Type", "application/x-test")
				resp, body := e.Exchange(t, req)
				if resp.StatusCode != 201 || !bytes.Equal(body, tc.body) {
					t.Fatalf("status %d, %d bytes back; want 201 and the %d bytes sent", resp.StatusCode, len(body), len(tc.body))
				}
				if ct := resp.Header.Get("Content-Type"); ct != "application/x-test" {
					t.Errorf("Content-Type %q, want application/x-test", ct)
				}
				if got := resp.Header.Get("X-Request-Length"); got != wantLength {
					t.Errorf("the origin saw Content-Length %s, want %s", got, wantLength)
				}
			})
		}
		t.Run("status passes through", func(t *testing.T) {
			resp, body := e.Exchange(t, proxytest.NewRequest(t, ctx, "GET", e.URL("/teapot"), nil))
			if resp.StatusCode != 418 || string(body) != "short and stout\n" {
				t.Fatalf("status %d, body %q; want 418 \"short and stout\\n\"", resp.StatusCode, body)
			}
		})
		t.Run("request URI kept as sent", func(t *testing.T) {
			const uri = "/uri/a%2Fb/./c?x=1&y=%20two"
			resp, body := e.Exchange(t, proxytest.NewRequest(t, ctx, "GET", e.URL(uri), nil))
			if resp.StatusCode != 200 || string(body) != uri {
				t.Fatalf("status %d, the origin saw %q; want 200 and %q", resp.StatusCode, body, uri)
			}
		})
		t.Run("204", func(t *testing.T) {
			resp, body := e.Exchange(t, proxytest.NewRequest(t, ctx, "GET", e.URL("/empty"), nil))
			if resp.StatusCode != 204 || len(body) != 0 {
				t.Fatalf("status %d, body %q; want 204 and no body", resp.StatusCode, body)
			}
			// A GET goes without a body (over HTTP/2: HEADERS ending the
			// stream), not as one of unknown length.
			if got := resp.Header.Get("X-Request-Length"); got != "0" {
				t.Errorf("the origin saw Content-Length %s for a GET, want 0", got)
			}
		})
	})
}

// TestMatrixErrors checks the answers ebb makes itself in every mode: 404
// for a request no route takes, 502 when the endpoint refuses the
// connection, 504 when the origin takes longer than timeouts.response
// (and the origin's request is then abandoned).
func TestMatrixErrors(t *testing.T) {
	run(t, func(t *testing.T, m mode) {
		release := make(chan struct{})
		abandoned := make(chan error, 1)
		e := newEnv(t, m, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-release:
				io.WriteString(w, "too late\n")
			case <-r.Context().Done():
				abandoned <- r.Context().Err()
			}
		}))
		t.Cleanup(func() { close(release) }) // before the origin closes
		ctx := t.Context()
		check := func(t *testing.T, req *http.Request, status int, msg string) {
			t.Helper()
			resp, body := e.Exchange(t, req)
			if resp.StatusCode != status || string(body) != msg {
				t.Fatalf("status %d, body %q; want %d %q", resp.StatusCode, body, status, msg)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "text/plain; charset=utf-8" {
				t.Errorf("Content-Type %q, want text/plain; charset=utf-8", ct)
			}
		}

		t.Run("no route is 404", func(t *testing.T) {
			req := proxytest.NewRequest(t, ctx, "GET", e.URL("/anything"), nil)
			req.Host = "nowhere.example"
			check(t, req, 404, "ebb: no route for this request\n")
		})
		t.Run("connect refused is 502", func(t *testing.T) {
			check(t, proxytest.NewRequest(t, ctx, "GET", e.URL("/down/x"), nil), 502, "ebb: upstream connect failed\n")
		})
		t.Run("response timeout is 504", func(t *testing.T) {
			check(t, proxytest.NewRequest(t, ctx, "GET", e.URL("/slow/x"), nil), 504, "ebb: upstream timed out\n")
			if err := recv(t, abandoned, "the timed-out request to end at the origin"); !errors.Is(err, context.Canceled) {
				t.Errorf("the origin's request ended with %v, want context.Canceled", err)
			}
		})
	})
}

// TestMatrixLargeBodies moves 8 MiB each way in every mode, with a known
// length and without one (chunked on HTTP/1, no content-length on
// HTTP/2), and checks the SHA-256 and the length each side saw.
func TestMatrixLargeBodies(t *testing.T) {
	big, bigSum := proxytest.BigBody()
	run(t, func(t *testing.T, m mode) {
		mux := http.NewServeMux()
		mux.HandleFunc("POST /sink", proxytest.Sink)
		mux.HandleFunc("GET /source", func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Query().Get("unknown") == "" {
				w.Header().Set("Content-Length", strconv.Itoa(proxytest.BigSize))
			}
			w.Header().Set("Content-Type", "application/octet-stream")
			io.Copy(w, bytes.NewReader(big))
		})
		e := newEnv(t, m, mux)
		ctx := t.Context()

		for _, unknown := range []bool{false, true} {
			framing, wantLength := "known length", int64(proxytest.BigSize)
			if unknown {
				framing, wantLength = "unknown length", -1
			}
			t.Run("upload "+framing, func(t *testing.T) {
				// Only a bytes.Reader has a length Go's client sees.
				req := proxytest.NewRequest(t, ctx, "POST", e.URL("/sink"), io.NopCloser(bytes.NewReader(big)))
				req.ContentLength = wantLength
				resp, body := e.Exchange(t, req)
				want := fmt.Sprintf("%d %d %s", wantLength, proxytest.BigSize, bigSum)
				if resp.StatusCode != 200 || string(body) != want {
					t.Fatalf("status %d, the origin received %q; want 200 %q", resp.StatusCode, body, want)
				}
			})
			t.Run("download "+framing, func(t *testing.T) {
				url := e.URL("/source")
				if unknown {
					url += "?unknown=1"
				}
				resp := e.Send(t, proxytest.NewRequest(t, ctx, "GET", url, nil))
				defer resp.Body.Close()
				if resp.StatusCode != 200 {
					t.Fatalf("status %d", resp.StatusCode)
				}
				if resp.ContentLength != wantLength {
					t.Errorf("Content-Length %d, want %d", resp.ContentLength, wantLength)
				}
				if unknown && !m.DownH2() && (len(resp.TransferEncoding) != 1 || resp.TransferEncoding[0] != "chunked") {
					t.Errorf("Transfer-Encoding %q, want chunked", resp.TransferEncoding)
				}
				proxytest.CheckSum(t, resp.Body, proxytest.BigSize, bigSum)
			})
		}
	})
}

// TestMatrixStreaming checks in every mode that ebb holds nothing back:
// each piece of a response crosses ebb before the origin writes the next,
// and each piece of a request body reaches the origin before the client
// sends the next. Where the client speaks HTTP/2 the exchange is full
// duplex, whatever the upstream's protocol: the origin echoes each piece
// while the request is still open. (An HTTP/1.1 client's body is sent
// whole before its response is read.)
func TestMatrixStreaming(t *testing.T) {
	run(t, func(t *testing.T, m mode) {
		ack := make(chan struct{})        // the client has a response piece
		got := make(chan string)          // a request piece as the origin read it
		originErr := make(chan error, 16) // how each origin handler ended
		duplex := m.DownH2()
		mux := http.NewServeMux()
		mux.HandleFunc("GET /down", func(w http.ResponseWriter, r *http.Request) {
			originErr <- func() error {
				for i, p := range pieces {
					if _, err := io.WriteString(w, p); err != nil {
						return err
					}
					w.(http.Flusher).Flush()
					if i == len(pieces)-1 {
						return nil
					}
					select {
					case <-ack:
					case <-r.Context().Done():
						return fmt.Errorf("piece %d was never acknowledged: %w", i, r.Context().Err())
					}
				}
				return nil
			}()
		})
		mux.HandleFunc("POST /up", func(w http.ResponseWriter, r *http.Request) {
			originErr <- func() error {
				if !m.UpH2() && (r.ContentLength != -1 || len(r.TransferEncoding) != 1 || r.TransferEncoding[0] != "chunked") {
					return fmt.Errorf("Content-Length %d, Transfer-Encoding %q; want a chunked request", r.ContentLength, r.TransferEncoding)
				}
				if duplex {
					// Else net/http's HTTP/1 server ends the request body
					// once the response has begun.
					if err := http.NewResponseController(w).EnableFullDuplex(); err != nil {
						return err
					}
					w.WriteHeader(http.StatusOK)
					w.(http.Flusher).Flush()
				}
				for i, p := range pieces {
					b := make([]byte, len(p))
					if _, err := io.ReadFull(r.Body, b); err != nil {
						return fmt.Errorf("reading piece %d: %w", i, err)
					}
					if duplex {
						if _, err := w.Write(b); err != nil {
							return fmt.Errorf("echoing piece %d: %w", i, err)
						}
						w.(http.Flusher).Flush()
						continue
					}
					select {
					case got <- string(b):
					case <-r.Context().Done():
						return r.Context().Err()
					}
				}
				if rest, err := io.ReadAll(r.Body); err != nil || len(rest) != 0 {
					return fmt.Errorf("after the last piece: %q, %v; want the end", rest, err)
				}
				if !duplex {
					io.WriteString(w, "received\n")
				}
				return nil
			}()
		})
		e := newEnv(t, m, mux)
		ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
		defer cancel()

		t.Run("response", func(t *testing.T) {
			resp := e.Send(t, proxytest.NewRequest(t, ctx, "GET", e.URL("/down"), nil))
			defer resp.Body.Close()
			if !m.DownH2() && (resp.ContentLength != -1 || len(resp.TransferEncoding) != 1 || resp.TransferEncoding[0] != "chunked") {
				t.Fatalf("Content-Length %d, Transfer-Encoding %q; want a chunked response", resp.ContentLength, resp.TransferEncoding)
			}
			for i, p := range pieces {
				b := make([]byte, len(p))
				if _, err := io.ReadFull(resp.Body, b); err != nil {
					t.Fatalf("piece %d did not arrive on its own (ebb holds it back?): %v", i, err)
				}
				if string(b) != p {
					t.Fatalf("piece %d: got %q, want %q", i, b, p)
				}
				if i < len(pieces)-1 {
					select {
					case ack <- struct{}{}:
					case <-ctx.Done():
						t.Fatalf("the origin did not wait for piece %d to arrive: %v", i, ctx.Err())
					}
				}
			}
			if rest, err := io.ReadAll(resp.Body); err != nil || len(rest) != 0 {
				t.Fatalf("after the last piece: %q, %v; want a clean end", rest, err)
			}
			if err := recv(t, originErr, "the origin handler"); err != nil {
				t.Fatal("origin:", err)
			}
		})
		t.Run("request", func(t *testing.T) {
			pr, pw := io.Pipe()
			defer pw.Close()
			req := proxytest.NewRequest(t, ctx, "POST", e.URL("/up"), pr)
			req.ContentLength = -1
			if duplex {
				resp := e.Send(t, req)
				defer resp.Body.Close()
				for i, p := range pieces {
					if _, err := io.WriteString(pw, p); err != nil {
						t.Fatalf("writing piece %d: %v", i, err)
					}
					b := make([]byte, len(p))
					if _, err := io.ReadFull(resp.Body, b); err != nil || string(b) != p {
						t.Fatalf("echo of piece %d: %.40q, %v; want %.40q", i, b, err, p)
					}
				}
				pw.Close()
				if rest, err := io.ReadAll(resp.Body); err != nil || len(rest) != 0 {
					t.Fatalf("after the last echo: %q, %v; want a clean end", rest, err)
				}
				if err := recv(t, originErr, "the origin handler"); err != nil {
					t.Fatal("origin:", err)
				}
				return
			}
			type response struct {
				status int
				body   string
				err    error
			}
			respCh := make(chan response, 1)
			go func() {
				resp, err := e.Client.Do(req)
				if err != nil {
					respCh <- response{err: err}
					return
				}
				defer resp.Body.Close()
				b, err := io.ReadAll(resp.Body)
				respCh <- response{status: resp.StatusCode, body: string(b), err: err}
			}()
			for i, p := range pieces {
				if _, err := io.WriteString(pw, p); err != nil {
					t.Fatalf("writing piece %d: %v", i, err)
				}
				if g := recv(t, got, fmt.Sprintf("piece %d at the origin (ebb holds it back?)", i)); g != p {
					t.Fatalf("the origin read piece %d as %q, want %q", i, g, p)
				}
			}
			pw.Close()
			if err := recv(t, originErr, "the origin handler"); err != nil {
				t.Fatal("origin:", err)
			}
			if r := recv(t, respCh, "the response"); r.err != nil || r.status != 200 || r.body != "received\n" {
				t.Fatalf("response: status %d, body %q, err %v; want 200 \"received\\n\"", r.status, r.body, r.err)
			}
		})
	})
}

// headerReport is what the headers scenario's origin saw of a request.
type headerReport struct {
	Host   string
	Header http.Header
}

// TestMatrixHeaders checks the header rules in every mode: hop-by-hop
// headers cross in neither direction, the Host (:authority) the client
// addressed reaches the origin, and X-Forwarded-For, -Proto and -Host
// are set.
func TestMatrixHeaders(t *testing.T) {
	run(t, func(t *testing.T, m mode) {
		e := newEnv(t, m, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			h := w.Header()
			h.Set("Connection", "keep-alive")
			h.Set("Keep-Alive", "timeout=5")
			if r.ProtoMajor == 1 {
				// A header that Connection names is hop-by-hop too.
				h.Add("Connection", "x-foo")
				h.Set("X-Foo", "1")
			}
			h.Set("X-Ordinary", "kept")
			h.Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(headerReport{Host: r.Host, Header: r.Header})
		}))
		req := proxytest.NewRequest(t, t.Context(), "GET", e.URL("/headers"), nil)
		req.Header.Set("X-Ordinary-Request", "kept")
		requestHop := []string{"Connection", "Keep-Alive", "X-Bar"}
		if !m.DownH2() {
			// HTTP/2 has no such headers: Go's client will not send them.
			req.Header.Set("Connection", "x-bar")
			req.Header.Set("Keep-Alive", "timeout=5")
			req.Header.Set("X-Bar", "1")
		}
		resp, body := e.Exchange(t, req)
		if resp.StatusCode != 200 {
			t.Fatalf("status %d, body %q", resp.StatusCode, body)
		}
		var seen headerReport
		if err := json.Unmarshal(body, &seen); err != nil {
			t.Fatalf("the origin's report %q: %v", body, err)
		}

		for _, h := range []string{"Connection", "Keep-Alive", "X-Foo"} {
			if v, ok := resp.Header[h]; ok {
				t.Errorf("hop-by-hop response header %s: %q reached the client", h, v)
			}
		}
		if got := resp.Header.Get("X-Ordinary"); got != "kept" {
			t.Errorf("response header X-Ordinary: %q, want \"kept\"", got)
		}
		for _, h := range requestHop {
			if v, ok := seen.Header[h]; ok {
				t.Errorf("hop-by-hop request header %s: %q reached the origin", h, v)
			}
		}
		if got := seen.Header.Get("X-Ordinary-Request"); got != "kept" {
			t.Errorf("request header X-Ordinary-Request at the origin: %q, want \"kept\"", got)
		}
		if seen.Host != e.Host {
			t.Errorf("the origin saw Host %q, want %q (what the client addressed)", seen.Host, e.Host)
		}
		proto := "http"
		if m.TLS() {
			proto = "https"
		}
		for _, c := range []struct{ name, want string }{
			{"X-Forwarded-For", "127.0.0.1"},
			{"X-Forwarded-Proto", proto},
			{"X-Forwarded-Host", e.Host},
		} {
			if got := seen.Header[c.name]; len(got) != 1 || got[0] != c.want {
				t.Errorf("the origin saw %s %q, want [%q]", c.name, got, c.want)
			}
		}
	})
}

// TestMatrixTrailers has the origin send two trailers, one declared in a
// Trailer header and one not (http.TrailerPrefix): the client must
// receive both, in HTTP/1 chunked trailers or an HTTP/2 trailing HEADERS
// frame.
func TestMatrixTrailers(t *testing.T) {
	run(t, func(t *testing.T, m mode) {
		e := newEnv(t, m, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Trailer", "X-Checksum")
			w.Header().Set("Content-Type", "text/plain")
			w.WriteHeader(http.StatusOK)
			io.WriteString(w, "body\n")
			w.Header().Set("X-Checksum", "abc")
			w.Header().Set(http.TrailerPrefix+"X-Late", "late")
		}))
		req := proxytest.NewRequest(t, t.Context(), "GET", e.URL("/trailers"), nil)
		resp, body := e.Exchange(t, req)
		if resp.StatusCode != 200 || string(body) != "body\n" {
			t.Fatalf("status %d, body %q; want 200 \"body\\n\"", resp.StatusCode, body)
		}
		got := fmt.Sprintf("X-Checksum=%q X-Late=%q", resp.Trailer.Get("X-Checksum"), resp.Trailer.Get("X-Late"))
		if want := `X-Checksum="abc" X-Late="late"`; got != want {
			t.Errorf("trailers %s, want %s", got, want)
		}
	})
}

// TestMatrixRequestTrailers has the client send a body of unknown length
// with a trailer: the origin must receive it.
func TestMatrixRequestTrailers(t *testing.T) {
	run(t, func(t *testing.T, m mode) {
		e := newEnv(t, m, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, err := io.ReadAll(r.Body)
			if err != nil {
				http.Error(w, err.Error(), 500)
				return
			}
			fmt.Fprintf(w, "%s X-Sum=%q", b, r.Trailer.Get("X-Sum"))
		}))
		req := proxytest.NewRequest(t, t.Context(), "POST", e.URL("/upload"), strings.NewReader("payload"))
		req.Trailer = http.Header{"X-Sum": nil}
		req.ContentLength = -1
		req.Trailer.Set("X-Sum", "42")
		resp, body := e.Exchange(t, req)
		if want := `payload X-Sum="42"`; resp.StatusCode != 200 || string(body) != want {
			t.Fatalf("status %d, body %q; want 200 %q", resp.StatusCode, body, want)
		}
	})
}

// TestMatrixCancel has the client give up on a request while the origin
// is still working on it: the origin's request context must end.
//
// An HTTP/2 client resets the stream, which ebb passes on at once. An
// HTTP/1 client can only close its connection, which ebb does not watch
// while it waits for the upstream (proxy/upstream.go: "their client's
// leaving shows as a failed write"): the upstream request ends at
// timeouts.response. Those modes use the "slow" cluster, so that the bound
// is its short timeout rather than the 30 s default.
func TestMatrixCancel(t *testing.T) {
	run(t, func(t *testing.T, m mode) {
		started := make(chan struct{}, 1)
		ended := make(chan error, 1)
		release := make(chan struct{})
		e := newEnv(t, m, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			started <- struct{}{}
			select {
			case <-r.Context().Done():
				ended <- r.Context().Err()
			case <-release:
			}
		}))
		t.Cleanup(func() { close(release) })
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		path := "/wait"
		if !m.DownH2() {
			path = "/slow/wait"
		}
		req := proxytest.NewRequest(t, ctx, "GET", e.URL(path), nil)
		errCh := make(chan error, 1)
		go func() {
			resp, err := e.Client.Do(req)
			if err == nil {
				resp.Body.Close()
			}
			errCh <- err
		}()
		recv(t, started, "the request to reach the origin")
		cancel()
		if err := recv(t, errCh, "the client to give up"); !errors.Is(err, context.Canceled) {
			t.Fatalf("the client's request ended with %v, want context.Canceled", err)
		}
		if err := recv(t, ended, "the origin's request context to end"); !errors.Is(err, context.Canceled) {
			t.Errorf("the origin's request context ended with %v, want context.Canceled", err)
		}
	})
}

// TestMatrixVia: with headers.via, the origin sees ebb's entry after the
// client's, with the version ebb received the request in, and the client
// sees it after the origin's, with the version the origin answered in.
func TestMatrixVia(t *testing.T) {
	run(t, func(t *testing.T, m mode) {
		e := &env{}
		e.Env = proxytest.NewEnv(t, m, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Via", "1.1 app-cache")
			io.WriteString(w, strings.Join(r.Header.Values("Via"), "|"))
		}), func(yaml string) string {
			yaml = strings.Replace(yaml, "    address: 127.0.0.1:0\n", "    address: 127.0.0.1:0\n    headers: { via: ebb }\n", 1)
			e.px = startMatrixProxy(t, yaml)
			return e.px.Addr("public").String()
		})
		req := proxytest.NewRequest(t, t.Context(), "GET", e.URL("/via"), nil)
		req.Header.Set("Via", "1.1 waf")
		resp, body := e.Exchange(t, req)
		down, up := "1.1", "1.1"
		if m.DownH2() {
			down = "2"
		}
		if m.UpH2() {
			up = "2"
		}
		if want := "1.1 waf, " + down + " ebb"; string(body) != want {
			t.Errorf("the origin saw Via %q, want %q", body, want)
		}
		if got, want := resp.Header.Values("Via"), "1.1 app-cache, "+up+" ebb"; len(got) != 1 || got[0] != want {
			t.Errorf("the client got Via %q, want [%q]", got, want)
		}
	})
}
