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
	hdrForwarded       = []byte("Forwarded")
	protoHTTP          = []byte("http")
	protoHTTPS         = []byte("https")
	http11             = []byte("HTTP/1.1")
)

// hopByHop lists the headers that describe one connection and so are never
// forwarded (RFC 9110 §7.6.1, and the connection-specific fields of RFC 9113
// §8.2.2), plus Proxy-Connection, which some clients still send.
// Transfer-Encoding is absent: fasthttp parses it into the body framing and
// writes framing anew on each side. Trailer is absent too: it announces
// the message's own trailer fields, end to end (RFC 9110 §6.6.2).
var hopByHop = [...]string{
	"Connection",
	"Keep-Alive",
	"Proxy-Connection",
	"Te",
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
	DelBytes(key []byte)
}

// hopMask has bit i set when hopByHop[i] is present.
type hopMask uint8

const (
	hopConnection = 0 // index of Connection in hopByHop
	hopUpgrade    = 4 // index of Upgrade in hopByHop
)

// hopByHopKeys holds hopByHop as bytes, for DelBytes.
var hopByHopKeys = func() (out [len(hopByHop)][]byte) {
	for i, name := range hopByHop {
		out[i] = []byte(name)
	}
	return out
}()

// stripRequestHopByHop strips a request's hop-by-hop headers (see
// stripHopByHop). The scan is written per concrete header type so that the
// iterator stays on the stack.
func stripRequestHopByHop(h *fasthttp.RequestHeader, keepUpgrade bool) {
	var found hopMask
	for k := range h.All() {
		found |= hopBit(k)
	}
	if found != 0 {
		stripHopByHop(h, found, keepUpgrade)
	}
}

// stripResponseHopByHop strips a response's hop-by-hop headers.
func stripResponseHopByHop(h *fasthttp.ResponseHeader, keepUpgrade bool) {
	var found hopMask
	for k := range h.All() {
		found |= hopBit(k)
	}
	if found != 0 {
		stripHopByHop(h, found, keepUpgrade)
	}
}

// stripHopByHop removes the hop-by-hop headers found in h, with every
// header the Connection header names. keepUpgrade keeps Connection and
// Upgrade, for a protocol upgrade being forwarded on purpose. Nearly every
// upstream response carries "Connection: keep-alive", so this runs on the
// hot path: it allocates nothing.
func stripHopByHop(h headerSet, found hopMask, keepUpgrade bool) {
	if found&(1<<hopConnection) != 0 && !keepUpgrade {
		// The Connection header's options name more hop-by-hop headers; it
		// may come on several lines (RFC 9110 §5.3). Deleting while
		// walking the options is safe: fasthttp's delete moves header
		// entries but never touches the bytes of the values, and nothing
		// is added meanwhile (TestStripHopByHopRequest covers this).
		for _, v := range h.PeekAll("Connection") {
			for len(v) > 0 {
				opt := v
				if i := bytes.IndexByte(v, ','); i >= 0 {
					opt, v = v[:i], v[i+1:]
				} else {
					v = nil
				}
				opt = bytes.TrimSpace(opt)
				if len(opt) == 0 || isProtected(opt) || hopBit(opt) != 0 || bytes.EqualFold(opt, []byte("close")) {
					// "close" names no header; hop-by-hop names
					// (keep-alive, upgrade) are removed below if present.
					continue
				}
				h.DelBytes(opt)
			}
		}
	}
	for i := range hopByHop {
		if found&(1<<i) == 0 || keepUpgrade && (i == hopConnection || i == hopUpgrade) {
			continue
		}
		h.DelBytes(hopByHopKeys[i])
	}
}

// hopBit returns the hopMask bit of k, or 0 if k is not hop-by-hop.
func hopBit(k []byte) hopMask {
	switch len(k) {
	case 2, 7, 10, 16:
		for i, name := range hopByHop {
			if len(name) == len(k) && bytes.EqualFold(k, []byte(name)) {
				return 1 << i
			}
		}
	}
	return 0
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
