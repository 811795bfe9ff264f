// Package headers holds ebb's header rules, the one place that decides
// which fields of a message cross the proxy and which ebb adds: hop-by-hop
// fields and those the Connection field names are dropped in both
// directions, "TE: trailers" stays towards HTTP/2, Expect goes once the
// engine has handled it, X-Forwarded-For/-Proto/-Host are set as single
// lines (X-Forwarded-For appended to only from a trusted proxy), and
// Forwarded and X-Real-IP are dropped unless the peer is a trusted proxy,
// ebb's Via entry is appended both ways when headers.via names one, and
// X-Request-Id is kept or given as headers.request_id says.
//
// The rules are written once against Fields, the few operations they need
// of a header section; thin adapters apply them to fasthttp's request and
// response headers (FastRequest, FastResponse) and to net/http's
// http.Header (StdRequest, StdResponse). Every path (HTTP/1 and HTTP/2
// clients, HTTP/1 and HTTP/2 upstreams, upgrades) goes through them.
package headers

import (
	"bytes"

	"github.com/ebb-proxy/ebb/proxy/h2/wire"
)

// Fields is the part of a header section the rules read and change. The
// fasthttp header types have it as they are; Std adapts http.Header.
type Fields interface {
	// PeekAll returns the values of every line of the field name, which
	// is in canonical form.
	PeekAll(name string) [][]byte
	// DelBytes removes every line of the field name (any case).
	DelBytes(name []byte)
	// SetCanonical makes value the one line of name, which is in
	// canonical form.
	SetCanonical(name, value []byte)
}

// Hop is what the request rules need to know beyond the header itself:
// who the client is and how the request reached ebb.
type Hop struct {
	// ClientIP is appended to X-Forwarded-For; empty adds nothing.
	ClientIP []byte
	// TLS says the client came over TLS: X-Forwarded-Proto is "https".
	TLS bool
	// Host is the request's authority (its Host field, or the host of an
	// absolute-form URI, or HTTP/2's :authority): X-Forwarded-Host.
	Host []byte
	// Trust says the peer is a trusted proxy (the listener's
	// headers.trusted_proxies or trust_forwarded): its X-Forwarded-For is
	// appended to, and its Forwarded, X-Real-IP and X-Forwarded-Proto/-Host
	// lines are kept as they are. From an untrusted peer they are replaced
	// by what ebb knows: X-Forwarded-For is the peer's address alone.
	Trust bool
	// Upgrade forwards a WebSocket upgrade on purpose: Connection and
	// Upgrade become exactly "Connection: Upgrade" and "Upgrade:
	// websocket" (the engine has checked that the client asked for that
	// alone), and the other fields Connection named still go.
	Upgrade bool
	// TETrailers keeps "TE: trailers", which HTTP/2 allows and gRPC
	// servers expect (RFC 9113 §8.2.2), when the client sent it: set
	// towards h2c, h2 and auto clusters.
	TETrailers bool
	// Via, if set, is appended to the Via field (RFC 9110 §7.6.3): the
	// version the request was received with and ebb's name, such as
	// "1.1 ebb" (headers.via).
	Via []byte
	// RequestID is what becomes of X-Request-Id (headers.request_id).
	RequestID RequestIDPolicy
}

// Header names ebb reads or writes, in canonical form.
const (
	XForwardedFor   = "X-Forwarded-For"
	XForwardedProto = "X-Forwarded-Proto"
	XForwardedHost  = "X-Forwarded-Host"
	Forwarded       = "Forwarded"
	Via             = "Via"
)

var (
	hdrXForwardedFor   = []byte(XForwardedFor)
	hdrXForwardedProto = []byte(XForwardedProto)
	hdrXForwardedHost  = []byte(XForwardedHost)
	hdrForwarded       = []byte(Forwarded)
	hdrVia             = []byte(Via)
	hdrXRealIP         = []byte("X-Real-Ip")
	hdrExpect          = []byte("Expect")
	hdrTE              = []byte("Te")
	protoHTTP          = []byte("http")
	protoHTTPS         = []byte("https")
	valueTrailers      = []byte("trailers")
	valueUpgrade       = []byte("Upgrade")
	valueWebSocket     = []byte("websocket")
)

// hopByHop lists the fields that describe one connection and so are never
// forwarded (RFC 9110 §7.6.1, and the connection-specific fields of RFC 9113
// §8.2.2), plus Proxy-Connection, which some clients still send.
// Transfer-Encoding is absent: each side's framing is written anew by its
// library (fasthttp parses it into the body framing; net/http keeps it out
// of http.Header), and the net/http adapters drop it themselves. Trailer
// is absent too: it announces the message's own trailer fields, end to end
// (RFC 9110 §6.6.2).
//
// HTTP2-Settings belongs to the h2c upgrade (RFC 7540 §3.2), which RFC
// 9113 removed and ebb never forwards: it goes even when Connection does
// not name it, so that no origin is offered h2c through ebb.
var hopByHop = [...]string{
	"Connection",
	"Keep-Alive",
	"Proxy-Connection",
	"Te",
	"Upgrade",
	"Http2-Settings",
}

// Fields that the Connection field may not remove: they frame or route
// the message, and a client naming them there is either confused or trying
// to smuggle a request.
var protectedFromConnection = [...]string{"Content-Length", "Transfer-Encoding", "Host"}

// hopMask has bit i set when hopByHop[i] is present.
type hopMask uint8

const (
	hopConnection = 0 // index of Connection in hopByHop
	hopTE         = 3 // index of Te in hopByHop
	hopUpgrade    = 4 // index of Upgrade in hopByHop
)

// hopByHopKeys holds hopByHop as bytes, for DelBytes.
var hopByHopKeys = func() (out [len(hopByHop)][]byte) {
	for i, name := range hopByHop {
		out[i] = []byte(name)
	}
	return out
}()

// request applies the request rules to h, in which the adapter found the
// hop-by-hop fields of found. scratch is reused to build values and
// returned for the next request.
func request(h Fields, found hopMask, hop *Hop, scratch []byte) []byte {
	teTrailers := hop.TETrailers && found&(1<<hopTE) != 0 && listsToken(h.PeekAll("Te"), valueTrailers)
	strip(h, found, hop.Upgrade)
	if teTrailers {
		h.SetCanonical(hdrTE, valueTrailers)
	}
	// The engine has answered (or skipped) 100 Continue: the upstream gets
	// the body without waiting.
	h.DelBytes(hdrExpect)
	if !hop.Trust {
		// RFC 7239's Forwarded and X-Real-IP carry the same claims as
		// X-Forwarded-*; from an untrusted client they are dropped, not
		// passed on.
		h.DelBytes(hdrForwarded)
		h.DelBytes(hdrXRealIP)
	}
	scratch = setForwarded(h, hop, scratch)
	if len(hop.Via) > 0 {
		scratch = appendVia(h, hop.Via, scratch)
	}
	return setRequestID(h, hop, scratch)
}

// response applies the response rules to h: its hop-by-hop fields go,
// but for a 101 relayed to a WebSocket upgrade (upgrade), which keeps
// "Connection: Upgrade" and "Upgrade: websocket"; via, if set, is
// appended to Via.
func response(h Fields, found hopMask, upgrade bool, via []byte) {
	if found != 0 || upgrade {
		strip(h, found, upgrade)
	}
	if len(via) > 0 {
		appendVia(h, via, nil)
	}
}

// appendVia adds via to the end of the Via list, as one line (several
// lines are one list, RFC 9110 §5.3). scratch is reused and returned.
func appendVia(h Fields, via, scratch []byte) []byte {
	prior := h.PeekAll(Via)
	if len(prior) == 0 {
		h.SetCanonical(hdrVia, via)
		return scratch
	}
	scratch = scratch[:0]
	for _, p := range prior {
		scratch = append(scratch, p...)
		scratch = append(scratch, ", "...)
	}
	scratch = append(scratch, via...)
	if len(prior) > 1 {
		h.DelBytes(hdrVia)
	}
	h.SetCanonical(hdrVia, scratch)
	return scratch
}

// strip removes the hop-by-hop fields found in h, with every field the
// Connection field names. websocket makes Connection and Upgrade exactly
// "Connection: Upgrade" and "Upgrade: websocket", for a WebSocket upgrade
// being forwarded on purpose. Nearly every upstream response carries
// "Connection: keep-alive", so this runs on the hot path: on fasthttp's
// headers it allocates nothing.
func strip(h Fields, found hopMask, websocket bool) {
	if found&(1<<hopConnection) != 0 {
		// The Connection field's options name more hop-by-hop fields; it
		// may come on several lines (RFC 9110 §5.3). Deleting while
		// walking the options is safe: fasthttp's delete moves header
		// entries but never touches the bytes of the values, and nothing
		// is added meanwhile (TestStripRequest covers this).
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
					// "close" names no field; hop-by-hop names
					// (keep-alive, upgrade) are removed below if present.
					continue
				}
				h.DelBytes(opt)
			}
		}
	}
	for i := range hopByHop {
		if found&(1<<i) == 0 {
			continue
		}
		h.DelBytes(hopByHopKeys[i])
	}
	if websocket {
		h.SetCanonical(hopByHopKeys[hopConnection], valueUpgrade)
		h.SetCanonical(hopByHopKeys[hopUpgrade], valueWebSocket)
	}
}

// hopBit returns the hopMask bit of k, or 0 if k is not hop-by-hop.
func hopBit[S string | []byte](k S) hopMask {
	switch len(k) {
	case 2, 7, 10, 14, 16:
		for i, name := range hopByHop {
			if len(name) == len(k) && wire.EqualFold(k, name) {
				return 1 << i
			}
		}
	}
	return 0
}

func isProtected[S string | []byte](opt S) bool {
	for _, name := range protectedFromConnection {
		if wire.EqualFold(opt, name) {
			return true
		}
	}
	return false
}

// listsToken reports whether any of the comma-separated lists holds tok
// (ignoring case and parameters: "trailers;q=1").
func listsToken(lines [][]byte, tok []byte) bool {
	for _, line := range lines {
		for opt := range bytes.SplitSeq(line, []byte(",")) {
			name, _, _ := bytes.Cut(opt, []byte(";"))
			if bytes.EqualFold(bytes.TrimSpace(name), tok) {
				return true
			}
		}
	}
	return false
}

// setForwarded sets X-Forwarded-For (appending the client's address to
// what previous proxies sent), X-Forwarded-Proto and X-Forwarded-Host,
// each as exactly one line: a client repeating a line must not get its own
// value past ebb's. scratch is reused to build values and returned.
func setForwarded(h Fields, hop *Hop, scratch []byte) []byte {
	prior := h.PeekAll(XForwardedFor)
	switch {
	case !hop.Trust:
		// An untrusted client's list is its own claim: ebb's is the
		// address it sees.
		if len(prior) > 0 {
			h.DelBytes(hdrXForwardedFor)
		}
		if len(hop.ClientIP) > 0 {
			h.SetCanonical(hdrXForwardedFor, hop.ClientIP)
		}
	case len(prior) == 0:
		if len(hop.ClientIP) > 0 {
			h.SetCanonical(hdrXForwardedFor, hop.ClientIP)
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
		if len(hop.ClientIP) > 0 {
			scratch = append(scratch, ", "...)
			scratch = append(scratch, hop.ClientIP...)
		}
		if len(prior) > 1 {
			h.DelBytes(hdrXForwardedFor)
		}
		h.SetCanonical(hdrXForwardedFor, scratch)
	}
	proto := protoHTTP
	if hop.TLS {
		proto = protoHTTPS
	}
	setOnce(h, hdrXForwardedProto, XForwardedProto, proto, hop.Trust)
	setOnce(h, hdrXForwardedHost, XForwardedHost, hop.Host, hop.Trust)
	return scratch
}

// setOnce makes value the one line of the field, unless trust is set and
// the client sent one (then the client's lines stay as they are).
func setOnce(h Fields, key []byte, name string, value []byte, trust bool) {
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
