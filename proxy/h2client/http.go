// RoundTrip: the pool behind net/http's request and response types, as
// the engines that build an http.Request for an HTTP/2 upstream use it.

package h2client

import (
	"io"
	"maps"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/ebb-proxy/ebb/proxy/h2/wire"
)

// RoundTrip sends req and returns the response once its head has come;
// its body streams (its Close ends the stream), and its Trailer is filled
// when the body has been read to its end. The request body, if any,
// streams up on a goroutine of its own while the response comes down,
// and is closed when the stream ends. The error says whether the
// upstream processed the request (see package upstream's errors).
func (p *Pool) RoundTrip(req *http.Request) (*http.Response, error) {
	body := req.Body
	if body == http.NoBody {
		body = nil
	}
	bp := blockPool.Get().(*[]byte)
	blk := requestBlock((*bp)[:0], req, body != nil)
	r := &Request{Block: blk, Head: req.Method == http.MethodHead}
	if trace := httptrace.ContextClientTrace(req.Context()); trace != nil && trace.Got1xxResponse != nil {
		r.Interim = func(status int, fields *wire.FieldList) {
			h := make(textproto.MIMEHeader, fields.Len())
			toHeader(http.Header(h), fields)
			_ = trace.Got1xxResponse(status, h)
		}
	}
	var trailers func() []byte
	if req.Trailer != nil {
		// A trailer map, even empty, may be filled when the body ends.
		trailers = func() []byte { return trailerBlock(req) }
	}
	st, err := p.Exchange(req.Context(), r, body, trailers)
	*bp = blk
	blockPool.Put(bp)
	if err != nil {
		return nil, err
	}
	return st.response(req), nil
}

// blockPool holds the buffers request header blocks are encoded into
// (Open frames the block before it returns).
var blockPool = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// requestBlock encodes req's header block: the pseudo-header fields, then
// its fields in lower case without those HTTP/2 forbids (RFC 9113 §8.2.2)
// and Host (the :authority).
func requestBlock(blk []byte, req *http.Request, hasBody bool) []byte {
	host := req.Host
	if host == "" {
		host = req.URL.Host
	}
	blk = wire.AppendField(blk, []byte(":method"), req.Method)
	blk = wire.AppendField(blk, []byte(":scheme"), req.URL.Scheme)
	blk = wire.AppendField(blk, []byte(":authority"), host)
	blk = wire.AppendField(blk, []byte(":path"), req.URL.RequestURI())
	var tmp [64]byte
	for k, vv := range req.Header {
		name := wire.Lower(tmp[:0], k)
		switch {
		case wire.ConnectionSpecific(name), string(name) == "host", string(name) == "content-length", string(name) == "trailer":
			continue
		case string(name) == "te":
			for _, v := range vv {
				if strings.EqualFold(v, "trailers") {
					blk = wire.AppendField(blk, name, "trailers")
				}
			}
			continue
		}
		for _, v := range vv {
			blk = wire.AppendField(blk, name, v)
		}
	}
	if req.ContentLength > 0 && hasBody {
		blk = wire.AppendField(blk, []byte("content-length"), strconv.FormatInt(req.ContentLength, 10))
	}
	if len(req.Trailer) > 0 {
		// The names the client announced, sorted, in canonical form (as
		// net/http's own client announces them).
		names := slices.Sorted(maps.Keys(req.Trailer))
		blk = wire.AppendField(blk, []byte("trailer"), strings.Join(names, ","))
	}
	return blk
}

// trailerBlock encodes the trailers of req (its Trailer map, filled once
// the body was read to its end).
func trailerBlock(req *http.Request) []byte {
	var trailers []byte
	for k, vv := range req.Trailer {
		var tmp [64]byte
		name := wire.Lower(tmp[:0], k)
		if wire.ConnectionSpecific(name) {
			continue
		}
		for _, v := range vv {
			trailers = wire.AppendField(trailers, name, v)
		}
	}
	return trailers
}

// response builds the http.Response of a stream whose head has come.
func (st *Stream) response(req *http.Request) *http.Response {
	resp := &http.Response{
		Status:     strconv.Itoa(st.status) + " " + http.StatusText(st.status),
		StatusCode: st.status,
		Proto:      "HTTP/2.0",
		ProtoMajor: 2,
		Header:     make(http.Header, st.header.Len()),
		Request:    req,
	}
	fields := toHeader(resp.Header, &st.header)
	if names := fields.trailer; names != "" {
		resp.Trailer = http.Header{}
		for _, name := range strings.Split(names, ",") {
			if name = strings.TrimSpace(name); name != "" {
				resp.Trailer[http.CanonicalHeaderKey(name)] = nil
			}
		}
	}
	resp.ContentLength = st.contentLength
	if st.Ended() && !st.head {
		// The response ended with its head: nothing follows (a gRPC
		// server's trailers-only answer stays one HEADERS frame).
		resp.ContentLength = 0
	}
	resp.Body = &responseBody{st: st, resp: resp}
	return resp
}

// headerFacts are what toHeader noticed on its way.
type headerFacts struct{ trailer string }

// toHeader adds a field list to an http.Header, names in canonical form.
func toHeader(h http.Header, l *wire.FieldList) headerFacts {
	var facts headerFacts
	for i := range l.Len() {
		name, value := l.At(i)
		k := http.CanonicalHeaderKey(string(name))
		v := string(value)
		if k == "Trailer" {
			facts.trailer = v
		}
		h[k] = append(h[k], v)
	}
	return facts
}

// responseBody is a response's body as net/http's types carry it.
type responseBody struct {
	st   *Stream
	resp *http.Response
	once sync.Once
}

func (b *responseBody) Read(p []byte) (int, error) {
	n, err := b.st.Read(p)
	if err == io.EOF && b.st.trailer.Len() > 0 {
		if b.resp.Trailer == nil {
			b.resp.Trailer = http.Header{}
		}
		toHeader(b.resp.Trailer, &b.st.trailer)
		b.st.trailer.Reset()
	}
	return n, err
}

func (b *responseBody) Close() error {
	b.once.Do(b.st.Close)
	return nil
}
