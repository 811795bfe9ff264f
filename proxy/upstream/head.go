package upstream

import (
	"bufio"
	"bytes"
	"iter"

	"github.com/valyala/fasthttp"
	"golang.org/x/net/http/httpguts"
)

// An HTTP/1 response head is checked before fasthttp parses it, on the
// same buffered bytes, for what fasthttp's parser tolerates and a proxy
// must not: a field name that is no token ("X Bad", "Transfer Encoding"),
// both Content-Length and Transfer-Encoding (RFC 9112 §6.3: a sign of
// smuggling, to be handled as an error), Transfer-Encoding in an HTTP/1.0
// response (RFC 9112 §6.1: faulty framing), obs-fold (RFC 9112 §5.2: a
// proxy may answer 502), a line ended by LF alone or a CR inside one, and
// anything before the status line. fasthttp then parses exactly the bytes
// checked: the head ends at the first CRLF CRLF, where both find it.

// InvalidResponse is an upstream response that breaks HTTP/1.1's rules;
// the exchange fails with KindInvalid, the connection is closed and the
// client gets a 502.
type InvalidResponse string

func (e InvalidResponse) Error() string { return "upstream: invalid response: " + string(e) }

// Why a response head is refused.
const (
	errHeadStart      = InvalidResponse("bytes before the status line")
	errStatusLine     = InvalidResponse("malformed status line")
	errVersion        = InvalidResponse("not HTTP/1.0 or HTTP/1.1")
	errLineEnd        = InvalidResponse("a line ends in LF without CR, or holds a CR")
	errObsFold        = InvalidResponse("a field line is folded (obs-fold)")
	errFieldName      = InvalidResponse("a field name is not a token")
	errFieldLine      = InvalidResponse("a field line has no colon")
	errBothFramings   = InvalidResponse("both Content-Length and Transfer-Encoding")
	errHTTP10Chunked  = InvalidResponse("Transfer-Encoding in an HTTP/1.0 response")
	errUnasked101     = InvalidResponse("101 Switching Protocols to a request that asked for no upgrade")
	errTooManyInterim = InvalidResponse("too many interim (1xx) responses")
)

// ErrNotWebSocket: a 101 to a WebSocket upgrade that does not say it
// switched to WebSocket (RFC 6455 §4.1: "Upgrade: websocket" and
// "Connection: Upgrade"): what follows may be any protocol.
const ErrNotWebSocket = InvalidResponse("101 Switching Protocols without Upgrade: websocket and Connection: Upgrade")

// SwitchedToWebSocket reports whether the 101 answer h switched to
// WebSocket: Upgrade is "websocket" alone (WebSocketOnly), and
// Connection lists "upgrade".
func SwitchedToWebSocket(h *fasthttp.ResponseHeader) bool {
	return WebSocketOnly(h.All()) && h.ConnectionUpgrade()
}

// WebSocketOnly reports whether the fields of a message (a request
// asking for an upgrade, or its 101) hold one Upgrade line, and that it
// is "websocket" alone (RFC 6455 §4.1): not a list, not a version.
func WebSocketOnly(fields iter.Seq2[[]byte, []byte]) bool {
	lines := 0
	ok := false
	for k, v := range fields {
		if bytes.EqualFold(k, []byte("Upgrade")) {
			lines++
			ok = bytes.EqualFold(bytes.Trim(v, " \t"), []byte("websocket"))
		}
	}
	return lines == 1 && ok
}

// errHeadTooLarge: the head does not fit the read buffer (ReadBufferSize).
const errHeadTooLarge = InvalidResponse("a head larger than the read buffer (16 KiB)")

var crlfcrlf = []byte("\r\n\r\n")

// peekHead returns the response head at the start of br, through the
// CRLF CRLF that ends it, waiting until it has arrived whole. It consumes
// nothing. nothing reports a failure before a single byte. A line ended
// by LF alone fails at once (a head of such lines has no CRLF CRLF to
// wait for).
func peekHead(br *bufio.Reader) (head []byte, nothing bool, err error) {
	if _, err := br.Peek(1); err != nil {
		return nil, true, err
	}
	from := 0
	for {
		b, _ := br.Peek(br.Buffered())
		if i := bytes.Index(b[from:], crlfcrlf); i >= 0 {
			return b[:from+i+len(crlfcrlf)], false, nil
		}
		for i := from; i < len(b); i++ {
			if b[i] == '\n' && (i == 0 || b[i-1] != '\r') {
				return nil, false, errLineEnd
			}
		}
		if len(b) >= br.Size() {
			return nil, false, errHeadTooLarge
		}
		from = max(len(b)-len(crlfcrlf)+1, 0)
		if _, err := br.Peek(len(b) + 1); err != nil {
			return nil, false, err
		}
	}
}

// checkHead checks a response head as peekHead returns it.
func checkHead(b []byte) error {
	if !bytes.HasPrefix(b, []byte("HTTP/")) {
		return errHeadStart
	}
	line, rest, err := nextLine(b)
	if err != nil {
		return err
	}
	// RFC 9112 §4: HTTP-version SP 3DIGIT SP reason-phrase (a sender
	// may leave out the reason, and its SP); RFC 9110 §15: 100 to 599.
	http10 := false
	switch {
	case len(line) < 12 || line[8] != ' ' || len(line) > 12 && line[12] != ' ' || !validStatus(line[9:12]):
		return errStatusLine
	case string(line[:8]) == "HTTP/1.1":
	case string(line[:8]) == "HTTP/1.0":
		http10 = true
	default:
		return errVersion
	}
	for _, c := range line {
		if c < ' ' && c != '\t' || c == 0x7f {
			return errStatusLine
		}
	}
	var cl, te bool
	// rest ends with CR LF CR LF (peekHead): the indexing below stays
	// within it, as every line stops at a CR.
	for i := 0; ; {
		switch rest[i] {
		case '\r':
			if rest[i+1] != '\n' {
				return errLineEnd
			}
			return checkFraming(cl, te, http10) // the empty line: the head's end
		case ' ', '\t':
			return errObsFold
		}
		// The name, a token, then (RFC 9112 §5.1: a proxy removes white
		// space between a response's field name and colon, as fasthttp
		// does, and refuses none) spaces, and the colon.
		start := i
		for tokenChar[rest[i]] {
			i++
		}
		name := rest[start:i]
		for rest[i] == ' ' {
			i++
		}
		switch {
		case rest[i] != ':' && (rest[i] == '\r' || rest[i] == '\n'):
			return errFieldLine
		case rest[i] != ':' || len(name) == 0:
			return errFieldName
		case len(name) == len("Content-Length") && bytes.EqualFold(name, []byte("Content-Length")):
			cl = true
		case len(name) == len("Transfer-Encoding") && bytes.EqualFold(name, []byte("Transfer-Encoding")):
			te = true
		}
		// The value, to the line's CR LF; fasthttp checks its bytes.
		for i++; rest[i] != '\r'; i++ {
			if rest[i] == '\n' {
				return errLineEnd
			}
		}
		if rest[i+1] != '\n' {
			return errLineEnd
		}
		i += 2
	}
}

// checkFraming refuses the framings a response may not have: both
// Content-Length and Transfer-Encoding (RFC 9112 §6.3), and
// Transfer-Encoding in HTTP/1.0 (RFC 9112 §6.1).
func checkFraming(cl, te, http10 bool) error {
	switch {
	case te && cl:
		return errBothFramings
	case te && http10:
		return errHTTP10Chunked
	}
	return nil
}

// tokenChar marks the characters of a token (RFC 9110 §5.6.2).
var tokenChar = func() (t [256]bool) {
	for c := range 128 {
		t[c] = httpguts.IsTokenRune(rune(c))
	}
	return t
}()

// validStatus reports whether s is a status code from 100 to 599.
func validStatus(s []byte) bool {
	return '1' <= s[0] && s[0] <= '5' && '0' <= s[1] && s[1] <= '9' && '0' <= s[2] && s[2] <= '9'
}

// nextLine splits the line at the start of b, which must end in CR LF
// and hold no other CR or LF, from the rest.
func nextLine(b []byte) (line, rest []byte, err error) {
	i := bytes.IndexByte(b, '\n')
	if i < 1 || b[i-1] != '\r' {
		return nil, nil, errLineEnd
	}
	line = b[:i-1]
	if bytes.IndexByte(line, '\r') >= 0 {
		return nil, nil, errLineEnd
	}
	return line, b[i+1:], nil
}
