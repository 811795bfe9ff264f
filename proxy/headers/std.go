package headers

import (
	"net/http"
	"net/textproto"
)

// Std adapts net/http's http.Header to Fields. Its keys are in canonical
// form, as net/http's server and client leave them.
type Std http.Header

// PeekAll returns the values of name.
func (h Std) PeekAll(name string) [][]byte {
	vv := h[name]
	if len(vv) == 0 {
		return nil
	}
	out := make([][]byte, len(vv))
	for i, v := range vv {
		out[i] = []byte(v)
	}
	return out
}

// DelBytes removes name, in any case.
func (h Std) DelBytes(name []byte) {
	delete(h, textproto.CanonicalMIMEHeaderKey(string(name)))
}

// SetCanonical makes value the one line of name.
func (h Std) SetCanonical(name, value []byte) {
	h[string(name)] = []string{string(value)}
}

func scanStd(h http.Header) (found hopMask) {
	for k := range h {
		found |= hopBit(k)
	}
	return found
}

// StdRequest applies the request rules to the header of a request going
// upstream in net/http's form. Transfer-Encoding and Content-Length are
// the client's to write, and go; the authority is the request's Host,
// not a field.
func StdRequest(h http.Header, hop Hop) {
	delete(h, "Transfer-Encoding")
	delete(h, "Content-Length")
	delete(h, "Host")
	request(Std(h), scanStd(h), &hop, nil)
}

// StdResponse applies the response rules to the header of a response
// received in net/http's form (cluster.ExchangeHTTP), going to the
// client; via, if
// set, is appended to Via.
func StdResponse(h http.Header, via []byte) {
	delete(h, "Transfer-Encoding")
	response(Std(h), scanStd(h), false, via)
}
