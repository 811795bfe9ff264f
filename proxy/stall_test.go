package proxy

import (
	"io"
	"net/http"
	"testing"
)

// TestH2UploadStall sends HTTP/2 uploads that stop halfway and never
// finish, on as many streams as the cluster has upstream connections
// (issue 14's first finding): after timeouts.header without a body byte
// each is answered 408, its upstream request ends, and the cluster serves
// others again, instead of staying taken for as long as the client waits.
func TestH2UploadStall(t *testing.T) {
	const conns = 2
	started := make(chan struct{}, conns)
	ended := make(chan error, conns)
	origin := newOrigin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			started <- struct{}{}
			_, err := io.Copy(io.Discard, r.Body)
			ended <- err
		}
		_, _ = io.WriteString(w, "ok")
	}))
	e := startEbb(t, oneClusterYAML(hostPort(origin), []string{"timeouts: { header: 200ms }"},
		[]string{"max_conns_per_endpoint: 2", "retries: { buffer_body: 0 }"}))
	tr := h2cTransport(t)
	status := make(chan int, conns)
	for range conns {
		pr, pw := io.Pipe()
		defer pw.Close()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, e.url("public", "/upload"), pr)
		if err != nil {
			t.Fatal(err)
		}
		req.ContentLength = 100000
		go func() {
			_, _ = pw.Write(make([]byte, 9000)) // and then nothing
		}()
		go func() {
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Errorf("upload: %v", err)
				status <- 0
				return
			}
			resp.Body.Close()
			status <- resp.StatusCode
		}()
	}
	for range conns {
		recv(t, started, "an upload to reach the origin")
	}
	for range conns {
		if s := recv(t, status, "an upload's answer"); s != http.StatusRequestTimeout {
			t.Fatalf("a stalled upload was answered %d, want 408", s)
		}
		if err := recv(t, ended, "the origin's request to end"); err == nil {
			t.Fatal("the origin read a whole body the client never sent")
		}
	}
	if code, body, _ := do(t, newClient(t), mustRequest(t, http.MethodGet, e.url("public", "/after"))); code != http.StatusOK || string(body) != "ok" {
		t.Fatalf("after the stalled uploads: %d %q, want 200", code, body)
	}
}

func mustRequest(t *testing.T, method, url string) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	return req
}
