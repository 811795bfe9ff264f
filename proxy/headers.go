package proxy

import (
	"bytes"

	"github.com/valyala/fasthttp"
)

// Header names ebb reads or writes, in fasthttp's canonical form.
const (
	headerXForwardedFor   = "X-Forwarded-For"
	headerXForwardedProto = "X-Forwarded-Proto"
	headerXForwardedHost  = "X-Forwarded-Host"
)

var (
	hdrXForwardedFor   = []byte(headerXForwardedFor)
	hdrXForwardedProto = []byte(headerXForwardedProto)
	hdrXForwardedHost  = []byte(headerXForwardedHost)
	hdrConnection      = []byte("Connection")
	hdrExpect          = []byte("Expect")
	protoHTTP          = []byte("http")
	protoHTTPS         = []byte("https")
	http11             = []byte("HTTP/1.1")
)

// hopByHop lists the headers that describe one connection and so are never
// forwarded (RFC 9110 §7.6.1), plus Proxy-Connection, which some clients
// still send. Transfer-Encoding is absent: fasthttp parses it into the
// body framing and writes framing anew on each side.
var hopByHop = [...]string{
	"Connection",
	"Keep-Alive",
	"Proxy-Connection",
	"Te",
	"Trailer",
	"Upgrade",
}

// Headers that the Connection header may not remove: they frame or route
// the message, and a client naming them there is either confused or trying
// to smuggle a request.
var protectedFromConnection = [...]string{"Content-Length", "Transfer-Encoding", "Host"}

// headerSet is the part of fasthttp's request and response headers that
// hop-by-hop stripping needs.
type headerSet interface {
	PeekAll(key string) [][]byte
	Del(key string)
}

// stripRequestHopByHop strips a request's hop-by-hop headers (see
// stripHopByHop). The scan is written per concrete header type so that the
// iterator stays on the stack: the common case allocates nothing.
func stripRequestHopByHop(h *fasthttp.RequestHeader, keepUpgrade bool) {
	for k := range h.All() {
		if isHopByHop(k) {
			stripHopByHop(h, keepUpgrade)
			return
		}
	}
}

// stripResponseHopByHop strips a response's hop-by-hop headers.
func stripResponseHopByHop(h *fasthttp.ResponseHeader, keepUpgrade bool) {
	for k := range h.All() {
		if isHopByHop(k) {
			stripHopByHop(h, keepUpgrade)
			return
		}
	}
}

// stripHopByHop removes the hop-by-hop headers from h, with every header
// the Connection header names. keepUpgrade keeps Connection and Upgrade, for
// a protocol upgrade being forwarded on purpose.
func stripHopByHop(h headerSet, keepUpgrade bool) {
	if !keepUpgrade {
		// The Connection header's options name more hop-by-hop headers; it
		// may come on several lines (RFC 9110 §5.3).
		var names []string
		for _, v := range h.PeekAll("Connection") {
			for opt := range bytes.SplitSeq(v, []byte(",")) {
				if opt = bytes.TrimSpace(opt); len(opt) > 0 && !isProtected(opt) {
					names = append(names, string(opt)) // copied: Del reuses the buffer
				}
			}
		}
		for _, name := range names {
			h.Del(name)
		}
	}
	for _, name := range hopByHop {
		if keepUpgrade && (name == "Connection" || name == "Upgrade") {
			continue
		}
		h.Del(name)
	}
}

func isHopByHop(k []byte) bool {
	switch len(k) {
	case 2, 7, 10, 16:
		for _, name := range hopByHop {
			if len(name) == len(k) && bytes.EqualFold(k, []byte(name)) {
				return true
			}
		}
	}
	return false
}

func isProtected(opt []byte) bool {
	for _, name := range protectedFromConnection {
		if bytes.EqualFold(opt, []byte(name)) {
			return true
		}
	}
	return false
}

// setForwarded sets X-Forwarded-For (appending clientIP to what previous
// proxies sent), X-Forwarded-Proto and X-Forwarded-Host, each as exactly
// one header line: a client repeating a line must not get its own value
// past ebb's. scratch is reused to build values and returned for the next
// request.
func setForwarded(h *fasthttp.RequestHeader, clientIP []byte, tls, trust bool, scratch []byte) []byte {
	prior := h.PeekAll(headerXForwardedFor)
	switch {
	case len(prior) == 0:
		if len(clientIP) > 0 {
			h.SetCanonical(hdrXForwardedFor, clientIP)
		}
	default:
		// Several lines are one list (RFC 9110 §5.3): join them.
		scratch = scratch[:0]
		for i, p := range prior {
			if i > 0 {
				scratch = append(scratch, ", "...)
			}
			scratch = append(scratch, p...)
		}
		if len(clientIP) > 0 {
			scratch = append(scratch, ", "...)
			scratch = append(scratch, clientIP...)
		}
		if len(prior) > 1 {
			h.DelBytes(hdrXForwardedFor)
		}
		h.SetCanonical(hdrXForwardedFor, scratch)
	}
	proto := protoHTTP
	if tls {
		proto = protoHTTPS
	}
	setOnce(h, hdrXForwardedProto, headerXForwardedProto, proto, trust)
	setOnce(h, hdrXForwardedHost, headerXForwardedHost, h.Host(), trust)
	return scratch
}

// setOnce makes value the one line of the header, unless trust is set and
// the client sent one (then the client's lines stay as they are).
func setOnce(h *fasthttp.RequestHeader, key []byte, name string, value []byte, trust bool) {
	switch n := len(h.PeekAll(name)); {
	case n > 0 && trust:
		return
	case n > 1:
		h.DelBytes(key)
	}
	if len(value) > 0 {
		h.SetCanonical(key, value)
	} else {
		h.DelBytes(key)
	}
}
