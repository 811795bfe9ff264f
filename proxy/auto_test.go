package proxy

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ebb-proxy/ebb/config"
)

// autoBig is the size of the origin's /big answer: beyond what the
// HTTP/1 transport reads whole, so that it streams.
const autoBig = 200 << 10

// TestAutoClusterSpeaksWhatALPNSays: an auto cluster speaks HTTP/2 (ebb's
// own client) to an endpoint whose TLS handshake negotiates h2, and
// HTTP/1.1 (ebb's HTTP/1 transport, over TLS) to one that negotiates
// http/1.1, from the first request on and for those after it: bodies
// both ways, a streamed answer, trailers, HEAD, from HTTP/1.1 and HTTP/2
// clients alike. The connection whose handshake found HTTP/1.1 carries
// the first request: the origin sees one connection in all, either way.
func TestAutoClusterSpeaksWhatALPNSays(t *testing.T) {
	big := bytes.Repeat([]byte("0123456789abcdef"), autoBig/16)
	for _, tc := range []struct {
		name  string
		h2    bool
		proto string
	}{
		{"h2 negotiated", true, "HTTP/2.0"},
		{"http/1.1 negotiated", false, "HTTP/1.1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var conns atomic.Int32
			origin := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				switch r.URL.Path {
				case "/big":
					w.Header().Set("Content-Length", fmt.Sprint(len(big)))
					w.Write(big)
				case "/trailer":
					w.Header().Set("Trailer", "X-Sum")
					io.WriteString(w, "counted")
					w.(http.Flusher).Flush()
					w.Header().Set("X-Sum", "42")
				default:
					body, _ := io.ReadAll(r.Body)
					fmt.Fprintf(w, "%s %s %s %s", r.Proto, r.Method, body, r.Trailer.Get("X-Client-Sum"))
				}
			}))
			origin.EnableHTTP2 = tc.h2
			if !tc.h2 {
				origin.TLS = &tls.Config{NextProtos: []string{"http/1.1"}}
			}
			origin.Config.ConnState = func(_ net.Conn, s http.ConnState) {
				if s == http.StateNew {
					conns.Add(1)
				}
			}
			origin.StartTLS()
			t.Cleanup(origin.Close)
			addr := startedClusterProxy(t, func(c *config.Cluster) {
				c.Protocol = config.ProtocolAuto
				c.TLS.InsecureSkipVerify = true
			}, strings.TrimPrefix(origin.URL, "https://"))
			for _, client := range []struct {
				name string
				rt   http.RoundTripper
			}{{"HTTP/1.1 client", newClient(t).Transport}, {"HTTP/2 client", h2cTransport(t)}} {
				t.Run(client.name, func(t *testing.T) { autoExchanges(t, client.rt, "http://"+addr, tc.proto, big) })
			}
			if n := conns.Load(); n != 1 {
				t.Fatalf("the origin saw %d connections, want 1", n)
			}
		})
	}
}

// autoExchanges makes the requests of TestAutoClusterSpeaksWhatALPNSays
// through rt to base, whose origin speaks proto.
func autoExchanges(t *testing.T, rt http.RoundTripper, base, proto string, big []byte) {
	t.Helper()
	roundTrip := func(method, path string, body io.Reader, trailer http.Header) (*http.Response, []byte) {
		t.Helper()
		req, err := http.NewRequest(method, base+path, body)
		if err != nil {
			t.Fatal(err)
		}
		req.Trailer = trailer
		resp, err := rt.RoundTrip(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		got, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("%s %s: reading the body: %v", method, path, err)
		}
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s %s: %d %q", method, path, resp.StatusCode, got)
		}
		return resp, got
	}
	for i := range 2 { // the second time on the connection the first left
		if _, got := roundTrip(http.MethodGet, "/", nil, nil); string(got) != proto+" GET  " {
			t.Fatalf("GET %d: %q, want %q", i, got, proto+" GET  ")
		}
	}
	if _, got := roundTrip(http.MethodPost, "/", strings.NewReader("payload"), nil); string(got) != proto+" POST payload " {
		t.Fatalf("POST: %q", got)
	}
	// A chunked body whose trailer comes after it.
	trailer := http.Header{"X-Client-Sum": nil}
	pr, pw := io.Pipe()
	var writer sync.WaitGroup
	defer writer.Wait()
	defer pr.Close() // ends the writer if the body was not read
	writer.Go(func() {
		io.WriteString(pw, "streamed")
		trailer.Set("X-Client-Sum", "7")
		pw.Close()
	})
	if _, got := roundTrip(http.MethodPost, "/", pr, trailer); string(got) != proto+" POST streamed 7" {
		t.Fatalf("POST with a trailer: %q", got)
	}
	if _, got := roundTrip(http.MethodGet, "/big", nil, nil); !bytes.Equal(got, big) {
		t.Fatalf("GET /big: %d bytes, not the %d the origin sent", len(got), len(big))
	}
	if resp, got := roundTrip(http.MethodHead, "/big", nil, nil); len(got) != 0 || resp.ContentLength != int64(len(big)) {
		t.Fatalf("HEAD /big: Content-Length %d and %d bytes, want %d and none", resp.ContentLength, len(got), len(big))
	}
	if resp, got := roundTrip(http.MethodGet, "/trailer", nil, nil); string(got) != "counted" || resp.Trailer.Get("X-Sum") != "42" {
		t.Fatalf("GET /trailer: %q, trailers %v", got, resp.Trailer)
	}
}
