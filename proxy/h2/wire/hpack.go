package wire

import (
	"strconv"

	"golang.org/x/net/http2"
)

// ebb's HPACK encoding is stateless, as HAProxy's is, on both sides (the
// server's responses, the client's requests): every field is a literal
// "without indexing" (RFC 7541 §6.2.2), naming the static table's entry
// when it has the name, and values go as they are, without Huffman coding.
// The dynamic table is never used, so header blocks can be encoded on any
// goroutine in any order (no shared encoder state to keep in step with the
// order frames are written in), nothing is stored per connection, and
// encoding is a copy. The first block of a connection announces a dynamic
// table of size 0 (§6.3), which is true whatever SETTINGS_HEADER_TABLE_SIZE
// the peer chooses. What the peer sends is decoded by x/net's
// hpack.Decoder, which keeps the peer's table.

// staticNames maps the names of RFC 7541's static table (Appendix A) to
// the index of their first entry.
var staticNames = map[string]uint8{
	":authority": 1, ":method": 2, ":path": 4, ":scheme": 6, ":status": 8,
	"accept-charset": 15, "accept-encoding": 16, "accept-language": 17,
	"accept-ranges": 18, "accept": 19, "access-control-allow-origin": 20,
	"age": 21, "allow": 22, "authorization": 23, "cache-control": 24,
	"content-disposition": 25, "content-encoding": 26, "content-language": 27,
	"content-length": 28, "content-location": 29, "content-range": 30,
	"content-type": 31, "cookie": 32, "date": 33, "etag": 34, "expect": 35,
	"expires": 36, "from": 37, "host": 38, "if-match": 39,
	"if-modified-since": 40, "if-none-match": 41, "if-range": 42,
	"if-unmodified-since": 43, "last-modified": 44, "link": 45, "location": 46,
	"max-forwards": 47, "proxy-authenticate": 48, "proxy-authorization": 49,
	"range": 50, "referer": 51, "refresh": 52, "retry-after": 53, "server": 54,
	"set-cookie": 55, "strict-transport-security": 56, "transfer-encoding": 57,
	"user-agent": 58, "vary": 59, "via": 60, "www-authenticate": 61,
}

// staticStatus holds the static table's complete ":status" entries.
var staticStatus = map[int]byte{200: 8, 204: 9, 206: 10, 304: 11, 400: 12, 404: 13, 500: 14}

// TableSizeZero is a dynamic table size update to 0 (RFC 7541 §6.3).
const TableSizeZero = 0x20

// AppendInt appends i with an n-bit prefix whose other bits are first
// (RFC 7541 §5.1).
func AppendInt(dst []byte, first byte, n uint, i uint64) []byte {
	limit := uint64(1)<<n - 1
	if i < limit {
		return append(dst, first|byte(i))
	}
	dst = append(dst, first|byte(limit))
	i -= limit
	for i >= 128 {
		dst = append(dst, byte(i&0x7f|0x80))
		i >>= 7
	}
	return append(dst, byte(i))
}

// AppendString appends a string literal, not Huffman-coded (§5.2).
func AppendString[S string | []byte](dst []byte, s S) []byte {
	dst = AppendInt(dst, 0, 7, uint64(len(s)))
	return append(dst, s...)
}

// AppendStatus appends the ":status" field.
func AppendStatus(dst []byte, status int) []byte {
	if idx, ok := staticStatus[status]; ok {
		return append(dst, 0x80|idx) // indexed (§6.1)
	}
	dst = AppendInt(dst, 0, 4, 8)
	var b [8]byte
	return AppendString(dst, strconv.AppendInt(b[:0], int64(status), 10))
}

// AppendField appends a literal field without indexing. name must be in
// lower case already.
func AppendField[S string | []byte](dst, name []byte, value S) []byte {
	if idx, ok := staticNames[string(name)]; ok {
		dst = AppendInt(dst, 0, 4, uint64(idx))
	} else {
		dst = append(dst, 0)
		dst = AppendString(dst, name)
	}
	return AppendString(dst, value)
}

// ConnectionSpecific reports whether a lower-case name is one of the
// fields HTTP/2 forbids (RFC 9113 §8.2.2).
func ConnectionSpecific[S string | []byte](name S) bool {
	switch string(name) {
	case "connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade":
		return true
	}
	return false
}

// Lower appends name in lower case.
func Lower[S string | []byte](dst []byte, name S) []byte {
	for i := 0; i < len(name); i++ {
		c := name[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		dst = append(dst, c)
	}
	return dst
}

// FieldList holds the fields of a header block as decoded: names and
// values back to back in one arena, so that decoding a request allocates
// nothing once the arena has grown.
type FieldList struct {
	arena []byte
	ends  []fieldEnds
}

// fieldEnds are where a field's name and value end in the arena; each
// starts where the one before it ended.
type fieldEnds struct{ name, value uint32 }

// Reset empties the list, keeping its memory.
func (l *FieldList) Reset() {
	l.arena = l.arena[:0]
	l.ends = l.ends[:0]
}

// Add appends a field.
func (l *FieldList) Add(name, value string) {
	l.arena = append(l.arena, name...)
	n := uint32(len(l.arena))
	l.arena = append(l.arena, value...)
	l.ends = append(l.ends, fieldEnds{n, uint32(len(l.arena))})
}

// CopyFrom makes l a copy of src.
func (l *FieldList) CopyFrom(src *FieldList) {
	l.arena = append(l.arena[:0], src.arena...)
	l.ends = append(l.ends[:0], src.ends...)
}

// Len is the number of fields.
func (l *FieldList) Len() int { return len(l.ends) }

// At returns the i-th field. The slices are valid as long as the list.
func (l *FieldList) At(i int) (name, value []byte) {
	start := uint32(0)
	if i > 0 {
		start = l.ends[i-1].value
	}
	e := l.ends[i]
	return l.arena[start:e.name:e.name], l.arena[e.name:e.value:e.value]
}

// Get returns the value of the first field named name, or nil.
func (l *FieldList) Get(name string) []byte {
	for i := range l.ends {
		if k, v := l.At(i); string(k) == name {
			return v
		}
	}
	return nil
}

// WriteBlock frames a header block of stream id with fr: HEADERS, then
// CONTINUATION frames if the block is larger than maxFrame, the peer's
// SETTINGS_MAX_FRAME_SIZE. fr writes into a buffer, whose writes do not
// fail.
func WriteBlock(fr *http2.Framer, id uint32, blk []byte, end bool, maxFrame int) {
	n := min(len(blk), maxFrame)
	_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: blk[:n], EndStream: end, EndHeaders: n == len(blk)})
	for blk = blk[n:]; len(blk) > 0; blk = blk[n:] {
		n = min(len(blk), maxFrame)
		_ = fr.WriteContinuation(id, n == len(blk), blk[:n])
	}
}

// Del removes every field named name (compared without regard to ASCII
// case), keeping the others in order; it reports whether there was one.
func (l *FieldList) Del(name string) bool {
	found := false
	for i := range l.ends {
		if k, _ := l.At(i); EqualFold(k, name) {
			found = true
			break
		}
	}
	if !found {
		return false
	}
	var kept FieldList
	kept.arena = make([]byte, 0, len(l.arena))
	for i := range l.ends {
		k, v := l.At(i)
		if !EqualFold(k, name) {
			kept.AddBytes(k, v)
		}
	}
	l.arena = append(l.arena[:0], kept.arena...)
	l.ends = append(l.ends[:0], kept.ends...)
	return true
}

// Set makes value the one field named name (stored in lower case).
func (l *FieldList) Set(name, value string) {
	l.Del(name)
	var tmp [64]byte
	l.AddBytes(Lower(tmp[:0], name), []byte(value))
}

// AddBytes is Add for byte slices.
func (l *FieldList) AddBytes(name, value []byte) {
	l.arena = append(l.arena, name...)
	n := uint32(len(l.arena))
	l.arena = append(l.arena, value...)
	l.ends = append(l.ends, fieldEnds{n, uint32(len(l.arena))})
}

// AppendFields appends every field of l to a header block. Names are in
// lower case already.
func AppendFields(blk []byte, l *FieldList) []byte {
	for i := range l.Len() {
		k, v := l.At(i)
		blk = AppendField(blk, k, v)
	}
	return blk
}

// EqualFold reports whether s and name are equal ignoring ASCII case
// (field names are ASCII tokens).
func EqualFold[S string | []byte](s S, name string) bool {
	if len(s) != len(name) {
		return false
	}
	for i := range len(name) {
		a, b := s[i], name[i]
		if 'A' <= a && a <= 'Z' {
			a += 'a' - 'A'
		}
		if 'A' <= b && b <= 'Z' {
			b += 'a' - 'A'
		}
		if a != b {
			return false
		}
	}
	return true
}
