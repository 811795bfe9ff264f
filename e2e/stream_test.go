package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"testing"

	"github.com/ebb-proxy/ebb/proxy/proxytest"
)

const (
	bigSize = 64 << 20 // bytes moved each way
	// maxRSSGrowthKiB bounds how much ebb's peak RSS may grow while moving
	// bigSize bytes: a fraction of the transfer, so a body held whole in
	// memory fails it.
	maxRSSGrowthKiB = 24 << 10
)

// streamOrigin answers:
//
//	POST /sink          reads the body whole and answers
//	                    "<Content-Length seen> <bytes read> <sha256 hex>"
//	GET  /source?seed=S  bigSize bytes of randReader(S), with Content-Length
//	GET  /source?seed=S&chunked=1  the same without Content-Length (chunked)
func streamOrigin() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /sink", proxytest.Sink)
	mux.HandleFunc("GET /source", func(w http.ResponseWriter, r *http.Request) {
		seed, err := strconv.Atoi(r.URL.Query().Get("seed"))
		if err != nil {
			http.Error(w, "seed?", http.StatusBadRequest)
			return
		}
		if r.URL.Query().Get("chunked") == "" {
			w.Header().Set("Content-Length", strconv.Itoa(bigSize))
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		io.CopyN(w, randReader(byte(seed)), bigSize)
	})
	return mux
}

// TestStream64MiB moves 64 MiB through ebb each way, with Content-Length
// and chunked: uploads are hashed by the origin, downloads by the client,
// and both hashes must match the bytes sent. ebb must stream: its peak RSS
// may not grow by more than maxRSSGrowthKiB over its baseline.
func TestStream64MiB(t *testing.T) {
	t.Parallel()
	origin := newOrigin(t, streamOrigin())
	e := startEbb(t, singleClusterYAML(hostPort(origin)))
	client := newClient(t)

	// Warm up (pools, buffers, first connections), then take the baseline.
	warm, _ := http.NewRequest(http.MethodPost, e.url("public", "/sink"), io.LimitReader(randReader(9), 1<<20))
	if status, body, _ := do(t, client, warm); status != 200 {
		t.Fatalf("warm-up: status %d, body %q", status, body)
	}
	baseline := procStatusKiB(t, e.pid(), "VmRSS")
	t.Logf("ebb baseline RSS %d KiB", baseline)

	checkRSS := func(t *testing.T) {
		t.Helper()
		hwm := procStatusKiB(t, e.pid(), "VmHWM")
		t.Logf("ebb peak RSS %d KiB (+%d KiB over the baseline)", hwm, hwm-baseline)
		if hwm-baseline > maxRSSGrowthKiB {
			t.Errorf("ebb's peak RSS grew by %d KiB while moving %d MiB, want less than %d KiB: the body is not streamed",
				hwm-baseline, bigSize>>20, maxRSSGrowthKiB)
		}
	}

	for _, chunked := range []bool{false, true} {
		framing := "content-length"
		if chunked {
			framing = "chunked"
		}
		t.Run("upload/"+framing, func(t *testing.T) {
			const seed = 11
			want := streamSHA256(seed, bigSize)
			req, err := http.NewRequest(http.MethodPost, e.url("public", "/sink"), io.NopCloser(io.LimitReader(randReader(seed), bigSize)))
			if err != nil {
				t.Fatal(err)
			}
			wantLength := bigSize
			req.ContentLength = bigSize
			if chunked {
				req.ContentLength = -1
				wantLength = -1
			}
			status, body, _ := do(t, client, req)
			if status != 200 {
				t.Fatalf("status %d, body %q", status, body)
			}
			if got, wantBody := string(body), fmt.Sprintf("%d %d %s", wantLength, bigSize, want); got != wantBody {
				t.Fatalf("origin received %q, want %q", got, wantBody)
			}
			checkRSS(t)
		})
		t.Run("download/"+framing, func(t *testing.T) {
			const seed = 22
			want := streamSHA256(seed, bigSize)
			url := e.url("public", "/source?seed=22")
			if chunked {
				url += "&chunked=1"
			}
			resp, err := client.Get(url)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("status %d", resp.StatusCode)
			}
			wantLength := int64(bigSize)
			if chunked {
				wantLength = -1
			}
			if resp.ContentLength != wantLength {
				t.Errorf("Content-Length %d, want %d", resp.ContentLength, wantLength)
			}
			h := sha256.New()
			n, err := io.Copy(h, resp.Body)
			if err != nil {
				t.Fatalf("after %d bytes: %v", n, err)
			}
			if got := hex.EncodeToString(h.Sum(nil)); n != bigSize || got != want {
				t.Fatalf("received %d bytes with sha256 %s, want %d bytes with %s", n, got, bigSize, want)
			}
			checkRSS(t)
		})
	}
}
