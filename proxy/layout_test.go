package proxy_test

import (
	"bytes"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"testing"
)

// The shape of the module's files, enforced beside its import layers
// (deps_test.go): files split by concern (STYLE.md), none longer than
// maxFileLines unless it says why.

// maxFileLines is how many lines a file of the module's code may have.
const maxFileLines = 600

// longFileMarker, followed by a space and a reason, lets a file be longer
// than maxFileLines: a line of the comments above its package clause, such
// as its first. Written as a directive (no space after //), it never shows
// in a package's doc comment.
const longFileMarker = "//ebb:long-file"

// fileLengthProblem returns what is wrong with the length of the file
// name holding src, or "": a file other than a test or a generated one
// (Go's convention, ast.IsGenerated) has at most maxFileLines lines or
// carries longFileMarker with a reason; a marker on a file within the
// limit is stale.
func fileLengthProblem(name string, src []byte) string {
	if strings.HasSuffix(name, "_test.go") {
		return ""
	}
	f, err := parser.ParseFile(token.NewFileSet(), name, src, parser.PackageClauseOnly|parser.ParseComments)
	if err != nil {
		return fmt.Sprintf("%s: %v", name, err)
	}
	if ast.IsGenerated(f) {
		return ""
	}
	lines := bytes.Count(src, []byte("\n"))
	if len(src) > 0 && src[len(src)-1] != '\n' {
		lines++ // the last line has no newline
	}
	marked, reason := false, ""
	for _, cg := range f.Comments {
		if cg.Pos() >= f.Package {
			break
		}
		for _, c := range cg.List {
			if rest, ok := strings.CutPrefix(c.Text, longFileMarker); ok && (rest == "" || rest[0] == ' ') {
				marked, reason = true, strings.TrimSpace(rest)
			}
		}
	}
	switch {
	case marked && reason == "":
		return fmt.Sprintf("%s: %s without a reason: write `%s <why the file stays whole>`", name, longFileMarker, longFileMarker)
	case marked && lines <= maxFileLines:
		return fmt.Sprintf("%s has %d lines, within the limit of %d: remove its %s line", name, lines, maxFileLines, longFileMarker)
	case !marked && lines > maxFileLines:
		return fmt.Sprintf("%s has %d lines, more than %d: split it into files by concern, or, if it must stay whole, "+
			"put `%s <why>` above its package clause, as its first line", name, lines, maxFileLines, longFileMarker)
	}
	return ""
}

func TestLayoutFileLength(t *testing.T) {
	root := moduleRoot(t)
	files, err := gitGoFiles(root)
	if err != nil {
		t.Logf("listing the module's files without git (%v): walking %s", err, root)
		if files, err = walkGoFiles(root); err != nil {
			t.Fatal(err)
		}
	}
	checked := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(name)))
		if errors.Is(err, fs.ErrNotExist) {
			continue // tracked, but deleted in the work tree
		}
		if err != nil {
			t.Fatal(err)
		}
		checked++
		if p := fileLengthProblem(name, src); p != "" {
			t.Error(p)
		}
	}
	// A listing gone wrong must not pass for a module of short files.
	if checked < 10 {
		t.Fatalf("only %d files of the module's code found under %s: %q", checked, root, files)
	}
}

// moduleRoot returns the directory of the go.mod the test's directory is
// in.
func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		up := filepath.Dir(dir)
		if up == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = up
	}
}

// gitGoFiles returns the .go files of the module at root that git
// tracks, or would (not ignored), as slash-separated paths relative to
// root.
func gitGoFiles(root string) ([]string, error) {
	cmd := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git ls-files: %w", err)
	}
	all := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
	nested := map[string]bool{} // the directories of other modules
	for _, name := range all {
		if dir, file := path.Split(name); file == "go.mod" && dir != "" {
			nested[strings.TrimSuffix(dir, "/")] = true
		}
	}
	var files []string
	for _, name := range all {
		if !strings.HasSuffix(name, ".go") || ignoredName(path.Base(name)) {
			continue
		}
		inModule := true
		for dir := path.Dir(name); dir != "."; dir = path.Dir(dir) {
			if ignoredName(path.Base(dir)) || nested[dir] {
				inModule = false
				break
			}
		}
		if inModule {
			files = append(files, name)
		}
	}
	return files, nil
}

// walkGoFiles returns the .go files of the module at root, as
// gitGoFiles does, from the directory tree.
func walkGoFiles(root string) ([]string, error) {
	var files []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == root {
			return nil
		}
		if d.IsDir() {
			if ignoredName(d.Name()) {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil {
				return filepath.SkipDir // another module
			}
			return nil
		}
		if strings.HasSuffix(d.Name(), ".go") && !ignoredName(d.Name()) {
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	return files, err
}

// ignoredName reports whether the go command leaves out a file or
// directory of that name: testdata, vendor, and names beginning with "."
// or "_".
func ignoredName(name string) bool {
	return name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")
}

func TestLayoutFileLengthRule(t *testing.T) {
	lines := func(n int) string { return strings.Repeat("var _ = 0\n", n) }
	const (
		pkg    = "package p\n"
		marker = "//ebb:long-file one state machine\n"
		split  = ": split it into files by concern, or, if it must stay whole, put `//ebb:long-file <why>` above its package clause, as its first line"
	)
	for _, c := range []struct {
		name, src string
		want      string
	}{
		{"a.go", pkg + lines(maxFileLines-1), ""},
		{"a.go", pkg + lines(maxFileLines), "a.go has 601 lines, more than 600" + split},
		// The last line counts without its newline.
		{"a.go", pkg + lines(maxFileLines-2) + "var _ = 0", ""},
		{"a.go", pkg + lines(maxFileLines-1) + "var _ = 0", "a.go has 601 lines, more than 600" + split},
		{"a.go", marker + "\n" + pkg + lines(maxFileLines), ""},
		{"a.go", "//go:build linux\n" + marker + "\n" + pkg + lines(maxFileLines), ""},
		{"a.go", "// Package p does things.\n//\n" + marker + pkg + lines(maxFileLines), ""},
		{"a.go", "//ebb:long-file\n\n" + pkg + lines(maxFileLines), "a.go: //ebb:long-file without a reason: write `//ebb:long-file <why the file stays whole>`"},
		{"a.go", "//ebb:long-file   \n\n" + pkg + lines(maxFileLines), "a.go: //ebb:long-file without a reason: write `//ebb:long-file <why the file stays whole>`"},
		{"a.go", marker + "\n" + pkg, "a.go has 3 lines, within the limit of 600: remove its //ebb:long-file line"},
		// Only the form defined, above the package clause, counts.
		{"a.go", "// ebb:long-file one state machine\n\n" + pkg + lines(maxFileLines), "a.go has 603 lines, more than 600" + split},
		{"a.go", "//ebb:long-files one state machine\n\n" + pkg + lines(maxFileLines), "a.go has 603 lines, more than 600" + split},
		{"a.go", pkg + marker + lines(maxFileLines), "a.go has 602 lines, more than 600" + split},
		// Tests and generated files are exempt.
		{"a_test.go", pkg + lines(maxFileLines), ""},
		{"a.go", "// Code generated by stringer; DO NOT EDIT.\n\n" + pkg + lines(maxFileLines), ""},
		{"a.go", "pakage p\n", "a.go: a.go:1:1: expected 'package', found pakage"},
	} {
		if got := fileLengthProblem(c.name, []byte(c.src)); got != c.want {
			t.Errorf("%s (%.50q…): %q, want %q", c.name, c.src, got, c.want)
		}
	}
}
