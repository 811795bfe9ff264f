package proxy

import (
	"bytes"

	"github.com/valyala/fasthttp"
)

// Header names ebb reads or writes, in fasthttp's canonical form.
var (
	hdrXForwardedFor   = []byte("X-Forwarded-For")
	hdrXForwardedProto = []byte("X-Forwarded-Proto")
	hdrXForwardedHost  = []byte("X-Forwarded-Host")
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
	Peek(key string) []byte
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
		// The Connection header's options name more hop-by-hop headers.
		if v := h.Peek("Connection"); len(v) > 0 {
			var names [8][]byte
			n := 0
			for opt := range bytes.SplitSeq(v, []byte(",")) {
				opt = bytes.TrimSpace(opt)
				if len(opt) == 0 || n == len(names) || isProtected(opt) {
					continue
				}
				names[n] = append([]byte(nil), opt...) // v is invalidated by Del
				n++
			}
			for _, name := range names[:n] {
				h.Del(string(name))
			}
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

// setForwarded sets X-Forwarded-For (appending clientIP to what a previous
// proxy sent), X-Forwarded-Proto and X-Forwarded-Host. scratch is reused to
// build the new X-Forwarded-For value and returned for the next request.
func setForwarded(h *fasthttp.RequestHeader, clientIP []byte, tls, trust bool, scratch []byte) []byte {
	if prior := h.PeekBytes(hdrXForwardedFor); len(prior) > 0 && len(clientIP) > 0 {
		scratch = append(scratch[:0], prior...)
		scratch = append(scratch, ", "...)
		scratch = append(scratch, clientIP...)
		h.SetCanonical(hdrXForwardedFor, scratch)
	} else if len(clientIP) > 0 {
		h.SetCanonical(hdrXForwardedFor, clientIP)
	}
	if !trust || len(h.PeekBytes(hdrXForwardedProto)) == 0 {
		if tls {
			h.SetCanonical(hdrXForwardedProto, protoHTTPS)
		} else {
			h.SetCanonical(hdrXForwardedProto, protoHTTP)
		}
	}
	if !trust || len(h.PeekBytes(hdrXForwardedHost)) == 0 {
		if host := h.Host(); len(host) > 0 {
			h.SetCanonical(hdrXForwardedHost, host)
		}
	}
	return scratch
}
