package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The two lanes of the suite. The full suite (./e2e/test.sh, the README's
// test command and CI's) runs every test, and a test whose tool is
// missing fails, saying how to install it. The fast lane, go test -short
// ./..., needs only Go: a test that needs a program besides Go and ebb
// (curl, h2load, h2spec, nginx, HAProxy, Docker, Prometheus, Chromium)
// is skipped there, as are the few that take minutes by design (the
// soak).

// tool returns the path of the program name, or, in the fast lane, skips
// the test; in the full suite it fails the test when name is not
// installed. It looks on $PATH, in /usr/sbin (where Debian puts daemons)
// and where go install puts programs.
func tool(t *testing.T, name string) string {
	t.Helper()
	if testing.Short() {
		t.Skipf("needs %s: the full suite (./e2e/test.sh) runs it", name)
	}
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	dirs := []string{"/usr/sbin"}
	// "go env GOBIN GOPATH" prints one line each, GOBIN's empty if unset.
	if out, err := exec.Command("go", "env", "GOBIN", "GOPATH").Output(); err == nil {
		lines := strings.Split(string(out), "\n")
		if lines[0] != "" {
			dirs = append(dirs, lines[0])
		}
		if len(lines) > 1 {
			for _, d := range filepath.SplitList(lines[1]) {
				dirs = append(dirs, filepath.Join(d, "bin"))
			}
		}
	}
	for _, d := range dirs {
		p := filepath.Join(d, name)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	t.Fatalf("%s is not installed: run e2e/deps.sh (it installs the tools the tests need)", name)
	return ""
}

// long skips, in the fast lane, a test that takes minutes by design.
func long(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("takes minutes: the full suite (./e2e/test.sh) runs it")
	}
}
