package main

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestDescribeKilled: a replica a signal killed is reported as such, with
// the end of its log, not as "exited -1".
func TestDescribeKilled(t *testing.T) {
	r := &replica{name: "a", stop: syscall.SIGUSR1,
		cmd: exec.Command("sh", "-c", `for i in 1 2 3 4 5 6 7; do echo line $i >&2; done; kill -SEGV $$`)}
	if err := r.run(filepath.Join(t.TempDir(), "a.log"), nil); err != nil {
		t.Fatal(err)
	}
	took, err := r.wait(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	describe(&out, r, took, nil)
	got := out.String()
	for _, want := range []string{"replica a: SIGUSR1, killed by segmentation fault after ", "the end of its log (" + r.log + "):\n      line 3\n", "      line 7\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("describe wrote %q, want it to hold %q", got, want)
		}
	}
	if strings.Contains(got, "line 2") {
		t.Errorf("describe wrote %q: more than the last five lines", got)
	}
}
