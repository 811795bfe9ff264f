package headers

import (
	"bytes"

	"github.com/valyala/fasthttp"
	"golang.org/x/net/http/httpguts"
)

var http11 = []byte("HTTP/1.1")

// The scans below are written per concrete header type so that fasthttp's
// iterator stays on the stack: the request path allocates nothing.

// They also say whether a field (not one fasthttp keeps apart) has more
// than one line: only then can a delete reorder lines (see reordered),
// and the rules get the header through fastRequest or fastResponse.

func scanRequest(h *fasthttp.RequestHeader) (found hopMask, repeats bool) {
	var names [maxNames][]byte
	n := 0
	for k := range h.All() {
		found |= hopBit(k)
		repeats = repeats || repeated(names[:n], k, specialRequest)
		if n < len(names) {
			names[n], n = k, n+1
		} else {
			repeats = true // more lines than looked at: assume so
		}
	}
	return found, repeats
}

func scanResponse(h *fasthttp.ResponseHeader) (found hopMask, repeats bool) {
	var names [maxNames][]byte
	n := 0
	for k := range h.All() {
		found |= hopBit(k)
		repeats = repeats || repeated(names[:n], k, specialResponse)
		if n < len(names) {
			names[n], n = k, n+1
		} else {
			repeats = true // more lines than looked at: assume so
		}
	}
	return found, repeats
}

// repeated reports whether k, not a field fasthttp keeps apart, is among
// names.
func repeated(names [][]byte, k []byte, special [][]byte) bool {
	for _, p := range names {
		if len(p) == len(k) && bytes.EqualFold(p, k) {
			return !isSpecial(k, special)
		}
	}
	return false
}

// ValidFastNames reports whether every field name of h is a token (RFC
// 9110 §5.1): no space, no control, no separator.
func ValidFastNames(h *fasthttp.RequestHeader) bool {
	for k := range h.All() {
		if len(k) == 0 {
			return false
		}
		for _, b := range k {
			if !httpguts.IsTokenRune(rune(b)) {
				return false
			}
		}
	}
	return true
}

// FastRequest applies the request rules to a request header going
// upstream through ebb's HTTP/1 transport, and the framing rules of that
// transport: the request goes out as HTTP/1.1, the client's
// "Connection: close" (about its own connection) is not passed on, and
// fasthttp adds no Content-Type the client did not send. The Host field
// must already hold the request's authority. scratch is reused to build
// values and returned for the next request.
func FastRequest(h *fasthttp.RequestHeader, hop Hop, scratch []byte) []byte {
	found, repeats := scanRequest(h)
	if repeats {
		scratch = request(fastRequest{h}, found, &hop, scratch)
	} else {
		scratch = request(h, found, &hop, scratch) // no delete can reorder
	}
	if !hop.Upgrade {
		h.ResetConnectionClose()
	}
	h.SetNoDefaultContentType(true)
	if !h.IsHTTP11() {
		h.SetProtocolBytes(http11)
	}
	return scratch
}

// FastResponse applies the response rules to an upstream response's
// header going to the client. The upstream's "Connection: close" was
// honoured on the upstream connection; it never closes the client's.
// upgrade keeps Connection and Upgrade, for a 101 being relayed; via, if
// set, is appended to Via ("1.1 ebb": the upstream answered in HTTP/1.1).
func FastResponse(h *fasthttp.ResponseHeader, upgrade bool, via []byte) {
	if found, repeats := scanResponse(h); repeats {
		response(fastResponse{h}, found, upgrade, via)
	} else {
		response(h, found, upgrade, via) // no delete can reorder
	}
	if !upgrade {
		h.ResetConnectionClose()
	}
}

// fastRequest and fastResponse are fasthttp's headers as the rules'
// Fields, with a delete that keeps the order of every other field's
// lines (see reordered), for headers in which a field has several lines.
type (
	fastRequest  struct{ *fasthttp.RequestHeader }
	fastResponse struct{ *fasthttp.ResponseHeader }
)

// maxNames is how many lines' names the scans and a delete look at on the
// stack; a header with more takes the slow way, which is always right.
const maxNames = 48

// DelBytes is written once per header type, like the scans: through a type
// parameter or an interface, fasthttp's iterator escapes and a delete
// allocates (12 times, measured, for a header of five lines).
func (h fastRequest) DelBytes(name []byte) {
	var names [maxNames][]byte
	n, first := 0, -1
	for k := range h.All() {
		if n == len(names) {
			n = -1
			break
		}
		if first < 0 && bytes.EqualFold(k, name) {
			first = n
		}
		names[n], n = k, n+1
	}
	switch {
	case n >= 0 && first < 0:
		// No line of name: nothing to delete.
	case n >= 0 && !reordered(names[first+1:n], name, specialRequest):
		h.RequestHeader.DelBytes(name)
	default:
		h.delInOrder(name)
	}
}

// delInOrder deletes name the slow way: the other lines are copied (on
// the stack while they fit), name and every field copied are deleted, and
// the copies added back in order.
func (h fastRequest) delInOrder(name []byte) {
	var stack [2048]byte
	var offs [maxNames][4]int
	copied, lines := stack[:0], offs[:0]
	for k, v := range h.All() {
		if !bytes.EqualFold(k, name) && !isSpecial(k, specialRequest) {
			copied, lines = keepLine(copied, lines, k, v)
		}
	}
	h.RequestHeader.DelBytes(name)
	for _, o := range lines {
		h.RequestHeader.DelBytes(copied[o[0]:o[1]]) // every line of the field: the later ones find none
	}
	for _, o := range lines {
		h.AddBytesKV(copied[o[0]:o[1]], copied[o[2]:o[3]])
	}
}

func (h fastResponse) DelBytes(name []byte) {
	var names [maxNames][]byte
	n, first := 0, -1
	for k := range h.All() {
		if n == len(names) {
			n = -1
			break
		}
		if first < 0 && bytes.EqualFold(k, name) {
			first = n
		}
		names[n], n = k, n+1
	}
	switch {
	case n >= 0 && first < 0:
		// No line of name: nothing to delete.
	case n >= 0 && !reordered(names[first+1:n], name, specialResponse):
		h.ResponseHeader.DelBytes(name)
	default:
		h.delInOrder(name)
	}
}

// delInOrder deletes name the slow way: the other lines are copied (on
// the stack while they fit), name and every field copied are deleted, and
// the copies added back in order.
func (h fastResponse) delInOrder(name []byte) {
	var stack [2048]byte
	var offs [maxNames][4]int
	copied, lines := stack[:0], offs[:0]
	for k, v := range h.All() {
		if !bytes.EqualFold(k, name) && !isSpecial(k, specialResponse) {
			copied, lines = keepLine(copied, lines, k, v)
		}
	}
	h.ResponseHeader.DelBytes(name)
	for _, o := range lines {
		h.ResponseHeader.DelBytes(copied[o[0]:o[1]]) // every line of the field: the later ones find none
	}
	for _, o := range lines {
		h.AddBytesKV(copied[o[0]:o[1]], copied[o[2]:o[3]])
	}
}

// The fields fasthttp keeps apart from the others (in fields of its own,
// not among the lines a delete moves), by header type.
var (
	specialRequest = [][]byte{[]byte("Host"), []byte("Content-Type"), []byte("Content-Length"),
		[]byte("Transfer-Encoding"), []byte("User-Agent"), []byte("Cookie"), []byte("Trailer")}
	specialResponse = [][]byte{[]byte("Content-Type"), []byte("Content-Length"), []byte("Content-Encoding"),
		[]byte("Transfer-Encoding"), []byte("Server"), []byte("Set-Cookie"), []byte("Trailer"), []byte("Date")}
)

func isSpecial(name []byte, special [][]byte) bool {
	for _, s := range special {
		if bytes.EqualFold(name, s) {
			return true
		}
	}
	return false
}

// reordered reports whether fasthttp's delete of name would reorder a
// field's lines; after are the names of the lines that follow name's
// first. fasthttp deletes a line by moving the last line into its place,
// which puts that line before the ones it followed: when one of those is a
// line of the same field, the field's lines change order ("X-A: 1",
// "X-A: 2" go on as "X-A: 2", "X-A: 1"), and that order is significant
// (RFC 9110 §5.3). It can happen only when a field (not one fasthttp
// keeps apart) has two lines after name's first.
func reordered(after [][]byte, name []byte, special [][]byte) bool {
	for a, ka := range after {
		if bytes.EqualFold(ka, name) || isSpecial(ka, special) {
			continue
		}
		for _, kb := range after[a+1:] {
			if bytes.EqualFold(ka, kb) {
				return true
			}
		}
	}
	return false
}

// keepLine appends a copy of the line k: v to buf, and its name's and
// value's offsets in buf to lines.
func keepLine(buf []byte, lines [][4]int, k, v []byte) ([]byte, [][4]int) {
	ks := len(buf)
	buf = append(buf, k...)
	vs := len(buf)
	buf = append(buf, v...)
	return buf, append(lines, [4]int{ks, vs, vs, len(buf)})
}

// FastCarrier is a fasthttp request header as a trace context carrier
// (tracing.Carrier): the propagator reads traceparent and tracestate from
// it, and writes them.
type FastCarrier struct{ H *fasthttp.RequestHeader }

// Get returns the field name's value.
func (c FastCarrier) Get(name string) string { return string(c.H.Peek(name)) }

// Set makes value the field's one line.
func (c FastCarrier) Set(name, value string) { c.H.Set(name, value) }

// Keys is not needed by the trace context propagator.
func (c FastCarrier) Keys() []string { return nil }
