// Package wire is what both of ebb's sides of HTTP/2 share: the server
// engine (package proxy/h2) and the upstream client (package
// proxy/h2client). It holds the stateless HPACK encoding both use for the
// header blocks they send, the field list header blocks are decoded
// into, the checks of field names and values, and the framing of a header
// block into HEADERS and CONTINUATION frames. Frames themselves are read
// and written with x/net's http2.Framer, and header blocks decoded with its
// hpack.Decoder.
package wire
