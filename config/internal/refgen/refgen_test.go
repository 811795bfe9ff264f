package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

// The committed reference is what the schema says: a doc comment, a
// default or an allowed value changed in package config without go
// generate leaves the page behind, and this fails.
func TestReferenceIsCurrent(t *testing.T) {
	const page = "../../../docs/CONFIGURATION.md"
	want, err := Generate("../..")
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(page)
	if err != nil {
		t.Fatalf("reading the committed reference: %v; run go generate ./config", err)
	}
	if !bytes.Equal(got, want) {
		line := 1 + bytes.Count(want[:commonPrefix(got, want)], []byte("\n"))
		t.Fatalf("docs/CONFIGURATION.md differs from package config's doc comments and defaults from line %d on: run go generate ./config and commit the page", line)
	}
}

// commonPrefix is the length of what a and b start with alike.
func commonPrefix(a, b []byte) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// What the reference derives from the code rather than from comments:
// defaults from Default and the elements' defaults, the keys that must
// be set and the values allowed from what Validate refuses. A change to
// Validate's messages that stopped the probes from reading them would
// otherwise drop "required" and the allowed values from the page
// without a word.
func TestReferenceDerivesFromTheCode(t *testing.T) {
	page, err := Generate("../..")
	if err != nil {
		t.Fatal(err)
	}
	for _, row := range []string{
		"| `admin.address` | string | `127.0.0.1:9901` |",
		"| `listeners[].name` | string | required |",
		"| `listeners[].routes` | list of mappings | required |",
		"| `listeners[].routes[].cluster` | string | required |",
		"| `listeners[].timeouts.idle` | duration | `120s` |",
		"| `listeners[].limits.max_header_bytes` | size | `32KiB` |",
		"| `clusters[].discovery.dns.refresh` | duration | `5s` |",
		"| `drain.http1.idle_close` | duration or `never` | `1s` |",
		"| `drain.min_duration` | duration | unset |",
		"| `drain.signals` | list of strings | `[SIGTERM, SIGINT]` |",
	} {
		if !bytes.Contains(page, []byte(row)) {
			t.Errorf("the reference has no row starting %s", row)
		}
	}
	for _, allowed := range []string{
		"One of `exit`, `after_delay`, `immediately`.",
		"One of `http1`, `h2c`, `h2`, `auto`.",
		"One of `SIGTERM`, `SIGINT`, `SIGHUP`, `SIGQUIT`, `SIGUSR1`, `SIGUSR2`.",
	} {
		if !bytes.Contains(page, []byte(allowed)) {
			t.Errorf("the reference does not say %s", allowed)
		}
	}
}

// A key without a doc comment would leave an empty cell: the generator
// refuses it, naming the key.
func TestUndocumentedKeyFails(t *testing.T) {
	d, err := parseDocs("../..")
	if err != nil {
		t.Fatal(err)
	}
	delete(d.fields["Limits"], "MaxBodyBytes")
	_, err = generate(d)
	if err == nil || !strings.Contains(err.Error(), "listeners[].limits.max_body_bytes (Limits.MaxBodyBytes) has no doc comment") {
		t.Fatalf("generate without the doc of Limits.MaxBodyBytes: %v, want it named", err)
	}
}
