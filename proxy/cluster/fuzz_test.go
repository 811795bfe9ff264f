package cluster_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/ebb-proxy/ebb/config"
	"github.com/ebb-proxy/ebb/proxy/cluster"
	"github.com/ebb-proxy/ebb/proxy/downstream"
	"github.com/ebb-proxy/ebb/proxy/pace"
	"github.com/ebb-proxy/ebb/proxy/proxytest"
	"github.com/ebb-proxy/ebb/proxy/upstream"
)

// The bounds of an execution of FuzzH2UpstreamFrames.
const (
	// fuzzResponseTimeout is the cluster's timeouts.response (net/http's
	// ResponseHeaderTimeout) while fuzzing: what an origin that leaves a
	// response unfinished costs an execution (an exchange and its body
	// are given four times as long). A loopback exchange takes well under
	// a millisecond; one that takes longer only fails, which the checks
	// allow.
	fuzzResponseTimeout = 5 * time.Millisecond
	// fuzzBodyRead is as much of a response body as the test reads.
	fuzzBodyRead = 256 << 10
)

// FuzzH2UpstreamFrames has an h2c origin answer the first stream of an
// execution with frames built from the fuzzer's bytes (records: see
// recBarrier), or with the bytes as they are; any other stream it answers
// properly, with a body of its own that the fuzzer cannot know (a token
// drawn per execution). Request 1 (GET, HEAD, or POST with a body) and
// then request 2 (GET) go through cluster.ExchangeHTTP, on ebb's HTTP/2
// client (package h2client) as an h2c cluster has it:
// request 2 on the same connection when it survives, and only once the
// client has read the whole answer to request 1 (the origin follows it
// with a PING and waits for its acknowledgement; after bytes that are not
// frames, for the connection's end). Whatever the frames: no panic;
// request 1 gets no interim status as its final one; request 2 gets an
// error or exactly its own answer; no exchange is left counted in flight.
// Each exchange is bounded by its context. The seeds are h2Seeds;
// testdata/fuzz holds what fuzzing found beyond them.
func FuzzH2UpstreamFrames(f *testing.F) {
	for _, s := range h2Seeds() {
		f.Add(s.method, s.raw, s.closeAfter, s.frames)
	}
	o := newH2FuzzOrigin(f)
	// The fuzzing must reach the paths it is for: after a sound answer,
	// request 2 goes on the same connection.
	ok := h2Rec(0x81, flagEndHeaders, selStream, h2Fields(":status", "200")) + h2Rec(0, flagEndStream, selStream, "ok")
	if conns := o.exchange(f, time.Second, fuzzGET, false, false, []byte(ok)); conns != 1 {
		f.Fatalf("a sound answer: %d connections, want 1", conns)
	}
	f.Fuzz(func(t *testing.T, method uint8, raw, closeAfter bool, frames []byte) {
		if len(frames) > 64<<10 {
			return
		}
		o.exchange(t, fuzzResponseTimeout, method, raw, closeAfter, frames)
	})
}

// Request 1's method is the fuzzer's method byte modulo 3.
const (
	fuzzGET = iota
	fuzzHEAD
	fuzzPOST
)

// The frames of request 1's answer are a sequence of records: type,
// flags, stream selector, a two-byte length and the payload. A type with
// its high bit set has for payload a list of fields (each a length byte
// and a name, a length byte and a value), HPACK-encoded with the
// connection's encoder, in a frame of the type without that bit; type
// 0xff is no frame, but a wait until the test has the response to
// request 1 (what follows arrives later).
const (
	recBarrier = 0xff
	recFields  = 0x80
)

// Stream selectors; any other value is the stream of that number.
const (
	selConn   = iota // stream 0
	selStream        // the stream of request 1
	selNext          // the next stream the client will open
	selPush          // stream 2, as if the origin had pushed
)

// Frame flags the seeds use.
const (
	flagEndStream  = 0x1
	flagAck        = 0x1
	flagEndHeaders = 0x4
	flagPadded     = 0x8
	flagPriority   = 0x20
)

type h2Seed struct {
	method          uint8
	raw, closeAfter bool
	frames          []byte
}

// h2Rec is one record of request 1's answer.
func h2Rec(typ, flags, sel byte, payload string) string {
	return string([]byte{typ, flags, sel, byte(len(payload) >> 8), byte(len(payload))}) + payload
}

// h2Fields is the payload of a record whose type has recFields set.
func h2Fields(kv ...string) string {
	var b strings.Builder
	for _, s := range kv {
		b.WriteByte(byte(len(s)))
		b.WriteString(s)
	}
	return b.String()
}

// h2Seeds are answers that break, or could break, an HTTP/2 client's
// framing or the stream a response belongs to.
func h2Seeds() []h2Seed {
	rec, fields := h2Rec, h2Fields
	headers := func(flags, sel byte, kv ...string) string {
		return rec(0x80|0x1, flagEndHeaders|flags, sel, fields(kv...))
	}
	data := func(flags, sel byte, s string) string { return rec(0x0, flags, sel, s) }
	u32 := func(v uint32) string { return string(binary.BigEndian.AppendUint32(nil, v)) }
	setting := func(id uint16, v uint32) string { return string(binary.BigEndian.AppendUint16(nil, id)) + u32(v) }
	ok := headers(0, selStream, ":status", "200", "content-length", "5") + data(flagEndStream, selStream, "hello")
	smuggled := headers(0, selNext, ":status", "200", "content-length", "8") + data(flagEndStream, selNext, "SMUGGLED")

	// A raw conversation, as the origin would write it.
	var raw bytes.Buffer
	fr := http2.NewFramer(&raw, nil)
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	_ = enc.WriteField(hpack.HeaderField{Name: ":status", Value: "200"})
	_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true})
	_ = fr.WriteData(1, true, []byte("raw"))

	seeds := []h2Seed{
		{frames: []byte(ok)},
		{method: fuzzHEAD, frames: []byte(headers(flagEndStream, selStream, ":status", "200", "content-length", "5"))},
		{method: fuzzPOST, frames: []byte(ok)},
		{frames: []byte(ok), closeAfter: true},
		// Trailers, interim answers, and a 101 nobody asked for.
		{frames: []byte(headers(0, selStream, ":status", "200", "trailer", "x-t") + data(0, selStream, "hello") + headers(flagEndStream, selStream, "x-t", "1"))},
		{frames: []byte(headers(0, selStream, ":status", "103", "link", "</a>; rel=preload") + headers(0, selStream, ":status", "100") + ok)},
		{frames: []byte(headers(flagEndStream, selStream, ":status", "101", "upgrade", "websocket"))},
		{frames: []byte(strings.Repeat(headers(0, selStream, ":status", "100"), 6) + ok)},
		// RFC 9113 §8.2.2: connection-specific fields.
		{frames: []byte(headers(flagEndStream, selStream, ":status", "200", "connection", "keep-alive"))},
		{frames: []byte(headers(flagEndStream, selStream, ":status", "200", "transfer-encoding", "chunked"))},
		// Malformed responses (RFC 9113 §8.1.1).
		{frames: []byte(headers(flagEndStream, selStream, "x-no-status", "1"))},
		{frames: []byte(headers(flagEndStream, selStream, ":status", "200", ":path", "/"))},
		{frames: []byte(headers(flagEndStream, selStream, ":status", "2000"))},
		{frames: []byte(headers(flagEndStream, selStream, ":status", "200", "X-Upper", "1"))},
		{frames: []byte(headers(0, selStream, ":status", "200", "content-length", "3") + data(flagEndStream, selStream, "hello"))},
		{frames: []byte(headers(0, selStream, ":status", "200", "content-length", "8") + data(flagEndStream, selStream, "hello"))},
		{method: fuzzHEAD, frames: []byte(headers(0, selStream, ":status", "200") + data(flagEndStream, selStream, "SMUGGLED"))},
		{frames: []byte(headers(0, selStream, ":status", "204") + data(flagEndStream, selStream, "SMUGGLED"))},
		// Frames for a stream the client has not opened yet, the one
		// request 2 will have: before, with, and after request 1's answer.
		{frames: []byte(smuggled + ok)},
		{frames: []byte(ok + smuggled)},
		{frames: []byte(headers(0, selStream, ":status", "200") + string([]byte{recBarrier}) + smuggled + data(flagEndStream, selStream, "hello"))},
		{frames: []byte(ok + string([]byte{recBarrier}) + smuggled)},
		{frames: []byte(ok + data(flagEndStream, selNext, "SMUGGLED"))},
		// After the stream's end; on stream 0; on a pushed stream.
		{frames: []byte(ok + data(flagEndStream, selStream, "SMUGGLED") + headers(flagEndStream, selStream, ":status", "200"))},
		{frames: []byte(data(0, selConn, "x") + ok)},
		{frames: []byte(rec(0x80|0x5, flagEndHeaders, selStream, "\x00\x00\x00\x02\x82\x86\x84") + ok)},
		{frames: []byte(headers(0, selPush, ":status", "200") + ok)},
		// The stream refused or reset, the connection going away.
		{frames: []byte(rec(0x3, 0, selStream, u32(uint32(http2.ErrCodeRefusedStream))))},
		{frames: []byte(rec(0x3, 0, selStream, u32(uint32(http2.ErrCodeCancel))))},
		{frames: []byte(headers(0, selStream, ":status", "200") + rec(0x3, 0, selStream, u32(uint32(http2.ErrCodeInternal))))},
		{frames: []byte(rec(0x7, 0, selConn, u32(0)+u32(uint32(http2.ErrCodeNo))))},
		{frames: []byte(ok + rec(0x7, 0, selConn, u32(1)+u32(uint32(http2.ErrCodeProtocol))+"debug")), closeAfter: true},
		// Settings, pings, windows, priorities, unknown frames.
		{frames: []byte(rec(0x4, 0, selConn, setting(uint16(http2.SettingMaxConcurrentStreams), 0)+setting(uint16(http2.SettingInitialWindowSize), 0)) + ok)},
		{method: fuzzPOST, frames: []byte(rec(0x4, 0, selConn, setting(uint16(http2.SettingInitialWindowSize), 1<<31)) + ok)},
		{frames: []byte(rec(0x4, 0, selConn, setting(uint16(http2.SettingHeaderTableSize), 0)) + rec(0x4, flagAck, selConn, "") + ok)},
		{frames: []byte(rec(0x6, 0, selConn, "12345678") + rec(0x6, flagAck, selConn, "12345678") + ok)},
		{frames: []byte(rec(0x8, 0, selConn, u32(1<<31-1)) + rec(0x8, 0, selStream, u32(1<<31-1)) + ok)},
		{frames: []byte(rec(0x8, 0, selStream, u32(0)) + rec(0x2, 0, selStream, u32(0)+"\x10") + ok)},
		{frames: []byte(rec(0xfa, 0, selStream, "unknown") + ok)},
		// Padding and priority in HEADERS and DATA; CONTINUATION.
		{frames: []byte(rec(0x1, flagEndHeaders|flagPadded|flagPriority, selStream, "\x02\x00\x00\x00\x00\x10\x88\x00\x00") + rec(0x0, flagEndStream|flagPadded, selStream, "\x03hey\x00\x00\x00"))},
		{frames: []byte(rec(0x81, 0, selStream, fields(":status", "200")) + rec(0x89, 0, selStream, fields("x-a", "1")) + rec(0x89, flagEndHeaders, selStream, fields("content-length", "2")) + data(flagEndStream, selStream, "ok"))},
		{frames: []byte(rec(0x81, 0, selStream, fields(":status", "200")) + data(flagEndStream, selStream, "ok"))},
		// An HPACK block that does not decode, and a large one.
		{frames: []byte(rec(0x1, flagEndHeaders, selStream, "\xff\xff\xff\xff"))},
		{frames: []byte(headers(flagEndStream, selStream, ":status", "200", "x-big", strings.Repeat("v", 250)) + ok)},
		// Bytes, not frames.
		{raw: true, frames: raw.Bytes()},
		{raw: true, frames: []byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")},
	}
	return seeds
}

// h2FuzzOrigin is the h2c origin of FuzzH2UpstreamFrames (see
// proxytest.FuzzOrigin and proxytest.FuzzExec): it answers request 1 of
// the current execution with the execution's frames. Its connections are
// closed at the end of each execution (the cluster has let go of its own
// by then).
type h2FuzzOrigin struct {
	*proxytest.FuzzOrigin
	cur atomic.Pointer[h2Exec]
	n   atomic.Uint64 // executions so far
}

// h2Exec is one execution: what the origin answers, and when. The
// fields above over are read-only once the execution is current; conns
// is shared by the test and the origin's goroutines.
type h2Exec struct {
	*proxytest.FuzzExec
	frames     []byte
	raw        bool
	closeAfter bool
	// ping is the payload of the PING that follows the answer to request
	// 1: its acknowledgement says the client has read every frame before
	// it (a client reads frames in order).
	ping [8]byte

	over  chan struct{} // closed at the execution's end
	conns atomic.Int32  // connections that carried a request
}

func newH2FuzzOrigin(tb testing.TB) *h2FuzzOrigin {
	o := &h2FuzzOrigin{}
	o.FuzzOrigin = proxytest.NewFuzzOrigin(tb, o.serve)
	return o
}

func (o *h2FuzzOrigin) serve(c net.Conn, br *bufio.Reader) {
	preface := make([]byte, len(http2.ClientPreface))
	if _, err := io.ReadFull(br, preface); err != nil || string(preface) != http2.ClientPreface {
		return
	}
	hc := &h2Conn{c: c, bw: bufio.NewWriter(c)}
	hc.fr = http2.NewFramer(hc.bw, br)
	hc.fr.AllowIllegalWrites = true
	hc.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	hc.enc = hpack.NewEncoder(&hc.hb)
	if hc.fr.WriteSettings() != nil || hc.flush() != nil {
		return
	}
	var answered *h2Exec // the execution whose request 1 this connection answered
	defer func() {
		if answered != nil {
			answered.Deliver()
		}
	}()
	counted := false
	for {
		f, err := hc.fr.ReadFrame()
		if err != nil {
			return
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				err = hc.fr.WriteSettingsAck()
			}
		case *http2.PingFrame:
			switch {
			case !f.IsAck():
				err = hc.fr.WritePing(true, f.Data)
			case answered != nil && f.Data == answered.ping:
				answered.Deliver()
				if answered.closeAfter {
					return
				}
			}
		case *http2.MetaHeadersFrame:
			x := o.cur.Load()
			path := f.PseudoValue("path")
			if x == nil {
				return
			}
			n, ok := x.Request(path)
			if !ok {
				return
			}
			if !counted {
				counted = true
				x.conns.Add(1)
			}
			if n == 1 && x.Take() {
				answered = x
				err = hc.answer(x, f.StreamID)
			} else {
				err = hc.writeAnswer(f.StreamID, f.PseudoValue("method") == http.MethodHead, x.Token+path)
			}
		}
		if err == nil {
			err = hc.flush()
		}
		if err != nil {
			return
		}
	}
}

// h2Conn is the origin's side of a connection.
type h2Conn struct {
	c   net.Conn
	bw  *bufio.Writer
	fr  *http2.Framer // writes to bw
	hb  bytes.Buffer
	enc *hpack.Encoder // of the fuzzer's fields, into hb
}

// flush writes out what the framer wrote. A client that stopped reading
// (it may be writing acknowledgements the origin does not read while it
// writes its answer) fails the write in time.
func (hc *h2Conn) flush() error {
	if err := hc.c.SetWriteDeadline(time.Now().Add(time.Second)); err != nil {
		return err
	}
	return hc.bw.Flush()
}

// writeAnswer answers stream id properly. Its fields are encoded without
// the dynamic table, which the fuzzer's blocks may have changed under
// the connection's encoder.
func (hc *h2Conn) writeAnswer(id uint32, head bool, body string) error {
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	enc.SetMaxDynamicTableSize(0)
	_ = enc.WriteField(hpack.HeaderField{Name: ":status", Value: "200"})
	_ = enc.WriteField(hpack.HeaderField{Name: "content-length", Value: strconv.Itoa(len(body))})
	if err := hc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hb.Bytes(), EndHeaders: true, EndStream: head}); err != nil || head {
		return err
	}
	return hc.fr.WriteData(id, true, []byte(body))
}

// errOver: the execution ended while the origin waited.
var errOver = errors.New("the execution is over")

// answer writes the answer of execution x to request 1, on stream id,
// from the fuzzer's bytes, and then the PING whose acknowledgement says
// the client has read it all.
func (hc *h2Conn) answer(x *h2Exec, id uint32) error {
	if x.raw {
		if _, err := hc.bw.Write(x.frames); err != nil {
			return err
		}
		if err := hc.fr.WritePing(false, x.ping); err != nil {
			return err
		}
		if err := hc.flush(); err != nil {
			return err
		}
		// The bytes may leave the client inside a frame, reading the
		// PING as its payload: the end of the connection ends its wait.
		return hc.c.(*net.TCPConn).CloseWrite()
	}
	for in := x.frames; len(in) > 0; {
		typ := in[0]
		in = in[1:]
		if typ == recBarrier {
			if err := hc.flush(); err != nil {
				return err
			}
			select {
			case <-x.Release:
			case <-x.over:
				return errOver
			}
			continue
		}
		if len(in) < 4 {
			break
		}
		flags, sel, size := in[0], in[1], int(in[2])<<8|int(in[3])
		in = in[4:]
		payload := in[:min(size, len(in))]
		in = in[len(payload):]
		if typ&recFields != 0 {
			typ &^= recFields
			hc.hb.Reset()
			for p := payload; len(p) > 0; {
				var name, value []byte
				name, p = lengthPrefixed(p)
				value, p = lengthPrefixed(p)
				_ = hc.enc.WriteField(hpack.HeaderField{Name: string(name), Value: string(value)})
			}
			payload = hc.hb.Bytes()
		}
		if err := hc.fr.WriteRawFrame(http2.FrameType(typ), http2.Flags(flags), stream(sel, id), payload); err != nil {
			return err
		}
	}
	return hc.fr.WritePing(false, x.ping)
}

// lengthPrefixed splits the bytes a length byte at the start of p
// announces from the rest.
func lengthPrefixed(p []byte) (field, rest []byte) {
	if len(p) == 0 {
		return nil, nil
	}
	n := min(int(p[0]), len(p)-1)
	return p[1 : 1+n], p[1+n:]
}

// stream is the stream a selector names, request 1 being on stream id.
func stream(sel byte, id uint32) uint32 {
	switch sel {
	case selConn:
		return 0
	case selStream:
		return id
	case selNext:
		return id + 2
	case selPush:
		return 2
	}
	return uint32(sel)
}

// exchange runs one execution, the cluster's timeouts.response being
// timeout: request 1 (method) answered with frames (raw: as they are),
// the connection closed after them if closeAfter; then request 2. It
// returns the connections that carried the execution's requests.
func (o *h2FuzzOrigin) exchange(tb testing.TB, timeout time.Duration, method uint8, raw, closeAfter bool, frames []byte) (conns int) {
	tb.Helper()
	x := &h2Exec{FuzzExec: proxytest.NewFuzzExec(o.n.Add(1)), frames: frames, raw: raw, closeAfter: closeAfter, over: make(chan struct{})}
	binary.BigEndian.PutUint64(x.ping[:], rand.Uint64())
	o.cur.Store(x)
	defer func() {
		o.cur.CompareAndSwap(x, nil)
		close(x.over)
		o.CloseConns()
	}()
	defer x.ReleaseFirst() // whatever happens: the origin may wait for it

	cfg := proxytest.Cluster(o.Addr)
	cfg.Protocol = config.ProtocolH2C
	cfg.Timeouts.Response = timeout
	c := cluster.New(cfg, nil, downstream.NewRegistry(), proxytest.Discard())
	defer c.Close()
	input := func() string {
		return fmt.Sprintf("method %d, raw %v, close %v, frames %q", method%3, raw, closeAfter, frames)
	}

	// Request 1.
	var m string
	var body *upstream.Body
	switch method % 3 {
	case fuzzGET:
		m = http.MethodGet
	case fuzzHEAD:
		m = http.MethodHead
	case fuzzPOST:
		m = http.MethodPost
		body = upstream.AcquireBody(strings.NewReader("hello"), nil, 0, 5, pace.Budget{})
		defer body.Release()
		if err := body.Fill(); err != nil {
			tb.Fatal(err)
		}
	}
	status, _, err := send(c, m, fmt.Sprintf("/%d/1", x.ID), body)
	x.ReleaseFirst()
	if err == nil && status < 200 {
		tb.Fatalf("an interim status %d as the final answer, for %s", status, input())
	}
	if x.PastFirst() {
		select {
		case <-x.Delivered:
		case <-time.After(proxytest.WaitTimeout):
			tb.Fatalf("the client never read the answer to request 1, for %s", input())
		}
	}

	// Request 2: an error, or its own answer.
	path := fmt.Sprintf("/%d/2", x.ID)
	if status, got, err := send(c, http.MethodGet, path, nil); err == nil {
		if want := x.Token + path; status != 200 || string(got) != want {
			tb.Fatalf("request 2 got %d %q, want 200 %q, for %s", status, got, want, input())
		}
	}
	for _, ep := range c.State().Endpoints {
		if ep.InFlight != 0 {
			tb.Fatalf("%d exchanges still in flight once both ended, for %s", ep.InFlight, input())
		}
	}
	return int(x.conns.Load())
}

// send exchanges one request with the cluster's endpoint, as the engines
// do, within four times the cluster's timeouts.response, and reads the
// response's body (up to fuzzBodyRead); err is the exchange's failure,
// not the body's.
func send(c *cluster.Cluster, method, path string, body *upstream.Body) (status int, got []byte, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*c.Config().Timeouts.Response)
	defer cancel()
	ep := c.Pick()
	out := (&http.Request{
		Method: method,
		URL:    &url.URL{Scheme: c.Scheme(), Host: ep.Addr(), Path: path},
		Host:   "example.com",
		Header: http.Header{},
	}).WithContext(ctx)
	if body != nil {
		out.ContentLength = 5
	}
	resp, ep, err := c.ExchangeHTTP(ctx, ep, out, body, nil, &cluster.Trip{}, proxytest.Discard())
	if err != nil {
		body.StopAttempt()
		return 0, nil, err
	}
	got, _ = io.ReadAll(io.LimitReader(resp.Body, fuzzBodyRead))
	resp.Body.Close()
	ep.Release()
	body.StopAttempt()
	return resp.StatusCode, got, nil
}
