package proxy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/ebb-proxy/ebb/proxy/proxytest"

	echoorigin "github.com/ebb-proxy/ebb/examples/echo"
)

// newAccessEnv is newEnv with the access log written to a file of the
// test's, in format, which lines reads.
func newAccessEnv(t *testing.T, m mode, h http.Handler, format string) (*env, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "access.log")
	e := &env{}
	e.Env = proxytest.NewEnv(t, m, h, func(yaml string) string {
		yaml += fmt.Sprintf("telemetry:\n  access_log: { format: %s, path: %q }\n", format, path)
		e.px = startMatrixProxy(t, yaml)
		return e.px.Addr("public").String()
	})
	return e, path
}

// accessLines waits until the access log at path has n lines (each
// request's is written once its response has been relayed, which may be
// just after the client has read it) and returns them.
func accessLines(t *testing.T, px *Proxy, path string, n int) []string {
	t.Helper()
	deadline := time.NewTimer(waitTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		px.sink.Flush()
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.SplitAfter(string(b), "\n")
		lines = lines[:len(lines)-1] // after the last newline
		if len(lines) >= n {
			return lines
		}
		select {
		case <-tick.C:
		case <-deadline.C:
			t.Fatalf("the access log has %d lines, want %d:\n%s", len(lines), n, b)
		}
	}
}

// uuidV4 matches the request ids ebb makes.
var uuidV4 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// TestAccessLog checks each field of the access log in every mode: a
// GET, a streamed upload echoed back in pieces (the byte counts are the
// bodies' as relayed, not a Content-Length), a request no route matches
// and one whose upstream refuses connections.
func TestAccessLog(t *testing.T) {
	run(t, func(t *testing.T, m mode) {
		var mu sync.Mutex
		var ids []string // the X-Request-Id each request reached the origin with
		e, path := newAccessEnv(t, m, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			ids = append(ids, r.Header.Get("X-Request-Id"))
			mu.Unlock()
			if r.Method == http.MethodPost {
				// Echo the body as it comes, flushing each piece: a body
				// of unknown length, streamed.
				http.NewResponseController(w).EnableFullDuplex()
				buf := make([]byte, 16<<10)
				for {
					n, err := r.Body.Read(buf)
					if n > 0 {
						w.Write(buf[:n])
						w.(http.Flusher).Flush()
					}
					if err != nil {
						return
					}
				}
			}
			io.WriteString(w, "hello")
		}), "json")
		const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
		get, err := http.NewRequest(http.MethodGet, e.Base+"/small?q=1", nil)
		if err != nil {
			t.Fatal(err)
		}
		get.Header.Set("User-Agent", "access-test/1")
		get.Header.Set("Referer", "http://example.test/from")
		get.Header.Set("X-Request-Id", "client-chosen") // from an untrusted client: replaced
		get.Header.Set("Traceparent", "00-"+traceID+"-00f067aa0ba902b7-01")
		body := roundTrip(t, e, get, http.StatusOK)
		if body != "hello" {
			t.Fatalf("GET: body %q", body)
		}

		upload := bytes.Repeat([]byte("0123456789abcdef"), 100<<10/16) // 100 KiB: streamed, over buffer_body
		post, err := http.NewRequest(http.MethodPost, e.Base+"/upload", io.MultiReader(bytes.NewReader(upload)))
		if err != nil {
			t.Fatal(err)
		}
		if body := roundTrip(t, e, post, http.StatusOK); body != string(upload) {
			t.Fatalf("POST: %d bytes echoed, want %d", len(body), len(upload))
		}

		noRoute, err := http.NewRequest(http.MethodGet, e.Base+"/", nil)
		if err != nil {
			t.Fatal(err)
		}
		noRoute.Host = "elsewhere.test"
		roundTrip(t, e, noRoute, http.StatusNotFound)
		down, err := http.NewRequest(http.MethodGet, e.Base+"/down/x", nil)
		if err != nil {
			t.Fatal(err)
		}
		roundTrip(t, e, down, http.StatusBadGateway)

		lines := accessLines(t, e.px, path, 4)
		if len(lines) != 4 {
			t.Fatalf("%d lines, want 4:\n%s", len(lines), strings.Join(lines, ""))
		}
		proto := "HTTP/1.1"
		if m.DownH2() {
			proto = "HTTP/2.0"
		}
		mu.Lock()
		if len(ids) != 2 || !uuidV4.MatchString(ids[0]) || !uuidV4.MatchString(ids[1]) || ids[0] == ids[1] {
			t.Errorf("the origin saw request ids %q, want two new UUIDs", ids)
		}
		mu.Unlock()
		common := map[string]any{"listener": "public", "protocol": proto, "client": "127.0.0.1", "draining": false}
		want := []map[string]any{{
			"method": "GET", "authority": e.Host, "path": "/small?q=1", "status": 200.0,
			"request_bytes": 0.0, "response_bytes": 5.0, "cluster": "app", "attempts": 1.0, "error": "",
			"request_id": ids[0], "trace_id": traceID, "user_agent": "access-test/1", "referer": "http://example.test/from",
		}, {
			"method": "POST", "authority": e.Host, "path": "/upload", "status": 200.0,
			"request_bytes": float64(len(upload)), "response_bytes": float64(len(upload)), "cluster": "app",
			"attempts": 1.0, "error": "", "request_id": ids[1], "trace_id": "",
		}, {
			"method": "GET", "authority": "elsewhere.test", "path": "/", "status": 404.0,
			"response_bytes": float64(len("ebb: no route for this request\n")), "cluster": "", "upstream": "",
			"attempts": 0.0, "error": "no_route",
		}, {
			"method": "GET", "authority": e.Host, "path": "/down/x", "status": 502.0, "cluster": "down",
			"attempts": 1.0, "error": "upstream_connect",
		}}
		// Each request's line, in the order they were sent: a line is
		// written when its request's handling ends, which may be after
		// its client got the last byte and sent the next request.
		byRequest := map[string]string{}
		for _, line := range lines {
			var got map[string]any
			if err := json.Unmarshal([]byte(line), &got); err != nil {
				t.Fatalf("%v: %s", err, line)
			}
			byRequest[fmt.Sprint(got["method"], " ", got["path"])] = line
		}
		for i, w := range want {
			lines[i] = byRequest[fmt.Sprint(w["method"], " ", w["path"])]
		}
		for i, line := range lines {
			var got map[string]any
			if err := json.Unmarshal([]byte(line), &got); err != nil {
				t.Fatalf("line %d: %v: %s", i, err, line)
			}
			for k, v := range common {
				want[i][k] = v
			}
			for k, v := range want[i] {
				if got[k] != v {
					t.Errorf("line %d: %s = %#v, want %#v", i, k, got[k], v)
				}
			}
			if up, _ := got["upstream"].(string); i != 2 && !strings.HasPrefix(up, "127.0.0.1:") {
				t.Errorf("line %d: upstream %q, want the endpoint's address", i, up)
			}
			if d, _ := got["duration_ms"].(float64); d <= 0 {
				t.Errorf("line %d: duration_ms %v, want > 0", i, got["duration_ms"])
			}
			if ts, _ := got["time"].(string); !strings.HasSuffix(ts, "Z") {
				t.Errorf("line %d: time %q, want RFC 3339 in UTC", i, ts)
			}
		}
	})
}

// roundTrip sends req through e's client and returns the response body,
// failing unless the status is want.
func roundTrip(t *testing.T, e *env, req *http.Request, want int) string {
	t.Helper()
	resp, err := e.Client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the body: %v", req.Method, req.URL, err)
	}
	if resp.StatusCode != want {
		t.Fatalf("%s %s: status %d, want %d", req.Method, req.URL, resp.StatusCode, want)
	}
	return string(b)
}

// TestAccessLogFormats: the text and combined formats of one request,
// from each engine.
func TestAccessLogFormats(t *testing.T) {
	for _, m := range []mode{{Down: proxytest.DownH1, Up: proxytest.UpHTTP1}, {Down: proxytest.DownH2C, Up: proxytest.UpHTTP1}} {
		for _, format := range []string{"text", "combined"} {
			t.Run(m.String()+"/"+format, func(t *testing.T) {
				e, path := newAccessEnv(t, m, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					io.WriteString(w, "hello")
				}), format)
				req, err := http.NewRequest(http.MethodGet, e.Base+"/a%20b?x=\"y\"", nil)
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("User-Agent", `agent "quoted"`)
				roundTrip(t, e, req, http.StatusOK)
				line := accessLines(t, e.px, path, 1)[0]
				proto := "HTTP/1.1"
				if m.DownH2() {
					proto = "HTTP/2.0"
				}
				var want *regexp.Regexp
				if format == "text" {
					want = regexp.MustCompile(`^time=\S+Z listener=public protocol=` + regexp.QuoteMeta(proto) +
						` client=127\.0\.0\.1 method=GET authority=127\.0\.0\.1:\d+ path="/a%20b\?x=\\"y\\"" status=200` +
						` request_bytes=0 response_bytes=5 duration_ms=[0-9.]+ cluster=app upstream=127\.0\.0\.1:\d+ attempts=1` +
						` error="" request_id=[0-9a-f-]{36} trace_id="" draining=false user_agent="agent \\"quoted\\"" referer=""` + "\n$")
				} else {
					want = regexp.MustCompile(`^127\.0\.0\.1 - - \[\d\d/\w{3}/\d{4}:\d\d:\d\d:\d\d [+-]\d{4}\] "GET /a%20b\?x=\\x22y\\x22 ` +
						regexp.QuoteMeta(proto) + `" 200 5 "-" "agent \\x22quoted\\x22"` + "\n$")
				}
				if !want.MatchString(line) {
					t.Errorf("line\n%s\ndoes not match\n%s", line, want)
				}
			})
		}
	}
}

// TestAccessLogWebSocket: an upgraded connection's line is written when
// it closes, with the bytes relayed each way (the frames).
func TestAccessLogWebSocket(t *testing.T) {
	m := mode{Down: proxytest.DownH1, Up: proxytest.UpHTTP1}
	origin := &echoorigin.WebSockets{}
	t.Cleanup(origin.Close)
	e, path := newAccessEnv(t, m, origin, "json")
	dialer := websocket.Dialer{HandshakeTimeout: waitTimeout}
	c, _, err := dialer.DialContext(t.Context(), "ws://"+e.Host+"/ws", nil)
	if err != nil {
		t.Fatal(err)
	}
	const msg = "ping through the tunnel"
	if err := c.WriteMessage(websocket.TextMessage, []byte(msg)); err != nil {
		t.Fatal(err)
	}
	if _, echo, err := c.ReadMessage(); err != nil || string(echo) != msg {
		t.Fatalf("echo %q, %v", echo, err)
	}
	c.Close() // no close frame: the bytes are the two messages'
	var got map[string]any
	if err := json.Unmarshal([]byte(accessLines(t, e.px, path, 1)[0]), &got); err != nil {
		t.Fatal(err)
	}
	// A client's frame has a 2-byte header and a 4-byte mask; a server's
	// the header alone.
	for k, v := range map[string]any{"status": 101.0, "path": "/ws", "request_bytes": float64(len(msg) + 6),
		"response_bytes": float64(len(msg) + 2), "attempts": 1.0, "error": ""} {
		if got[k] != v {
			t.Errorf("%s = %#v, want %#v", k, got[k], v)
		}
	}
}
