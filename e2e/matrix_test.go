package e2e

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ebb-proxy/ebb/proxy/proxytest"
)

const (
	// floodSize is what the slow reader scenario's origin sends: bigBody
	// over and over.
	floodSize = 64 << 20
	// maxSlowReaderGrowthKiB bounds how much ebb's RSS may grow while a
	// client does not read: half of floodSize.
	maxSlowReaderGrowthKiB = 32 << 10
	// readerPause is how long the slow reader stops reading.
	readerPause = 500 * time.Millisecond
)

// floodSum is the SHA-256 (hex) of the flood: bigBody, floodSize/len
// times over.
var floodSum = sync.OnceValue(func() string {
	big, _ := proxytest.BigBody()
	h := sha256.New()
	for range floodSize / len(big) {
		h.Write(big)
	}
	return hex.EncodeToString(h.Sum(nil))
})

// TestMatrixSlowReader has the origin write 64 MiB as fast as it can to a
// client that reads a few KiB and then stops for a while: flow control
// (HTTP/2 windows, TCP buffers) must hold the origin back, so that ebb's
// RSS stays bounded and the origin cannot finish; the client then reads
// the rest, which must be intact.
func TestMatrixSlowReader(t *testing.T) {
	run(t, func(t *testing.T, m mode) {
		big, _ := proxytest.BigBody()
		var written atomic.Int64
		e := newEnv(t, m, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/warm" {
				io.WriteString(w, "warm\n")
				return
			}
			w.Header().Set("Content-Length", strconv.Itoa(floodSize))
			for range floodSize / len(big) {
				for b := big; len(b) > 0; b = b[32<<10:] {
					if _, err := w.Write(b[:32<<10]); err != nil {
						return
					}
					written.Add(32 << 10)
				}
			}
		}))
		ctx := t.Context()
		// Warm up (the first connections, pools, buffers), then take the
		// baseline.
		if resp, body := e.Exchange(t, proxytest.NewRequest(t, ctx, "GET", e.URL("/warm"), nil)); resp.StatusCode != 200 {
			t.Fatalf("warm-up: status %d, body %q", resp.StatusCode, body)
		}
		baseline := procStatusKiB(t, e.ebb.pid(), "VmRSS")

		resp := e.Send(t, proxytest.NewRequest(t, ctx, "GET", e.URL("/flood"), nil))
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
		head := make([]byte, 4<<10)
		if _, err := io.ReadFull(resp.Body, head); err != nil {
			t.Fatal(err)
		}
		pause, stop := after(readerPause)
		defer stop()
		select {
		case <-pause:
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
		during := procStatusKiB(t, e.ebb.pid(), "VmRSS")
		sent := written.Load()
		t.Logf("ebb RSS %d KiB before, %d KiB while the client does not read (+%d KiB); the origin has written %d MiB of %d",
			baseline, during, during-baseline, sent>>20, floodSize>>20)
		if during-baseline > maxSlowReaderGrowthKiB {
			t.Errorf("ebb's RSS grew by %d KiB while the client did not read, want less than %d KiB: ebb buffers what the client does not take",
				during-baseline, maxSlowReaderGrowthKiB)
		}
		if sent >= floodSize {
			t.Errorf("the origin wrote all %d MiB while the client did not read: nothing held it back", floodSize>>20)
		}
		proxytest.CheckSum(t, io.MultiReader(bytes.NewReader(head), resp.Body), floodSize, floodSum())
	})
}
