package proxy

import (
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"testing"

	"github.com/ebb-proxy/ebb/proxy/proxytest"
)

// TestMatrixEarlyHints has the origin send a 103 Early Hints (RFC 8297)
// before its answer: HTTP/2 clients get the 103 with its Link field, then
// the answer, whatever the upstream protocol; the 103's connection-specific
// fields stay behind. HTTP/1.1 clients get the answer alone (ebb does not
// relay interim responses on HTTP/1.1).
func TestMatrixEarlyHints(t *testing.T) {
	run(t, func(t *testing.T, m mode) {
		e := newEnv(t, m, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Link", "</style.css>; rel=preload; as=style")
			w.Header().Set("Keep-Alive", "timeout=5")
			w.WriteHeader(http.StatusEarlyHints)
			w.Header().Del("Link")
			w.Header().Del("Keep-Alive")
			w.Header().Set("Content-Type", "text/plain")
			_, _ = w.Write([]byte("final"))
		}))
		var hints []textproto.MIMEHeader
		ctx := httptrace.WithClientTrace(t.Context(), &httptrace.ClientTrace{
			Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
				if code == http.StatusEarlyHints {
					hints = append(hints, h)
				}
				return nil
			},
		})
		resp, body := e.Exchange(t, proxytest.NewRequest(t, ctx, "GET", e.URL("/hints"), nil))
		if resp.StatusCode != 200 || string(body) != "final" {
			t.Fatalf("answer %d %q, want 200 \"final\"", resp.StatusCode, body)
		}
		if !m.DownH2() {
			if len(hints) != 0 {
				t.Fatalf("an HTTP/1.1 client got %d 103s", len(hints))
			}
			return
		}
		if len(hints) != 1 {
			t.Fatalf("got %d 103 responses, want 1", len(hints))
		}
		if got := hints[0].Get("Link"); got != "</style.css>; rel=preload; as=style" {
			t.Errorf("103 Link: %q", got)
		}
		if v, ok := hints[0]["Keep-Alive"]; ok {
			t.Errorf("103 carried Keep-Alive: %q", v)
		}
	})
}
