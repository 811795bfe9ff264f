package proxy

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/ebb-proxy/ebb/proxy/proxytest"
)

// targetOrigin is an origin that records the method and request target
// of each request it receives, as received, and answers with its name.
type targetOrigin struct {
	name string
	mu   sync.Mutex
	got  []string
}

func (o *targetOrigin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	o.mu.Lock()
	o.got = append(o.got, r.Method+" "+r.RequestURI)
	o.mu.Unlock()
	io.WriteString(w, o.name)
}

// take returns what the origin received since the last take.
func (o *targetOrigin) take() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	got := o.got
	o.got = nil
	return got
}

// pathsYAML is a listener "public" whose routes give /admin to cluster b
// and everything else (/public among it) to cluster a, both of protocol
// proto, with the listener lines extra (a paths block) and the access log
// in logPath.
func pathsYAML(proto, a, b, extra, logPath string) string {
	return fmt.Sprintf(`
admin: { address: 127.0.0.1:0 }
listeners:
  - name: public
    address: 127.0.0.1:0
    %s
    routes:
      - { match: { path_prefix: "/admin" }, cluster: b }
      - { match: { path_prefix: "/public" }, cluster: a }
      - { cluster: a }
clusters:
  - { name: a, protocol: %s, discovery: { static: [%q] } }
  - { name: b, protocol: %s, discovery: { static: [%q] } }
telemetry:
  access_log: { format: json, path: %q }
`, extra, proto, a, proto, b, logPath)
}

// TestPathNormalization shows the bypass the listener's paths block
// prevents, through both engines (HTTP/1.1 and HTTP/2 clients) to both
// kinds of upstream: with /admin routed to cluster b and /public to
// cluster a, /public/../admin reaches a's origin as it was sent when the
// block is off (an origin reads it as /admin), and b's as /admin when
// normalize is on; a path the block refuses gets 400 and reaches no
// origin. The query goes as sent, and the access log shows the path as
// the client sent it.
func TestPathNormalization(t *testing.T) {
	type pathCase struct {
		target string // as the client sends it
		status int
		origin string // the origin that gets it, "" for none
		got    string // the target the origin receives
	}
	configs := []struct {
		name, block string
		cases       []pathCase
	}{
		{"off", "", []pathCase{
			{"/public/../admin", 200, "A", "/public/../admin"},
			{"/public/%2e%2e/admin", 200, "A", "/public/%2e%2e/admin"},
			{"/public%2F..%2Fadmin", 200, "A", "/public%2F..%2Fadmin"},
			{"/public//x?q=../y", 200, "A", "/public//x?q=../y"},
		}},
		{"normalize", "paths: { normalize: true, merge_slashes: true, escaped_slashes: decode }", []pathCase{
			{"/public/../admin", 200, "B", "/admin"},
			{"/public/%2e%2E/admin?q=../%2e", 200, "B", "/admin?q=../%2e"},
			{"/public%2F..%2Fadmin", 200, "B", "/admin"},
			{`/public/..\admin`, 200, "B", "/admin"},
			{"/public//x/./y/%7e", 200, "A", "/public/x/y/~"},
			{"/public/x?y", 200, "A", "/public/x?y"},
			{"/public/%zz", 400, "", ""},
		}},
		{"reject", "paths: { normalize: true, escaped_slashes: reject }", []pathCase{
			{"/public%2F..%2Fadmin", 400, "", ""},
			{"/public/%5c../admin", 400, "", ""},
			{"/public/%2e%2e/admin", 200, "B", "/admin"},
			{"/public/x?to=%2F", 200, "A", "/public/x?to=%2F"},
		}},
	}
	for _, up := range []string{"http1", "h2c"} {
		t.Run(up, func(t *testing.T) {
			a, b := &targetOrigin{name: "A"}, &targetOrigin{name: "B"}
			start := func(o *targetOrigin) string {
				if up == "h2c" {
					return proxytest.H2CServer(t, nil, o)
				}
				return hostPort(newOrigin(t, o))
			}
			aAddr, bAddr := start(a), start(b)
			for _, cfg := range configs {
				t.Run(cfg.name, func(t *testing.T) {
					logPath := filepath.Join(t.TempDir(), "access.log")
					e := startEbb(t, pathsYAML(up, aAddr, bAddr, cfg.block, logPath))
					var sent []string // the targets, as the access log should show them
					for _, down := range []proxytest.Downstream{proxytest.DownH1, proxytest.DownH2C} {
						client := proxytest.ModeClient(t, proxytest.Mode{Down: down}, nil)
						for _, tc := range cfg.cases {
							// Opaque: the target goes as it is, unparsed.
							req := &http.Request{Method: http.MethodGet, Host: "app", Header: http.Header{},
								URL: &url.URL{Scheme: "http", Host: e.addr("public"), Opaque: tc.target}}
							status, body, _ := do(t, client, req)
							got := append(a.take(), b.take()...)
							var want []string
							if tc.origin != "" {
								want = []string{"GET " + tc.got}
							}
							if status != tc.status || (tc.origin != "" && string(body) != tc.origin) || fmt.Sprint(got) != fmt.Sprint(want) {
								t.Errorf("%v %s: %d %q, the origins got %q; want %d from %q, which gets %q",
									down, tc.target, status, body, got, tc.status, tc.origin, want)
							}
							sent = append(sent, tc.target)
						}
					}
					// A line may be written just after its response was read:
					// the order is not the requests'.
					var logged []string
					for _, line := range accessLines(t, e.px, logPath, len(sent)) {
						var entry struct{ Path string }
						if err := json.Unmarshal([]byte(line), &entry); err != nil {
							t.Fatalf("%q: %v", line, err)
						}
						logged = append(logged, entry.Path)
					}
					slices.Sort(logged)
					slices.Sort(sent)
					if !slices.Equal(logged, sent) {
						t.Errorf("the access log's paths: %q, want those sent, %q", logged, sent)
					}
				})
			}
		})
	}
}

// TestPathNormalizationTargetForms: with the paths block on, an
// absolute-form HTTP/1 target is routed and sent by its normalized path,
// and the asterisk form (OPTIONS *) goes on untouched.
func TestPathNormalizationTargetForms(t *testing.T) {
	a, b := newRawOrigin(t), newRawOrigin(t)
	logPath := filepath.Join(t.TempDir(), "access.log")
	e := startEbb(t, pathsYAML("http1", a.addr, b.addr, "paths: { normalize: true, merge_slashes: true, escaped_slashes: reject }", logPath))
	for _, tc := range []struct {
		request string
		origin  *rawOrigin
		line    string
	}{
		{"GET http://app/public/../admin?x=/../ HTTP/1.1\r\nHost: app\r\n\r\n", b, "GET /admin?x=/../ HTTP/1.1\r\n"},
		{"GET http://app/public//./x HTTP/1.1\r\nHost: app\r\n\r\n", a, "GET /public/x HTTP/1.1\r\n"},
		{"OPTIONS * HTTP/1.1\r\nHost: app\r\n\r\n", a, "OPTIONS * HTTP/1.1\r\n"},
	} {
		before := len(tc.origin.received())
		resp, body := rawExchange(t, e.addr("public"), tc.request)
		got := tc.origin.received()
		if resp.StatusCode != http.StatusOK || string(body) != "ok" || len(got) != before+1 || !strings.HasPrefix(got[before], tc.line) {
			t.Errorf("%q: %d %q, the origin got %q; want 200 and %q", tc.request, resp.StatusCode, body, got[before:], tc.line)
		}
	}
	resp, _ := rawExchange(t, e.addr("public"), "GET http://app/public%2f..%2fadmin HTTP/1.1\r\nHost: app\r\n\r\n")
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("an absolute-form target with an encoded slash: %d, want 400", resp.StatusCode)
	}
	if got := append(a.received(), b.received()...); len(got) != 3 {
		t.Errorf("the origins got %d requests, want 3", len(got))
	}
}
