// The checks of regular fields (RFC 9113 §8.2): what makes a message
// malformed, on either side.

package wire

import "golang.org/x/net/http/httpguts"

// CheckField returns why a regular field makes a request malformed (RFC
// 9113 §8.2), or "": ValidField's reasons, whitespace around the value,
// a connection-specific field, a te other than trailers.
func CheckField(name, value string) string {
	if why := ValidField(name, value); why != "" {
		return why
	}
	// RFC 9113 §8.2.1: a value must not start or end with whitespace
	// (HTTP/1.1's parsers would trim it, so two hops would disagree).
	if n := len(value); n > 0 && (IsSpace(value[0]) || IsSpace(value[n-1])) {
		return "whitespace around the value of " + name
	}
	if ConnectionSpecific(name) {
		return "connection-specific field " + name
	}
	if name == "te" && value != "trailers" {
		return "te other than trailers"
	}
	return ""
}

// ValidField returns why a field cannot be relayed at all, or "": a name
// in upper case or that is no token, a value with characters no field
// may hold. The client side holds a response to this much only, as
// net/http's did: servers in use send connection-specific fields (Go's
// sends Keep-Alive when its handler sets it), which the header rules
// drop, and values with whitespace around them, which HTTP/1.1 trims.
func ValidField(name, value string) string {
	for i := 0; i < len(name); i++ {
		if c := name[i]; 'A' <= c && c <= 'Z' {
			return "upper-case field name"
		}
	}
	if !httpguts.ValidHeaderFieldName(name) {
		return "invalid field name"
	}
	if !httpguts.ValidHeaderFieldValue(value) {
		return "invalid field value in " + name
	}
	return ""
}

// IsSpace reports whether b is whitespace a field value may hold inside
// it but not at its ends (SP, HTAB: RFC 9110 §5.5).
func IsSpace(b byte) bool { return b == ' ' || b == '\t' }

// ParseLength parses a content-length value: decimal digits only, at
// most 18 of them.
func ParseLength(s string) (int64, bool) {
	if s == "" || len(s) > 18 {
		return 0, false
	}
	var n int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// EqualFoldLower reports whether s equals t, a lower-case ASCII string,
// ignoring the case of s.
func EqualFoldLower(s, t string) bool {
	if len(s) != len(t) {
		return false
	}
	for i := 0; i < len(s); i++ {
		a, b := s[i], t[i]
		if 'A' <= a && a <= 'Z' {
			a += 'a' - 'A'
		}
		if a != b {
			return false
		}
	}
	return true
}
