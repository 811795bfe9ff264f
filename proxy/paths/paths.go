// Package paths normalizes a request's path before ebb routes it, as a
// listener's paths settings ask: what becomes of an encoded slash, the
// percent-encodings made canonical and the dot segments removed (RFC 3986
// §6.2.2), runs of slashes merged. The routes then match, and the origin
// receives, one and the same path: a route on /admin is not skipped by
// /public/../admin, which the origin would read as /admin.
//
// The steps and their order are Envoy's (the HTTP connection manager's
// path_with_escaped_slashes_action, normalize_path and merge_slashes).
// The package imports nothing of ebb's.
package paths

import "errors"

// EscapedSlashes is what becomes of an encoded slash (%2F) or backslash
// (%5C), with either case of hex digit, in a path.
type EscapedSlashes uint8

const (
	// KeepEscaped leaves them as they are: no separators to the routes,
	// nor to the removal of dot segments.
	KeepEscaped EscapedSlashes = iota
	// RejectEscaped refuses a path that holds one (ErrEscapedSlash).
	RejectEscaped
	// DecodeEscaped decodes them: %2F to '/', %5C to '\' (which
	// Options.Normalize then reads as '/'), as Envoy's
	// UNESCAPE_AND_FORWARD does.
	DecodeEscaped
)

// Options are one listener's settings. The zero value changes nothing.
type Options struct {
	// Normalize decodes the percent-encoded unreserved characters
	// (ALPHA, DIGIT, "-", ".", "_", "~": %2e%2e is ".."), upper-cases the
	// hex digits of the other percent-encodings (RFC 3986 §6.2.2.1-2),
	// reads a backslash as a slash, and removes the dot segments (RFC
	// 3986 §5.2.4; ".." never climbs above the root). An invalid
	// percent-encoding ("%zz", a "%4" at the end) is ErrBadEncoding.
	//
	// The backslash is Envoy's (Chromium's URL canonicalizer) and
	// browsers' (the WHATWG URL standard) reading: servers on Windows,
	// and some frameworks elsewhere, take it for a separator, so that
	// /public\..\admin would be /admin to them.
	Normalize bool
	// MergeSlashes makes one slash of each run of them ("/a//b" is
	// "/a/b"), after Normalize.
	MergeSlashes bool
	// EscapedSlashes is what becomes of %2F and %5C, before Normalize.
	EscapedSlashes EscapedSlashes
}

// On reports whether o changes anything; when it does not, there is no
// need to call Normalize.
func (o Options) On() bool {
	return o.Normalize || o.MergeSlashes || o.EscapedSlashes != KeepEscaped
}

// The errors of Normalize: either is a request to refuse (400).
var (
	ErrEscapedSlash = errors.New("paths: an encoded slash or backslash (%2F, %5C) in the path")
	ErrBadEncoding  = errors.New("paths: an invalid percent-encoding in the path")
)

// Normalize appends to dst path normalized as o says, in Envoy's order:
// the escaped slashes, Normalize, MergeSlashes. Only the path is touched:
// from its first '?' on (a query), path is copied as it is, and so is a
// path that does not start with '/' (the asterisk form "*", or none).
// changed reports whether what it appended differs from path; on error,
// dst is returned as it was. It allocates nothing when dst has room for
// path (the result is never longer).
func Normalize[S string | []byte](dst []byte, path S, o Options) (out []byte, changed bool, err error) {
	start := len(dst)
	dst = append(dst, path...)
	end := len(dst)
	for i := start; i < end; i++ {
		if dst[i] == '?' {
			end = i
			break
		}
	}
	if end == start || dst[start] != '/' {
		return dst, false, nil
	}
	// Each step rewrites the path in place: none makes it longer.
	p := dst[start:end]
	if o.EscapedSlashes != KeepEscaped {
		n, err := escapedSlashes(p, o.EscapedSlashes == RejectEscaped)
		if err != nil {
			return dst[:start], false, err
		}
		p = p[:n]
	}
	if o.Normalize {
		n, err := canonical(p)
		if err != nil {
			return dst[:start], false, err
		}
		p = p[:removeDotSegments(p[:n])]
	}
	if o.MergeSlashes {
		p = p[:mergeSlashes(p)]
	}
	// The query, if any, moves up behind the shorter path.
	n := start + len(p)
	n += copy(dst[n:], dst[end:])
	dst = dst[:n]
	return dst, !same(dst[start:], path), nil
}

// escapedSlashes decodes, in place, each %2F into '/' and each %5C into
// '\' (any case), and returns the length of the result; with reject, it
// returns ErrEscapedSlash at the first instead. As Envoy's
// PathUtil::unescapeSlashes, it looks for those three bytes anywhere:
// "%%2F" is "%/", and "%252F" (an encoded "%" before "2F") has none.
func escapedSlashes(p []byte, reject bool) (int, error) {
	w := 0
	for r := 0; r < len(p); r++ {
		c := p[r]
		if c == '%' && r+2 < len(p) {
			switch hi, lo := p[r+1], p[r+2]|0x20; {
			case hi == '2' && lo == 'f':
				c = '/'
			case hi == '5' && lo == 'c':
				c = '\\'
			}
			if c != '%' {
				if reject {
					return 0, ErrEscapedSlash
				}
				r += 2
			}
		}
		p[w] = c
		w++
	}
	return w, nil
}

// canonical rewrites p in place with its percent-encoded unreserved
// characters decoded, the hex digits of the other percent-encodings in
// upper case and its backslashes as slashes, and returns the length of
// the result, or ErrBadEncoding.
func canonical(p []byte) (int, error) {
	w := 0
	for r := 0; r < len(p); r++ {
		c := p[r]
		switch c {
		case '%':
			if r+2 >= len(p) {
				return 0, ErrBadEncoding
			}
			h, l := p[r+1], p[r+2]
			hi, ok1 := unhex(h)
			lo, ok2 := unhex(l)
			if !ok1 || !ok2 {
				return 0, ErrBadEncoding
			}
			r += 2
			if v := hi<<4 | lo; unreserved(v) {
				p[w] = v
				w++
				continue
			}
			p[w], p[w+1], p[w+2] = '%', upper(h), upper(l)
			w += 3
			continue
		case '\\':
			c = '/'
		}
		p[w] = c
		w++
	}
	return w, nil
}

// removeDotSegments removes, in place, the "." and ".." segments of p,
// which starts with '/', as RFC 3986 §5.2.4 does, and returns the length
// of the result, which starts with '/' too. A dot segment at the end
// leaves the slash before it ("/a/b/.." is "/a/"); ".." at the root is
// dropped ("/../a" is "/a"); empty segments are segments ("/a//.." is
// "/a/").
func removeDotSegments(p []byte) int {
	w := 0 // p[:w] is the output: "" or "/seg" segments
	for r := 0; r < len(p); {
		// p[r] is the '/' before a segment.
		next := r + 1
		for next < len(p) && p[next] != '/' {
			next++
		}
		seg, last := p[r+1:next], next == len(p)
		switch {
		case len(seg) == 1 && seg[0] == '.':
			if last {
				p[w] = '/'
				w++
			}
		case len(seg) == 2 && seg[0] == '.' && seg[1] == '.':
			for w > 0 {
				w--
				if p[w] == '/' {
					break
				}
			}
			if last {
				p[w] = '/'
				w++
			}
		default:
			// The output never passes the input: w <= r.
			p[w] = '/'
			w += 1 + copy(p[w+1:], seg)
		}
		r = next
	}
	if w == 0 {
		p[0] = '/'
		w = 1
	}
	return w
}

// mergeSlashes makes one slash of each run of them in p, in place, and
// returns the length of the result.
func mergeSlashes(p []byte) int {
	w := 0
	for _, c := range p {
		if c == '/' && w > 0 && p[w-1] == '/' {
			continue
		}
		p[w] = c
		w++
	}
	return w
}

// same reports whether b and s hold the same bytes.
func same[S string | []byte](b []byte, s S) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range b {
		if b[i] != s[i] {
			return false
		}
	}
	return true
}

// unreserved reports whether c is an unreserved character (RFC 3986
// §2.3), which a percent-encoding needlessly hides.
func unreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '-' || c == '.' || c == '_' || c == '~'
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

func upper(c byte) byte {
	if 'a' <= c && c <= 'f' {
		return c - 'a' + 'A'
	}
	return c
}
