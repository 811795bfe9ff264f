package proxytest

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// RefusingH2C is an HTTP/2 (h2c) upstream that processes nothing: it
// answers each request's HEADERS with RST_STREAM(REFUSED_STREAM), or with
// GOAWAY whose last stream is 0, and reports each request on the channel.
func RefusingH2C(t testing.TB, goAway bool) (addr string, refused <-chan uint32) {
	return ResettingH2C(t, goAway, http2.ErrCodeRefusedStream)
}

// ResettingH2C is RefusingH2C resetting each stream with code.
func ResettingH2C(t testing.TB, goAway bool, code http2.ErrCode) (addr string, refused <-chan uint32) {
	return H2CResetter(t, goAway, code, false)
}

// H2CResetter is ResettingH2C; with atData, it resets a stream only once
// a DATA frame of its request has come, the rest of the body still to
// come.
func H2CResetter(t testing.TB, goAway bool, code http2.ErrCode, atData bool) (addr string, refused <-chan uint32) {
	r := make(chan uint32, 64)
	addr = H2CFrames(t, false, func(c *H2CConn, f http2.Frame) bool {
		switch f := f.(type) {
		case *http2.HeadersFrame:
			select {
			case r <- f.StreamID:
			default: // the test fails on the count
			}
			if goAway {
				// As a server does once the streams it kept are done, and
				// closing as one does: reading what the client still sends
				// (the request's DATA frames) until it closes. Closing with
				// those unread would send a reset, which can destroy the
				// GOAWAY before the client reads it.
				c.Fr.WriteGoAway(0, http2.ErrCodeNo, nil)
				if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
					cw.CloseWrite()
				}
				io.Copy(io.Discard, c.Reader)
				return false
			}
			if !atData {
				c.Fr.WriteRSTStream(f.StreamID, code)
			}
		case *http2.DataFrame:
			if atData && len(f.Data()) > 0 {
				c.Fr.WriteRSTStream(f.StreamID, code)
			}
		}
		return true
	})
	return addr, r
}

// H2CConn is one connection of an H2CFrames origin.
type H2CConn struct {
	Conn   net.Conn
	Reader *bufio.Reader // what the framer reads from
	Fr     *http2.Framer
	hbuf   bytes.Buffer
	enc    *hpack.Encoder
}

// Block HPACK-encodes fields (names as given, which may break HTTP/2's
// rules) into a header block, valid until the next call.
func (c *H2CConn) Block(fields [][2]string) []byte {
	c.hbuf.Reset()
	for _, f := range fields {
		_ = c.enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	return c.hbuf.Bytes()
}

// H2CFrames is an HTTP/2 (h2c) origin frame by frame: on each connection
// it reads the client preface, sends its SETTINGS, acknowledges the
// client's SETTINGS and PINGs, and hands every other frame (the
// acknowledgements of its own PINGs included) to handle, on
// the connection's one goroutine (with metaHeaders, header blocks come
// decoded whole, as *http2.MetaHeadersFrame). handle returning false ends
// the connection. The connections a client keeps open end with the test.
func H2CFrames(t testing.TB, metaHeaders bool, handle func(c *H2CConn, f http2.Frame) bool) string {
	return H2CFramesWith(t, nil, metaHeaders, handle)
}

// H2CFramesWith is H2CFrames sending settings in its SETTINGS frame.
func H2CFramesWith(t testing.TB, settings []http2.Setting, metaHeaders bool, handle func(c *H2CConn, f http2.Frame) bool) string {
	return HostileOrigin(t, func(c net.Conn, br *bufio.Reader) {
		preface := make([]byte, len(http2.ClientPreface))
		if _, err := io.ReadFull(br, preface); err != nil || string(preface) != http2.ClientPreface {
			return
		}
		hc := &H2CConn{Conn: c, Reader: br, Fr: http2.NewFramer(c, br)}
		hc.enc = hpack.NewEncoder(&hc.hbuf)
		if metaHeaders {
			hc.Fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
		}
		if hc.Fr.WriteSettings(settings...) != nil {
			return
		}
		for {
			f, err := hc.Fr.ReadFrame()
			if err != nil {
				return
			}
			switch f := f.(type) {
			case *http2.SettingsFrame:
				if !f.IsAck() && hc.Fr.WriteSettingsAck() != nil {
					return
				}
			case *http2.PingFrame:
				if f.IsAck() {
					if !handle(hc, f) {
						return
					}
				} else if hc.Fr.WritePing(true, f.Data) != nil {
					return
				}
			default:
				if !handle(hc, f) {
					return
				}
			}
		}
	})
}

// H2CServer serves h with net/http's HTTP/2 server, cleartext (h2c), on
// a loopback port for the test's duration; h2 (may be nil) configures it.
func H2CServer(t testing.TB, h2 *http.HTTP2Config, h http.Handler) string {
	return startH2CServer(t, h2, h).Addr
}

// H2CServerShutdown is H2CServer with the server's graceful shutdown
// (http.Server.Shutdown): the listener closed, a GOAWAY on each
// connection with the last stream the server has read, and each
// connection closed once its streams are done; shutdown returns when they
// all are. An HTTP/2 connection stays active to Shutdown, which never
// closes it before its GOAWAY as it closes idle HTTP/1 connections.
func H2CServerShutdown(t testing.TB, h http.Handler) (addr string, shutdown func(ctx context.Context) error) {
	srv := startH2CServer(t, nil, h)
	return srv.Addr, srv.Shutdown
}

// startH2CServer starts H2CServer's server, its Addr set to the one it
// listens on.
func startH2CServer(t testing.TB, h2 *http.HTTP2Config, h http.Handler) *http.Server {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	srv := &http.Server{Addr: ln.Addr().String(), Protocols: &protocols, HTTP2: h2, Handler: h}
	var serving sync.WaitGroup
	serving.Go(func() { srv.Serve(ln) })
	t.Cleanup(func() { srv.Close(); serving.Wait() })
	return srv
}

// EchoH2C is an HTTP/2 (h2c) upstream that answers with the request's
// method and body.
func EchoH2C(t testing.TB) string {
	return H2CServer(t, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		io.WriteString(w, r.Method+" "+string(body))
	}))
}
