package proxy

import (
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ebb-proxy/ebb/config"
)

// TestAutoClusterSpeaksWhatALPNSays: an auto cluster speaks HTTP/2 (ebb's
// own client) to an endpoint whose TLS handshake negotiates h2, and
// HTTP/1.1 to one that negotiates http/1.1 (or nothing), from the first
// request on and for those after it, bodies and all.
func TestAutoClusterSpeaksWhatALPNSays(t *testing.T) {
	for _, tc := range []struct {
		name  string
		h2    bool
		proto string
	}{
		{"h2 negotiated", true, "HTTP/2.0"},
		{"http/1.1 negotiated", false, "HTTP/1.1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			origin := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				body, _ := io.ReadAll(r.Body)
				fmt.Fprintf(w, "%s %s %s", r.Proto, r.Method, body)
			}))
			origin.EnableHTTP2 = tc.h2
			if !tc.h2 {
				origin.TLS = &tls.Config{NextProtos: []string{"http/1.1"}}
			}
			origin.StartTLS()
			t.Cleanup(origin.Close)
			addr := startedClusterProxy(t, func(c *config.Cluster) {
				c.Protocol = config.ProtocolAuto
				c.TLS.InsecureSkipVerify = true
			}, strings.TrimPrefix(origin.URL, "https://"))
			client := newClient(t)
			for i := range 3 {
				method, want := http.MethodGet, tc.proto+" GET "
				var body io.Reader
				if i == 1 {
					method, body, want = http.MethodPost, strings.NewReader("payload"), tc.proto+" POST payload"
				}
				req, err := http.NewRequest(method, "http://"+addr+"/", body)
				if err != nil {
					t.Fatal(err)
				}
				code, got, _ := do(t, client, req)
				if code != http.StatusOK || string(got) != want {
					t.Fatalf("request %d: %d %q, want 200 %q", i, code, got, want)
				}
			}
		})
	}
}
