package e2e

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// runOnce runs the ebb binary to completion (bounded by stopTimeout) and
// returns its exit status, stdout and stderr.
func runOnce(t *testing.T, env []string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, ebbBin, args...)
	cmd.Env = append(cmd.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("ebb %s did not exit within %s (stderr: %s)", strings.Join(args, " "), stopTimeout, stderr.String())
	}
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, stdout.String(), stderr.String()
}

// badConfig has problems of both kinds: ones found while decoding (an
// unknown key, values of the wrong form) and ones found by validation.
const badConfig = `
admin: { address: 127.0.0.1:0 }
listeners:
  - name: public
    adress: 127.0.0.1:0
    limits: { max_body_bytes: lots }
    routes:
      - match: { path_prefix: "api" }
        cluster: nowhere
clusters:
  - name: app
    balancer: random
    discovery: { static: ["127.0.0.1:9"] }
    timeouts: { response: soon }
drain: { quiet: forever }
`

// badConfigProblems are the problems in badConfig, each as ebb prints it
// after "ebb: config: FILE: ".
var badConfigProblems = []string{
	`listeners[0].adress: unknown key (did you mean "address"?)`,
	`listeners[0].limits.max_body_bytes: expected a size such as 65536, 64KiB or 1MiB, got "lots"`,
	`clusters[0].timeouts.response: expected a duration such as 500ms, 2s or 1m, got "soon"`,
	`drain.quiet: expected a duration such as 500ms, 2s or 1m, got "forever"`,
	`clusters[0].balancer: expected one of least_request, ewma, round_robin, p2c, got "random"`,
	`listeners[0].routes[0].cluster: no cluster is named "nowhere"`,
	`listeners[0].routes[0].match.path_prefix: expected a path starting with /, got "api"`,
}

// TestBadConfig checks that ebb run refuses a configuration with an
// unknown key (exit status 1, the key and the file named, nothing
// started), and that ebb check prints every problem of a configuration,
// each on its own line naming the file.
func TestBadConfig(t *testing.T) {
	t.Parallel()

	t.Run("run with an unknown key", func(t *testing.T) {
		path := writeConfig(t, strings.Replace(singleClusterYAML("127.0.0.1:9"), "    address: 127.0.0.1:0", "    adress: 127.0.0.1:0", 1))
		code, stdout, stderr := runOnce(t, nil, "run", "-config", path)
		if code != 1 {
			t.Fatalf("exit status %d, want 1; stderr:\n%s", code, stderr)
		}
		want := "ebb: config: " + path + `: listeners[0].adress: unknown key (did you mean "address"?)`
		if !containsLine(stderr, want) {
			t.Errorf("stderr does not have the line\n%s\nstderr:\n%s", want, stderr)
		}
		if strings.Contains(stderr, `"msg":"listening"`) || stdout != "" {
			t.Errorf("ebb started something with a bad configuration; stdout %q, stderr:\n%s", stdout, stderr)
		}
	})

	for _, cmd := range []string{"check", "run"} {
		t.Run(cmd+" prints every problem", func(t *testing.T) {
			path := writeConfig(t, badConfig)
			code, _, stderr := runOnce(t, nil, cmd, "-config", path)
			if code != 1 {
				t.Fatalf("exit status %d, want 1; stderr:\n%s", code, stderr)
			}
			for _, p := range badConfigProblems {
				if want := "ebb: config: " + path + ": " + p; !containsLine(stderr, want) {
					t.Errorf("missing the line\n%s", want)
				}
			}
			for _, line := range strings.Split(strings.TrimSpace(stderr), "\n") {
				if !strings.HasPrefix(line, "ebb: config: "+path+": ") {
					t.Errorf("line %q does not name the file", line)
				}
			}
			if t.Failed() {
				t.Logf("stderr:\n%s", stderr)
			}
		})
	}

	t.Run("check a good configuration", func(t *testing.T) {
		path := writeConfig(t, singleClusterYAML("127.0.0.1:9"))
		code, stdout, stderr := runOnce(t, nil, "check", "-config", path)
		if code != 0 || stdout != path+": ok\n" || stderr != "" {
			t.Fatalf("exit status %d, stdout %q, stderr %q; want 0, %q, nothing", code, stdout, stderr, path+": ok\n")
		}
	})

	t.Run("missing file", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "absent.yaml")
		code, _, stderr := runOnce(t, nil, "-config", path)
		if want := "ebb: config: " + path + ": no such file\n"; code != 1 || stderr != want {
			t.Fatalf("exit status %d, stderr %q; want 1, %q", code, stderr, want)
		}
	})

	t.Run("environment and flag overrides name their source", func(t *testing.T) {
		path := writeConfig(t, singleClusterYAML("127.0.0.1:9"))
		code, _, stderr := runOnce(t, []string{"EBB_DRAIN__DELAY=later"}, "check", "-config", path, "-set", "drain.timeout=never")
		if code != 1 {
			t.Fatalf("exit status %d, want 1", code)
		}
		for _, want := range []string{
			`ebb: config: environment EBB_DRAIN__DELAY: drain.delay: expected a duration such as 500ms, 2s or 1m, got "later"`,
			`ebb: config: flag -set drain.timeout=never: drain.timeout: expected a duration such as 500ms, 2s or 1m, got "never"`,
		} {
			if !containsLine(stderr, want) {
				t.Errorf("missing the line\n%s\nstderr:\n%s", want, stderr)
			}
		}
	})

	t.Run("listener address in use", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		path := writeConfig(t, strings.Replace(singleClusterYAML("127.0.0.1:9"), "    address: 127.0.0.1:0", "    address: "+ln.Addr().String(), 1))
		code, _, stderr := runOnce(t, nil, "run", "-config", path)
		if code != 1 || !strings.Contains(stderr, "address already in use") || !strings.Contains(stderr, `listener \"public\"`) {
			t.Fatalf("exit status %d, stderr:\n%s\nwant 1 and a message naming the listener and the cause", code, stderr)
		}
	})

	t.Run("usage errors", func(t *testing.T) {
		for _, args := range [][]string{{"frobnicate"}, {"run", "-no-such-flag"}} {
			code, _, stderr := runOnce(t, nil, args...)
			if code != 2 || stderr == "" {
				t.Errorf("ebb %s: exit status %d, stderr %q; want 2 and a message", strings.Join(args, " "), code, stderr)
			}
		}
	})
}

func containsLine(text, line string) bool {
	for _, l := range strings.Split(text, "\n") {
		if l == line {
			return true
		}
	}
	return false
}
