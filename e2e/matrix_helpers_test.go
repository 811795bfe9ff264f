package e2e

import (
	"bytes"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/ebb-proxy/ebb/proxy/proxytest"
)

// The behaviour matrix (proxytest.Mode: each way a client can reach ebb
// crossed with each way ebb reaches the origin) runs in the proxy
// package's tests against ebb in the test's process. Here it runs against
// the binary for what only a process shows (its memory) and for clients
// that are processes themselves (curl, h2load).

// mode is one combination of the matrix.
type mode = proxytest.Mode

const (
	downH1    = proxytest.DownH1
	downH1TLS = proxytest.DownH1TLS
	downH2C   = proxytest.DownH2C
	downH2TLS = proxytest.DownH2TLS
	upHTTP1   = proxytest.UpHTTP1
	upH2C     = proxytest.UpH2C
	upH2      = proxytest.UpH2
	upAuto    = proxytest.UpAuto
)

// run runs f once per mode, each in a parallel subtest.
func run(t *testing.T, f func(t *testing.T, m mode)) {
	t.Helper()
	proxytest.Run(t, f)
}

// env is one mode set up (see proxytest.Env) with the ebb binary in the
// middle.
type env struct {
	*proxytest.Env
	ebb *ebbProc
}

// newEnv starts an origin serving h, ebb and a client for mode m, all
// stopped at cleanup.
func newEnv(t *testing.T, m mode, h http.Handler) *env {
	t.Helper()
	e := &env{}
	e.Env = proxytest.NewEnv(t, m, h, func(yaml string) string {
		e.ebb = startEbb(t, yaml)
		return e.ebb.addr("public")
	})
	return e
}

// matrixCurl runs curl with args, writing the body to a file, and returns
// the status, the HTTP version curl used (%{http_version}: "1.1", "2")
// and the body. It fails the test if curl fails.
func matrixCurl(t *testing.T, args ...string) (status int, version string, body []byte) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "curl-body")
	full := append([]string{"-sS", "--max-time", "60", "-o", out, "-w", "%{http_code} %{http_version}"}, args...)
	cmd := exec.Command(curlPath(t), full...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("curl %s: %v\nstderr:\n%s", strings.Join(args, " "), err, stderr.String())
	}
	code, version, ok := strings.Cut(strings.TrimSpace(stdout.String()), " ")
	status, err := strconv.Atoi(code)
	if !ok || err != nil {
		t.Fatalf("curl %s: -w output %q, want \"STATUS VERSION\"", strings.Join(args, " "), stdout.String())
	}
	body, err = os.ReadFile(out)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return status, version, body
}

// h2loadPath returns h2load's path (see tool; e2e/deps.sh installs
// nghttp2-client).
func h2loadPath(t *testing.T) string {
	t.Helper()
	return tool(t, "h2load")
}

// h2loadRequests and h2loadStatus match the summary lines of h2load.
var (
	h2loadRequests = regexp.MustCompile(`(?m)^requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, (\d+) failed, (\d+) errored, (\d+) timeout$`)
	h2loadStatus   = regexp.MustCompile(`(?m)^status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx$`)
)
