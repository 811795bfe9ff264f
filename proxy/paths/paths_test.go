package paths

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func TestNormalize(t *testing.T) {
	var (
		off       = Options{}
		norm      = Options{Normalize: true}
		merge     = Options{MergeSlashes: true}
		all       = Options{Normalize: true, MergeSlashes: true, EscapedSlashes: DecodeEscaped}
		keep      = Options{Normalize: true, EscapedSlashes: KeepEscaped}
		reject    = Options{EscapedSlashes: RejectEscaped}
		decode    = Options{EscapedSlashes: DecodeEscaped}
		normMerge = Options{Normalize: true, MergeSlashes: true}
	)
	for _, tc := range []struct {
		name string
		o    Options
		in   string
		want string
		err  error
	}{
		// The bypass: a route on /public must not take what the origin
		// reads as /admin.
		{"off leaves dot segments", off, "/public/../admin", "/public/../admin", nil},
		{"dot-dot", norm, "/public/../admin", "/admin", nil},
		{"encoded dot-dot", norm, "/public/%2e%2e/admin", "/admin", nil},
		{"encoded dot-dot, upper case", norm, "/public/%2E%2e/admin", "/admin", nil},
		{"half-encoded dot-dot", norm, "/public/.%2E/admin", "/admin", nil},
		{"dot", norm, "/public/./admin", "/public/admin", nil},
		{"backslashes", norm, `/public\..\admin`, "/admin", nil},
		{"backslashes, off", off, `/public\..\admin`, `/public\..\admin`, nil},
		{"above the root", norm, "/a/b/../../../../c", "/c", nil},
		{"dot-dot alone", norm, "/..", "/", nil},
		{"dot-dots alone", norm, "/../..", "/", nil},
		{"dot alone", norm, "/.", "/", nil},
		{"dot-dot at the start", norm, "/../a", "/a", nil},
		{"root", norm, "/", "/", nil},

		// Trailing dots: a dot segment at the end leaves its slash;
		// other names with dots are names.
		{"trailing dot", norm, "/a/b/.", "/a/b/", nil},
		{"trailing dot-dot", norm, "/a/b/..", "/a/", nil},
		{"trailing dot-dot-slash", norm, "/a/b/../", "/a/", nil},
		{"three dots", norm, "/a/...", "/a/...", nil},
		{"dot name", norm, "/a/.b/c..", "/a/.b/c..", nil},
		{"dots in a name", norm, "/a/..b/b../.../", "/a/..b/b../.../", nil},

		// Slashes: empty segments are segments to the dot-segment removal
		// (RFC 3986 §5.2.4), and merged only by MergeSlashes, after it.
		{"double slash, off", off, "/a//b", "/a//b", nil},
		{"double slash, normalize only", norm, "/a//b", "/a//b", nil},
		{"double slash, merged", merge, "/a//b", "/a/b", nil},
		{"leading and trailing runs", merge, "///a///", "/a/", nil},
		{"dot-dot over an empty segment", norm, "/a//../b", "/a/b", nil},
		{"dot-dot over an empty segment, merged", normMerge, "/a//../b", "/a/b", nil},
		{"merged after the dots", normMerge, "//a/../b", "/b", nil},
		{"trailing dot-dot after a slash run", norm, "/a//..", "/a/", nil},

		// Percent-encodings: unreserved ones decoded, the others' hex
		// digits in upper case, none decoded twice.
		{"unreserved decoded", norm, "/%41%7a%30%2D%2e%5F%7E", "/Az0-._~", nil},
		{"reserved kept, upper-cased", norm, "/%c0%af%3f%23", "/%C0%AF%3F%23", nil},
		{"encoded percent", norm, "/%252e%252E", "/%252e%252E", nil},
		{"encoded percent before 2F", all, "/a%252Fb", "/a%252Fb", nil},
		{"invalid encoding", norm, "/a%zz", "", ErrBadEncoding},
		{"truncated encoding", norm, "/a%4", "", ErrBadEncoding},
		{"lone percent", norm, "/a%", "", ErrBadEncoding},
		{"half-hex encoding", norm, "/a%4g/b", "", ErrBadEncoding},
		{"invalid encoding, off", off, "/a%zz", "/a%zz", nil},
		{"invalid encoding, merge only", merge, "/a%zz//", "/a%zz/", nil},

		// Encoded slashes under each action.
		{"keep", Options{}, "/a/%2F/b", "/a/%2F/b", nil},
		{"keep, normalized", keep, "/a/%2f/b", "/a/%2F/b", nil},
		{"keep: no separator to the dots", keep, "/a/%2F/../b", "/a/b", nil},
		{"keep: %2F..%2F is one segment", keep, "/public/%2F..%2Fadmin", "/public/%2F..%2Fadmin", nil},
		{"reject", reject, "/a/%2F/b", "", ErrEscapedSlash},
		{"reject, lower case", reject, "/a/%2f/b", "", ErrEscapedSlash},
		{"reject backslash", reject, "/a%5cb", "", ErrEscapedSlash},
		{"reject, none", reject, "/a/b%2E", "/a/b%2E", nil},
		{"decode", decode, "/a/%2F/b", "/a///b", nil},
		{"decode, lower case", decode, "/a%2fb", "/a/b", nil},
		{"decode backslash", decode, "/a%5Cb%5c", `/a\b\`, nil},
		{"decode, merged", Options{EscapedSlashes: DecodeEscaped, MergeSlashes: true}, "/a/%2F/b", "/a/b", nil},
		{"decode then dot-dot", all, "/public%2F..%2Fadmin", "/admin", nil},
		{"decoded backslashes then dot-dot", all, "/public%5C..%5Cadmin", "/admin", nil},
		{"decode: a percent before", decode, "/%%2F", "/%/", nil},
		{"decode: a percent before, normalized", all, "/%%2F", "", ErrBadEncoding},
		{"INTEGRITY.md's example", all, "/public/%2e%2e//admin%2Fx?q=../", "/admin/x?q=../", nil},

		// What is not a path, and the query, are left alone.
		{"empty", all, "", "", nil},
		{"asterisk", all, "*", "*", nil},
		{"no leading slash", all, "a/../b", "a/../b", nil},
		{"query untouched", all, "/a/./b/../c?x=../../y&z=%2F%zz//", "/a/c?x=../../y&z=%2F%zz//", nil},
		{"query after a dot-dot", all, "/a/..?..", "/?..", nil},
		{"query with an escaped slash", reject, "/a?b=%2F", "/a?b=%2F", nil},
		{"query with dots, off", off, "/a/../b?../c", "/a/../b?../c", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dst := []byte("prefix")
			out, changed, err := Normalize(dst, tc.in, tc.o)
			if !errors.Is(err, tc.err) {
				t.Fatalf("Normalize(%q) error = %v, want %v", tc.in, err, tc.err)
			}
			if !bytes.HasPrefix(out, []byte("prefix")) {
				t.Fatalf("Normalize(%q) = %q: dst's bytes not kept", tc.in, out)
			}
			got := string(out[len("prefix"):])
			if got != tc.want {
				t.Errorf("Normalize(%q) = %q, want %q", tc.in, got, tc.want)
			}
			if err == nil && changed != (got != tc.in) {
				t.Errorf("Normalize(%q) changed = %v, want %v", tc.in, changed, got != tc.in)
			}
			// The same with the path in bytes.
			outB, _, errB := Normalize(nil, []byte(tc.in), tc.o)
			if string(outB) != tc.want || !errors.Is(errB, tc.err) {
				t.Errorf("Normalize([]byte(%q)) = %q, %v", tc.in, outB, errB)
			}
		})
	}
}

func TestOptionsOn(t *testing.T) {
	if (Options{}).On() {
		t.Error("the zero Options are on")
	}
	for _, o := range []Options{{Normalize: true}, {MergeSlashes: true}, {EscapedSlashes: RejectEscaped}, {EscapedSlashes: DecodeEscaped}} {
		if !o.On() {
			t.Errorf("%+v is off", o)
		}
	}
}

// TestNormalizeAllocs: with room in dst, normalizing allocates nothing,
// whether the path changes or not.
func TestNormalizeAllocs(t *testing.T) {
	o := Options{Normalize: true, MergeSlashes: true, EscapedSlashes: DecodeEscaped}
	dst := make([]byte, 0, 64)
	for _, path := range []string{"/index.html?q=1", "/public/%2e%2e//admin%2Fx/./y?q=../"} {
		in := []byte(path)
		if allocs := testing.AllocsPerRun(100, func() {
			dst, _, _ = Normalize(dst[:0], in, o)
		}); allocs != 0 {
			t.Errorf("%q: %v allocations, want 0", path, allocs)
		}
	}
}

func BenchmarkNormalize(b *testing.B) {
	o := Options{Normalize: true, MergeSlashes: true, EscapedSlashes: DecodeEscaped}
	for _, bc := range []struct{ name, path string }{
		{"unchanged", "/index.html?q=1"},
		{"changed", "/api/v1/users/%7Ealice/../bob//photos/./1.jpg?size=large"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			in := []byte(bc.path)
			dst := make([]byte, 0, 128)
			b.ReportAllocs()
			for b.Loop() {
				dst, _, _ = Normalize(dst[:0], in, o)
			}
		})
	}
}

// FuzzNormalize checks Normalize's promises on any path and options: it
// never panics; its result is stable (normalizing it again changes
// nothing); a path starting with '/' stays so; the query is untouched;
// with Normalize on, the path has no dot segment, no backslash and only
// valid, upper-case percent-encodings of reserved characters; with
// MergeSlashes on, no run of slashes; with RejectEscaped, no %2F or %5C.
func FuzzNormalize(f *testing.F) {
	for _, seed := range []string{
		"/public/../admin", "/public/%2e%2e/admin", "/a//b", "/a/%2F/b", "/a%5C..%5Cb",
		"/a%zz", "/a/b/..", "/..", "", "*", "/a?x=../%2F", "/%%2F", "/%252F",
	} {
		f.Add(seed, true, true, uint8(DecodeEscaped))
	}
	f.Fuzz(func(t *testing.T, path string, normalize, merge bool, escaped uint8) {
		o := Options{Normalize: normalize, MergeSlashes: merge, EscapedSlashes: EscapedSlashes(escaped % 3)}
		out, changed, err := Normalize(nil, path, o)
		if err != nil {
			if len(out) != 0 {
				t.Fatalf("Normalize(%q, %+v) = %q with error %v", path, o, out, err)
			}
			return
		}
		got := string(out)
		if changed != (got != path) {
			t.Fatalf("Normalize(%q, %+v) = %q, changed %v", path, o, got, changed)
		}
		if strings.HasPrefix(path, "/") != strings.HasPrefix(got, "/") {
			t.Fatalf("Normalize(%q, %+v) = %q: the leading slash", path, o, got)
		}
		again, changedAgain, err := Normalize(nil, out, o)
		if err != nil || changedAgain || string(again) != got {
			t.Fatalf("Normalize(%q, %+v) = %q, then %q (changed %v, %v): not stable", path, o, got, again, changedAgain, err)
		}
		p, q, hasQ := strings.Cut(got, "?")
		_, inQ, inHasQ := strings.Cut(path, "?")
		if hasQ != inHasQ || q != inQ {
			t.Fatalf("Normalize(%q, %+v) = %q: the query changed", path, o, got)
		}
		if !strings.HasPrefix(path, "/") {
			if got != path {
				t.Fatalf("Normalize(%q, %+v) = %q: not a path, changed", path, o, got)
			}
			return
		}
		if normalize {
			for seg := range strings.SplitSeq(p, "/") {
				if seg == "." || seg == ".." {
					t.Fatalf("Normalize(%q, %+v) = %q: a dot segment", path, o, got)
				}
			}
			if strings.Contains(p, `\`) {
				t.Fatalf("Normalize(%q, %+v) = %q: a backslash", path, o, got)
			}
			for i := 0; i < len(p); i++ {
				if p[i] != '%' {
					continue
				}
				if i+2 >= len(p) {
					t.Fatalf("Normalize(%q, %+v) = %q: a truncated percent-encoding", path, o, got)
				}
				v, ok1 := unhex(p[i+1])
				l, ok2 := unhex(p[i+2])
				if !ok1 || !ok2 || unreserved(v<<4|l) || p[i+1] != upper(p[i+1]) || p[i+2] != upper(p[i+2]) {
					t.Fatalf("Normalize(%q, %+v) = %q: percent-encoding %q", path, o, got, p[i:i+3])
				}
				i += 2
			}
		}
		if merge && strings.Contains(p, "//") {
			t.Fatalf("Normalize(%q, %+v) = %q: a run of slashes", path, o, got)
		}
		if o.EscapedSlashes == RejectEscaped {
			if up := strings.ToUpper(p); strings.Contains(up, "%2F") || strings.Contains(up, "%5C") {
				t.Fatalf("Normalize(%q, %+v) = %q: an escaped slash kept", path, o, got)
			}
		}
	})
}
