// Command refgen writes docs/CONFIGURATION.md, the configuration
// reference, from package config itself: the keys from its types' key
// tags, their documentation from the doc comments of the types and
// fields, their defaults from a configuration loaded by config.Load, the
// keys that must be set and the values a key allows from what
// Config.Validate refuses. It runs from package config's go:generate
// directive:
//
//	go generate ./config
//
// so that the reference exists once, in the schema's source, and the
// page only shows it; TestReferenceIsCurrent fails when the committed
// page differs from what the schema says.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
)

func main() {
	dir := flag.String("dir", ".", "the directory of package config's sources")
	out := flag.String("o", "../docs/CONFIGURATION.md", "the file to write")
	flag.Parse()
	page, err := Generate(*dir)
	if err != nil {
		fmt.Fprintf(os.Stderr, "refgen: %v\n", err)
		os.Exit(1)
	}
	if old, err := os.ReadFile(*out); err == nil && bytes.Equal(old, page) {
		return
	}
	if err := os.WriteFile(*out, page, 0o644); err != nil {
		fmt.Fprintf(os.Stderr, "refgen: %v\n", err)
		os.Exit(1)
	}
}
