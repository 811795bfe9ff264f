// The response's header blocks: HEADERS and CONTINUATION frames decoded
// as they come into the stream's field list, checked, and the head or
// trailers they are handed over.

package h2client

import (
	"errors"
	"strconv"
	"strings"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/ebb-proxy/ebb/proxy/h2/wire"
	"github.com/ebb-proxy/ebb/proxy/upstream"
)

// headerBlock is the block being received; the read loop's own.
type headerBlock struct {
	c          *conn
	st         *Stream // nil: decoded (the HPACK table must stay in step) and dropped
	fields     *wire.FieldList
	trailer    bool
	end        bool // the block's HEADERS ended the stream
	size       int  // decoded size so far
	raw        int  // encoded size so far
	frames     int  // frames so far
	status     int
	sawRegular bool
	length     int64 // content-length, -1: none
	bad        string
}

// maxRawBlock bounds a header block's encoded size: CONTINUATION frames
// without end cost ebb nothing beyond it.
func (c *conn) maxRawBlock() int { return 4*c.p.cfg.MaxHeaderBytes + frameSize }

// start begins a block with its HEADERS frame.
func (b *headerBlock) start(f *http2.HeadersFrame) error {
	c := b.c
	*b = headerBlock{c: c, end: f.StreamEnded(), length: -1}
	c.mu.Lock()
	st := c.streams[f.StreamID]
	if st == nil && (f.StreamID%2 == 0 || f.StreamID >= c.nextID) {
		c.mu.Unlock()
		return connError{http2.ErrCodeProtocol, "HEADERS on a stream ebb did not open"}
	}
	if st != nil && !st.reset {
		b.st = st
		b.trailer = st.gotHead
		b.fields = &st.header
		if b.trailer {
			b.fields = &st.trailer
		}
		b.fields.Reset()
	}
	c.mu.Unlock()
	return b.more(f.HeaderBlockFragment(), f.HeadersEnded())
}

// more decodes a fragment of the block; ended says it is the last.
func (b *headerBlock) more(frag []byte, ended bool) error {
	c := b.c
	b.raw += len(frag)
	b.frames++
	if b.frames > 64 && b.frames > b.raw/256 {
		// CONTINUATION frames carrying next to nothing: a flood, not a
		// header block (CVE-2024-27316's kind).
		return connError{http2.ErrCodeEnhanceYourCalm, "header block in too many small CONTINUATION frames"}
	}
	if b.raw > c.maxRawBlock() {
		return connError{http2.ErrCodeEnhanceYourCalm, "response header block beyond " + strconv.Itoa(c.maxRawBlock()) + " bytes"}
	}
	if _, err := c.dec.Write(frag); err != nil {
		return connError{http2.ErrCodeCompression, err.Error()}
	}
	if !ended {
		return nil
	}
	if err := c.dec.Close(); err != nil {
		return connError{http2.ErrCodeCompression, err.Error()}
	}
	b.finish()
	return nil
}

// field takes one decoded field (the decoder's emit function).
func (b *headerBlock) field(f hpack.HeaderField) {
	if b.st == nil || b.bad != "" {
		return
	}
	b.size += len(f.Name) + len(f.Value) + 32
	if b.size > b.c.p.cfg.MaxHeaderBytes {
		b.bad = "response header block beyond " + strconv.Itoa(b.c.p.cfg.MaxHeaderBytes) + " bytes"
		return
	}
	if strings.HasPrefix(f.Name, ":") {
		if b.trailer || b.sawRegular || f.Name != ":status" || b.status != 0 {
			b.bad = "misplaced or unknown pseudo-header field " + f.Name
			return
		}
		n, err := strconv.Atoi(f.Value)
		if err != nil || len(f.Value) != 3 || n < 100 {
			b.bad = "invalid :status"
			return
		}
		b.status = n
		return
	}
	b.sawRegular = true
	if why := wire.ValidField(f.Name, f.Value); why != "" {
		b.bad = why
		return
	}
	if f.Name == "content-length" && !b.trailer {
		n, ok := wire.ParseLength(f.Value)
		if !ok || b.length >= 0 && b.length != n {
			b.bad = "invalid content-length"
			return
		}
		b.length = n
	}
	b.fields.Add(f.Name, f.Value)
}

// finish hands a complete block over: the response head (an interim 1xx
// is dropped), or the trailers, which end the body.
func (b *headerBlock) finish() {
	st, c := b.st, b.c
	if st == nil {
		return
	}
	c.mu.Lock()
	if interim := b.finishLocked(); interim != nil {
		c.unlock()
		// The field list is the head's until the final one comes, which
		// the read loop, this goroutine, decodes.
		interim(b.status, &st.header)
		return
	}
	c.unlock()
}

// finishLocked is finish with c.mu held; it returns the function an
// interim response goes to, if any.
func (b *headerBlock) finishLocked() func(int, *wire.FieldList) {
	st, c := b.st, b.c
	if st.reset {
		return nil
	}
	bad := b.bad
	switch {
	case bad != "":
	case b.trailer && !b.end:
		bad = "trailers without END_STREAM"
	case b.trailer:
		c.endRemoteLocked(st)
		return nil
	case b.status == 0:
		bad = "no :status"
	case b.status == 101 || b.status < 200 && b.end:
		bad = "interim response " + strconv.Itoa(b.status) + " where a final one was due"
	case b.status < 200:
		return st.interim // 100 or 103: the final head follows
	case b.status > 599:
		bad = "invalid :status"
	}
	if bad != "" {
		c.resetLocked(st, http2.ErrCodeProtocol, &upstream.Error{Kind: upstream.KindInvalid, Err: errors.New(bad)})
		return nil
	}
	st.status, st.contentLength, st.gotHead, st.headEnded = b.status, b.length, true, b.end
	if b.end {
		c.endRemoteLocked(st)
		return nil
	}
	st.readyLocked()
	return nil
}
