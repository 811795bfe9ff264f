package h1

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/valyala/fasthttp"

	"github.com/ebb-proxy/ebb/proxy/cluster"
	"github.com/ebb-proxy/ebb/proxy/events"
	"github.com/ebb-proxy/ebb/proxy/headers"
	"github.com/ebb-proxy/ebb/proxy/route"
	"github.com/ebb-proxy/ebb/proxy/upstream"
)

// sendHTTP sends the request to an endpoint of an h2c, h2 or auto
// cluster in net/http's form (cluster.ExchangeHTTP: ebb's HTTP/2 client,
// or its HTTP/1.1 transport for an auto endpoint that speaks HTTP/1.1),
// and puts the answer into the response fasthttp sends; its body streams
// to the client.
func (c *call) sendHTTP(rt *route.Route, ep *cluster.Endpoint) (int, *cluster.Endpoint, error) {
	out := c.httpRequest(rt, ep)
	// A retry's copy of the request must keep the trailer map OnEOF fills.
	trailer := out.Trailer
	keepTrailer := func(o *http.Request) { o.Trailer = trailer }
	resp, ep, err := rt.Cluster.ExchangeHTTP(context.Background(), ep, out, c.body, keepTrailer, &c.trip, c.s.l.Log)
	if err != nil {
		c.body.StopAttempt()
		return 0, ep, err
	}
	return c.relayHTTP(resp, ep), ep, nil
}

// httpRequest builds the request in net/http's form that goes to ep from
// the client's, whose header rules have been applied. A chunked body's
// trailers join it as they arrive.
func (c *call) httpRequest(rt *route.Route, ep *cluster.Endpoint) *http.Request {
	req, body := &c.ctx.Request, c.body
	uri := req.URI()
	out := &http.Request{
		Method: string(req.Header.Method()),
		URL:    &url.URL{Scheme: rt.Cluster.Scheme(), Host: ep.Addr(), Opaque: string(uri.PathOriginal()), RawQuery: string(uri.QueryString())},
		Host:   string(req.Header.Host()),
		Header: make(http.Header, req.Header.Len()),
	}
	if strings.HasPrefix(out.URL.Opaque, "//") {
		// An opaque "//..." would read as a scheme-relative URL.
		out.URL.Opaque, out.URL.Path = "", out.URL.Opaque
	}
	if out.Host == "" {
		out.Host = ep.Addr() // HTTP/1.0 without Host
	}
	for k, v := range req.Header.All() {
		switch string(k) {
		case "Host", "Content-Length", "Transfer-Encoding", "Trailer":
			continue // framing is the transport's; Host is set above
		}
		key := string(k)
		out.Header[key] = append(out.Header[key], string(v))
	}
	if body != nil {
		out.ContentLength = int64(req.Header.ContentLength())
		if out.ContentLength < 0 {
			out.ContentLength = -1 // chunked: unknown
			// A chunked body may end with trailers; the transport
			// announces the names the client announced and sends what
			// the map holds when the body ends.
			out.Trailer = http.Header{}
			for _, name := range req.Header.PeekTrailerKeys() {
				out.Trailer[string(name)] = nil
			}
			body.OnEOF = func() {
				// The trailer section as received (Peek may find an
				// empty header-section entry of the same name first).
				for line := range bytes.SplitSeq(req.Header.TrailerHeader(), []byte("\r\n")) {
					if k, v, ok := bytes.Cut(line, []byte(":")); ok {
						k := http.CanonicalHeaderKey(string(k))
						out.Trailer[k] = append(out.Trailer[k], string(bytes.TrimSpace(v)))
					}
				}
			}
		}
	}
	return out
}

// relayHTTP puts net/http's response into the one fasthttp sends, its
// body streamed; it returns the status.
func (c *call) relayHTTP(resp *http.Response, ep *cluster.Endpoint) int {
	req, body := &c.ctx.Request, c.body
	body.Answered()
	fr := &c.ctx.Response
	fr.SetStatusCode(resp.StatusCode)
	headers.StdResponse(resp.Header, c.s.l.Table().ViaFor(resp.ProtoMajor))
	for k, vv := range resp.Header {
		if k == "Content-Length" {
			continue // the body stream's length is set below
		}
		for _, v := range vv {
			fr.Header.Add(k, v)
		}
	}
	if _, ok := resp.Header["Content-Type"]; !ok {
		fr.Header.SetNoDefaultContentType(true)
	}
	s := resp.StatusCode
	if req.Header.IsHead() || s < 200 || s == http.StatusNoContent || s == http.StatusNotModified {
		resp.Body.Close()
		ep.Release()
		body.StopAttempt()
		fr.SkipBody = true
		if resp.ContentLength >= 0 {
			fr.Header.SetContentLength(int(resp.ContentLength))
		}
		return s
	}
	size := max(resp.ContentLength, -1)
	if len(resp.Trailer) > 0 {
		// Announced trailers need chunked framing on HTTP/1.1 (an HTTP/2
		// response may have both a length and trailers).
		size = -1
	}
	if body != nil {
		body.Hold() // for the response body: see httpBody.Close
	}
	fr.SetBodyStream(&httpBody{ReadCloser: resp.Body, ep: ep, resp: resp, down: &fr.Header, req: body}, int(size))
	return s
}

// httpBody is a net/http response body on its way to an HTTP/1 client;
// fasthttp closes it once written, which ends the exchange. Trailers
// arrive with the body's end and join the downstream trailer section
// (sent when the body is chunked).
type httpBody struct {
	io.ReadCloser
	ep   *cluster.Endpoint
	resp *http.Response
	down *fasthttp.ResponseHeader
	// req is the request's body, if any: net/http may still be sending
	// it (full duplex), but the client's connection is fasthttp's again
	// once the response is written.
	req  *upstream.Body
	once sync.Once
	// n counts the bytes read, for watch (nil: none).
	n     int64
	watch upstream.BodyWatcher
	// cut, if not nil, ends an event stream on an event boundary;
	// cutDone is called once the body is closed.
	cut     *events.Cutter
	cutDone func()
}

// Watch implements upstream.WatchedBody.
func (b *httpBody) Watch(w upstream.BodyWatcher) { b.watch = w }

// CutWith implements upstream.CutBody.
func (b *httpBody) CutWith(c *events.Cutter, done func()) { b.cut, b.cutDone = c, done }

// Interrupt implements upstream.CutBody: closing the body wakes its read
// and cancels the upstream request (only ever done on an event boundary:
// what follows is not relayed).
func (b *httpBody) Interrupt() { b.ReadCloser.Close() }

func (b *httpBody) Read(p []byte) (int, error) {
	if b.cut != nil && b.cut.Done() {
		return 0, io.EOF
	}
	n, err := b.ReadCloser.Read(p)
	if b.cut != nil {
		n, err = b.cut.After(p, n, err)
	}
	b.n += int64(n)
	if err == io.EOF {
		for k, vv := range b.resp.Trailer {
			if b.down.AddTrailer(k) != nil {
				continue // a name HTTP/1.1 forbids in trailers
			}
			for _, v := range vv {
				b.down.Add(k, v)
			}
		}
	}
	return n, err
}

func (b *httpBody) Close() error {
	if b.cutDone != nil {
		b.cutDone()
		b.cutDone = nil
	}
	err := b.ReadCloser.Close()
	b.once.Do(func() {
		if b.watch != nil {
			b.watch.BodyRelayed(b.n)
		}
		b.ep.Release()
		if b.req != nil {
			b.req.StopAttempt()
			b.req.Release()
		}
	})
	return err
}
