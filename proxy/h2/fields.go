// The checks of a request's pseudo-header fields (RFC 9113 §8.3.1); those
// of regular fields, which both sides of HTTP/2 make, are package wire's.

package h2

import (
	"bytes"

	"golang.org/x/net/http/httpguts"
)

// setPseudo checks the request's pseudo-header fields (RFC 9113 §8.3.1)
// and keeps them; it returns why they are malformed, or "".
func (st *Stream) setPseudo() string {
	st.method = st.pseudo.Get(":method")
	st.scheme = st.pseudo.Get(":scheme")
	st.path = st.pseudo.Get(":path")
	st.authority = st.pseudo.Get(":authority")
	if st.authority == nil {
		st.authority = st.fields.Get("host")
	}
	if len(st.method) == 0 {
		return "no :method"
	}
	for _, b := range st.method {
		if !httpguts.IsTokenRune(rune(b)) {
			return "invalid :method"
		}
	}
	if string(st.method) == "CONNECT" {
		if st.scheme != nil || st.path != nil || len(st.authority) == 0 {
			return "CONNECT with :scheme or :path, or without :authority"
		}
		return ""
	}
	if len(st.scheme) == 0 {
		return "no :scheme"
	}
	if !validScheme(st.scheme) {
		return "invalid :scheme"
	}
	if len(st.path) == 0 {
		return "no :path"
	}
	if st.path[0] != '/' && !(string(st.path) == "*" && string(st.method) == "OPTIONS") {
		return "invalid :path"
	}
	for _, b := range st.path {
		if b <= ' ' || b == 0x7f {
			return "invalid :path"
		}
	}
	for _, b := range st.authority {
		if b <= ' ' || b == 0x7f || b == '/' || b == '?' || b == '#' || b == '@' {
			return "invalid :authority"
		}
	}
	// RFC 9113 §8.3.1: a host field that names another target than
	// :authority makes the request malformed (a server SHOULD refuse it):
	// ebb routes on :authority, and an upstream that reads host would
	// see another request. Without :authority the first host is the
	// authority, and a second one must agree with it.
	for i := range st.fields.Len() {
		if name, value := st.fields.At(i); string(name) == "host" && !bytes.EqualFold(value, st.authority) {
			return "host other than :authority"
		}
	}
	return ""
}

// validScheme reports whether s is a URI scheme (RFC 3986 §3.1):
// ALPHA *( ALPHA / DIGIT / "+" / "-" / "." ).
func validScheme(s []byte) bool {
	for i, b := range s {
		switch {
		case 'a' <= b && b <= 'z', 'A' <= b && b <= 'Z':
		case i > 0 && ('0' <= b && b <= '9' || b == '+' || b == '-' || b == '.'):
		default:
			return false
		}
	}
	return len(s) > 0
}
