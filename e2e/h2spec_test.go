package e2e

import (
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// h2specVersion is the h2spec that e2e/deps.sh installs; keep the two in
// step.
const h2specVersion = "v2.2.1+incompatible"

// h2specOrigin answers 200 with a short body to every request, after
// reading the request body: h2spec checks the DATA frames of responses.
func h2specOrigin() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, "hello, h2spec\n")
	})
}

// TestH2Spec runs h2spec's HTTP/2 conformance cases against ebb's
// listener, over h2c (prior knowledge) and over TLS (ALPN h2), with ebb
// forwarding to an HTTP/1.1 origin. Every case must pass, and every case
// must run (none skipped).
func TestH2Spec(t *testing.T) {
	t.Parallel()
	bin := h2specPath(t)
	origin := newOrigin(t, h2specOrigin())
	for _, mode := range []string{"h2c", "tls"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			var listener, flags []string
			if mode == "tls" {
				cert, key, _ := writeTestCert(t, t.TempDir())
				listener = []string{fmt.Sprintf("tls: { cert: %q, key: %q }", cert, key)}
				flags = []string{"-t", "-k"}
			}
			e := startEbb(t, oneClusterYAML(hostPort(origin), listener, nil))
			cases := runH2Spec(t, bin, e.addr("public"), flags...)
			checkH2Spec(t, cases)
		})
	}
}

// h2specCase is one h2spec test case as its JUnit report tells it.
type h2specCase struct {
	id      string // such as "http2/8.1.2.2/1"; "h2spec ID" runs it alone
	desc    string
	skipped bool
	failure string // what h2spec expected and got; empty if it passed
}

// runH2Spec runs h2spec against addr with flags added and returns its
// cases.
func runH2Spec(t *testing.T, bin, addr string, flags ...string) []h2specCase {
	t.Helper()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	report := filepath.Join(t.TempDir(), "h2spec.xml")
	// -o: how long h2spec waits for each expected frame. A passing case
	// does not wait; each failing one does, so the run's bound below is
	// generous.
	args := append([]string{"-h", host, "-p", port, "-P", "/", "-o", "5", "-j", report}, flags...)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	out, err := cmd.CombinedOutput()
	// h2spec exits with status 1 when a case fails; the report says which.
	var ee *exec.ExitError
	if err != nil && !(errors.As(err, &ee) && ee.ExitCode() == 1) {
		t.Fatalf("h2spec %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	b, err := os.ReadFile(report)
	if err != nil {
		t.Fatalf("h2spec %s wrote no report: %v\n%s", strings.Join(args, " "), err, out)
	}
	cases, err := parseH2SpecReport(b)
	if err != nil {
		t.Fatalf("h2spec report: %v", err)
	}
	if len(cases) == 0 {
		t.Fatalf("h2spec %s ran no case\n%s", strings.Join(args, " "), out)
	}
	return cases
}

// parseH2SpecReport reads h2spec's JUnit report: one testsuite per
// section of RFC 7540 (package "http2/8.1.2.2"), one testcase per case, in
// the order h2spec numbers them from 1. h2spec writes failures as <error>
// (and in principle <failure>: its Go type switch misses spec.TestError).
func parseH2SpecReport(b []byte) ([]h2specCase, error) {
	var report struct {
		Suites []struct {
			Package string `xml:"package,attr"`
			Cases   []struct {
				Desc    string  `xml:"classname,attr"`
				Failure *string `xml:"failure"`
				Error   *string `xml:"error"`
				Skipped *string `xml:"skipped"`
			} `xml:"testcase"`
		} `xml:"testsuite"`
	}
	if err := xml.Unmarshal(b, &report); err != nil {
		return nil, err
	}
	var cases []h2specCase
	for _, s := range report.Suites {
		for i, c := range s.Cases {
			hc := h2specCase{
				id:      fmt.Sprintf("%s/%d", s.Package, i+1),
				desc:    c.Desc,
				skipped: c.Skipped != nil,
			}
			switch {
			case c.Failure != nil:
				hc.failure = strings.TrimSpace(*c.Failure)
			case c.Error != nil:
				hc.failure = h2specError(*c.Error)
			}
			cases = append(cases, hc)
		}
	}
	return cases, nil
}

// h2specError rewrites the text of an <error>: the frames h2spec
// expected, one a line, then what it got (spec.TestError.Error), or a
// single line for an error of its own.
func h2specError(text string) string {
	lines := strings.Split(strings.TrimSpace(text), "\n")
	if len(lines) == 1 {
		if lines[0] == "" {
			return "(h2spec gave no detail)"
		}
		return lines[0]
	}
	last := len(lines) - 1
	return fmt.Sprintf("want %s; got %s", strings.Join(lines[:last], " or "), lines[last])
}

// checkH2Spec fails the test for each case that failed or was skipped.
func checkH2Spec(t *testing.T, cases []h2specCase) {
	t.Helper()
	var failed []string
	passed, skipped := 0, 0
	for _, c := range cases {
		switch {
		case c.skipped:
			skipped++
			failed = append(failed, fmt.Sprintf("%s (%s): skipped", c.id, c.desc))
		case c.failure == "":
			passed++
		default:
			failed = append(failed, fmt.Sprintf("%s (%s):\n\t%s", c.id, c.desc, strings.ReplaceAll(c.failure, "\n", "\n\t")))
		}
	}
	t.Logf("h2spec: %d cases, %d passed, %d skipped, %d failed", len(cases), passed, skipped, len(cases)-passed-skipped)
	if len(failed) > 0 {
		t.Errorf("%d h2spec cases did not pass:\n%s", len(failed), strings.Join(failed, "\n"))
	}
}

// h2specPath finds h2spec (see tool), which e2e/deps.sh installs with
// go install github.com/summerwind/h2spec/cmd/h2spec@h2specVersion.
func h2specPath(t *testing.T) string {
	t.Helper()
	return tool(t, "h2spec")
}
