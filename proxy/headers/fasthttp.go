package headers

import (
	"github.com/valyala/fasthttp"
	"golang.org/x/net/http/httpguts"
)

var http11 = []byte("HTTP/1.1")

// The scans below are written per concrete header type so that fasthttp's
// iterator stays on the stack: the request path allocates nothing.

func scanRequest(h *fasthttp.RequestHeader) (found hopMask) {
	for k := range h.All() {
		found |= hopBit(k)
	}
	return found
}

func scanResponse(h *fasthttp.ResponseHeader) (found hopMask) {
	for k := range h.All() {
		found |= hopBit(k)
	}
	return found
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
	scratch = request(h, scanRequest(h), &hop, scratch)
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
	response(h, scanResponse(h), upgrade, via)
	if !upgrade {
		h.ResetConnectionClose()
	}
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
