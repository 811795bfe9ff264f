// Package docs holds the guide (docs/README.md is its index) and the test
// that keeps its links whole: every relative link of the README, the
// guide, bench/README.md and the READMEs under deploy/ names a file that
// exists, and every #anchor a heading of the page it points into.
package docs

import (
	"bufio"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// pages returns the Markdown files whose links are checked, relative to
// the repository's root.
func pages(t *testing.T) []string {
	t.Helper()
	list := []string{"README.md", "bench/README.md"}
	guide, err := filepath.Glob("../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range guide {
		list = append(list, strings.TrimPrefix(g, "../"))
	}
	err = filepath.WalkDir("../deploy", func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasPrefix(d.Name(), "README") && strings.HasSuffix(d.Name(), ".md") {
			list = append(list, strings.TrimPrefix(path, "../"))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return list
}

var (
	// inline is [text](target) or ![alt](target), with an optional title.
	inline = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	// definition is a reference-style link's target: [label]: target.
	definition = regexp.MustCompile(`^\s{0,3}\[[^\]]+\]:\s+(\S+)`)
	codeSpan   = regexp.MustCompile("`[^`]*`")
	external   = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
)

// link is a link target found on a line of a page.
type link struct {
	line   int
	target string
}

// parsed is what the test needs of a page: its links and its anchors.
type parsed struct {
	links   []link
	anchors map[string]bool
}

// parse reads a Markdown page: the links outside code, and the anchors
// its headings get, as GitHub makes them.
func parse(path string) (*parsed, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	p := &parsed{anchors: map[string]bool{}}
	seen := map[string]int{}
	fence := ""
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
			continue
		}
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			fence = trimmed[:3]
			continue
		}
		if strings.HasPrefix(line, "\t") {
			continue // an indented code block, as the generated reference writes them
		}
		if h, ok := heading(line); ok {
			slug := slugify(h)
			if k := seen[slug]; k > 0 {
				p.anchors[fmt.Sprintf("%s-%d", slug, k)] = true
			} else {
				p.anchors[slug] = true
			}
			seen[slug]++
		}
		text := codeSpan.ReplaceAllString(line, "")
		for _, m := range inline.FindAllStringSubmatch(text, -1) {
			p.links = append(p.links, link{n, m[1]})
		}
		if m := definition.FindStringSubmatch(text); m != nil {
			p.links = append(p.links, link{n, m[1]})
		}
	}
	return p, sc.Err()
}

// heading returns the text of an ATX heading line.
func heading(line string) (string, bool) {
	level := len(line) - len(strings.TrimLeft(line, "#"))
	if level == 0 || level > 6 || len(line) > level && line[level] != ' ' {
		return "", false
	}
	return strings.TrimSpace(strings.TrimRight(strings.TrimSpace(line[level:]), "#")), true
}

// mdLink is a link in a heading, which GitHub's anchor takes the text of.
var mdLink = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)

// slugify makes a heading's anchor as GitHub does: the text without its
// markup, lower-cased, with every character but letters, digits, '-' and
// '_' dropped and spaces made hyphens.
func slugify(h string) string {
	h = mdLink.ReplaceAllString(h, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

func TestLinks(t *testing.T) {
	cache := map[string]*parsed{}
	load := func(path string) (*parsed, error) {
		if p, ok := cache[path]; ok {
			return p, nil
		}
		p, err := parse(path)
		cache[path] = p
		return p, err
	}
	for _, page := range pages(t) {
		src := filepath.Join("..", page)
		p, err := load(src)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range p.links {
			if external.MatchString(l.target) {
				continue
			}
			file, anchor, _ := strings.Cut(l.target, "#")
			dest := src
			if file != "" {
				dest = filepath.Join(filepath.Dir(src), file)
				if _, err := os.Stat(dest); err != nil {
					t.Errorf("%s:%d: link to %s: no such file", page, l.line, l.target)
					continue
				}
			}
			if anchor == "" || !strings.HasSuffix(dest, ".md") {
				continue
			}
			d, err := load(dest)
			if err != nil {
				t.Fatal(err)
			}
			if !d.anchors[anchor] {
				t.Errorf("%s:%d: link to %s: no heading of %s has the anchor #%s", page, l.line, l.target, strings.TrimPrefix(dest, "../"), anchor)
			}
		}
	}
}

// The anchors are GitHub's: the test would pass links GitHub breaks if
// they were not.
func TestSlugify(t *testing.T) {
	for _, c := range []struct{ heading, want string }{
		{"The drain", "the-drain"},
		{"Restart without refusing a connection", "restart-without-refusing-a-connection"},
		{"`drain.delay` and `drain.spread`", "draindelay-and-drainspread"},
		{"What is left of the tail: the order the network poll hands back", "what-is-left-of-the-tail-the-order-the-network-poll-hands-back"},
		{"Slowloris: cutting a thousand connections at once", "slowloris-cutting-a-thousand-connections-at-once"},
		{"See [DRAIN.md](DRAIN.md) too", "see-drainmd-too"},
		{"HTTP/2 conformance", "http2-conformance"},
		{"What checking an upstream's answers costs", "what-checking-an-upstreams-answers-costs"},
	} {
		if got := slugify(c.heading); got != c.want {
			t.Errorf("slugify(%q) = %q, want %q", c.heading, got, c.want)
		}
	}
}
