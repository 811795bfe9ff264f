package headers

import "math/rand/v2"

// RequestIDPolicy says what the request rules do with X-Request-Id.
type RequestIDPolicy uint8

// The policies (listeners[].headers.request_id).
const (
	// RequestIDOff leaves X-Request-Id as the client sent it, or absent.
	RequestIDOff RequestIDPolicy = iota
	// RequestIDTrusted keeps the id a trusted proxy sent (see
	// Hop.Trust); every other request gets a new one.
	RequestIDTrusted
	// RequestIDAny keeps the id any client sent; a request without one
	// gets a new one.
	RequestIDAny
)

// XRequestID is the field that carries a request's id.
const XRequestID = "X-Request-Id"

var hdrXRequestID = []byte(XRequestID)

// maxRequestID bounds the length of an id ebb keeps.
const maxRequestID = 128

// validRequestID reports whether an id a client sent may be kept: 1 to
// 128 visible ASCII characters, without '"' or '\', which keeps it one
// token in every access log format.
func validRequestID(id []byte) bool {
	if len(id) == 0 || len(id) > maxRequestID {
		return false
	}
	for _, c := range id {
		if c <= ' ' || c >= 0x7f || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// setRequestID applies the request id policy: the client's one line of
// X-Request-Id stays when the policy keeps it and it is valid; otherwise
// the field is replaced by a new id. scratch is reused and returned.
func setRequestID(h Fields, hop *Hop, scratch []byte) []byte {
	if hop.RequestID == RequestIDOff {
		return scratch
	}
	lines := h.PeekAll(XRequestID)
	if len(lines) == 1 && validRequestID(lines[0]) && (hop.RequestID == RequestIDAny || hop.Trust) {
		return scratch
	}
	if len(lines) > 1 {
		h.DelBytes(hdrXRequestID)
	}
	scratch = AppendNewRequestID(scratch[:0])
	h.SetCanonical(hdrXRequestID, scratch)
	return scratch
}

// AppendNewRequestID appends a new request id to b: a random (version 4)
// UUID, 36 characters.
func AppendNewRequestID(b []byte) []byte {
	hi, lo := rand.Uint64(), rand.Uint64()
	hi = hi&^(0xf<<12) | 0x4<<12 // version 4
	lo = lo&^(0x3<<62) | 0x2<<62 // variant 10
	var u [16]byte
	for i := range 8 {
		u[i], u[8+i] = byte(hi>>(56-8*i)), byte(lo>>(56-8*i))
	}
	for i, c := range u {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			b = append(b, '-')
		}
		b = append(b, hexDigits[c>>4], hexDigits[c&0xf])
	}
	return b
}

const hexDigits = "0123456789abcdef"
