package headers

import (
	"github.com/ebb-proxy/ebb/proxy/h2/wire"
)

// Wire adapts an HTTP/2 field list (names in lower case, as HTTP/2 has
// them) to Fields: the request of an HTTP/2 client going to an HTTP/2
// upstream, and the response coming back, go from one HPACK block to the
// other through it, without net/http's types.
type Wire struct{ L *wire.FieldList }

// PeekAll returns the values of name.
func (h Wire) PeekAll(name string) [][]byte {
	var out [][]byte
	for i := range h.L.Len() {
		if k, v := h.L.At(i); wire.EqualFold(k, name) {
			out = append(out, v)
		}
	}
	return out
}

// DelBytes removes name, in any case.
func (h Wire) DelBytes(name []byte) { h.L.Del(string(name)) }

// SetCanonical makes value the one line of name.
func (h Wire) SetCanonical(name, value []byte) { h.L.Set(string(name), string(value)) }

func scanWire(l *wire.FieldList) (found hopMask) {
	for i := range l.Len() {
		k, _ := l.At(i)
		found |= hopBit(k)
	}
	return found
}

// WireRequest applies the request rules to the fields of a request going
// to an HTTP/2 upstream. The pseudo-header fields are not in l; the
// framing fields (content-length, transfer-encoding) and host are the
// caller's to leave out. scratch is reused and returned.
func WireRequest(l *wire.FieldList, hop Hop, scratch []byte) []byte {
	return request(Wire{l}, scanWire(l), &hop, scratch)
}

// WireResponse applies the response rules to the fields of a response
// from an HTTP/2 upstream; via, if set, is appended to Via.
func WireResponse(l *wire.FieldList, via []byte) {
	response(Wire{l}, scanWire(l), false, via)
}

// WireCarrier is an HTTP/2 field list as a trace context carrier
// (tracing.Carrier).
type WireCarrier struct{ L *wire.FieldList }

// Get returns the field name's value.
func (c WireCarrier) Get(name string) string { return string(c.L.Get(name)) }

// Set makes value the field's one line.
func (c WireCarrier) Set(name, value string) { c.L.Set(name, value) }

// Keys is not needed by the trace context propagator.
func (c WireCarrier) Keys() []string { return nil }
