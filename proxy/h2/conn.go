// Package h2 is ebb's HTTP/2 server engine (RFC 9113), written on x/net's
// frame layer (http2.Framer) and HPACK decoder, not on its deprecated
// server.
//
// A connection has two goroutines of its own and one per stream while a
// handler runs:
//
//   - the read loop (Serve's goroutine) reads every frame and processes
//     it there: settings, flow control, header blocks decoded straight
//     into the stream's field list, body bytes appended to the stream's
//     buffer; no frame is handed to another goroutine;
//   - the writer gathers what is ready (control frames the read loop
//     queued, then the header blocks and body bytes of the streams with
//     output, within the flow-control windows) and writes them with one
//     system call per batch;
//   - a stream's handler (the forwarding skeleton) runs on a goroutine
//     from the moment its header block is complete until it has answered.
//
// Everything the three share is guarded by one mutex per connection
// (Conn.mu). Response header blocks are HPACK-encoded by the handler
// itself, statelessly (see hpack.go), so the writer only frames them.
//
// The drain's two-phase GOAWAY (RFC 9113 §6.8) is native: GoAway sends
// the first GOAWAY and a PING, Shutdown the final GOAWAY, and Terminate
// the final GOAWAY and a RST_STREAM(CANCEL) per open stream.
package h2

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/ebb-proxy/ebb/proxy/pace"
)

// ClientPreface is what an HTTP/2 client sends first (RFC 9113 §3.4).
const ClientPreface = http2.ClientPreface

// PrefacePrefix is the client preface's first line: on a cleartext
// listener, a connection starting with it is HTTP/2, and a preface that
// goes on differently is a broken one, not an HTTP/1.1 request.
const PrefacePrefix = "PRI * HTTP/2.0\r\n"

// NextProtoTLS is HTTP/2's ALPN protocol name (RFC 9113 §3.2).
const NextProtoTLS = http2.NextProtoTLS

// Defaults of the Server's settings.
const (
	DefaultMaxConcurrentStreams = 250
	DefaultStreamWindow         = 256 << 10
	DefaultConnWindow           = 1 << 20
	// settingsTimeout bounds the wait for the client's preface and for
	// its acknowledgement of ebb's SETTINGS.
	settingsTimeout = 10 * time.Second
	// closeLinger is how long a connection that ended gracefully (final
	// GOAWAY sent, no stream left) waits for the client to close first.
	closeLinger = time.Second
	// maxBatch is about how many bytes the writer gathers for one write.
	maxBatch = 64 << 10
	// minBatch is what the writer would rather wait to gather a little
	// more than write alone (see writeLoop).
	minBatch = 4 << 10
	// maxControl bounds the control frames (PING and SETTINGS
	// acknowledgements, RST_STREAM) queued for a client that does not
	// read them (CVE-2019-9512, CVE-2019-9515).
	maxControl = 64 << 10
	// frameSize is the largest frame payload either side sends: the
	// protocol's default, which ebb does not raise.
	frameSize = 16 << 10
	// maxEmptyRun is how many empty DATA frames without END_STREAM a
	// client may send in a row.
	maxEmptyRun = 100
	// ignoredPerStream is how many ignored frames (PRIORITY, unknown
	// types) each stream opened allows, and the connection's start too.
	ignoredPerStream = 100
)

// Handler serves the streams of a connection, each on a goroutine of its
// own. It must answer (WriteHeader, then End, or Reset) before returning;
// a stream left unanswered is reset.
type Handler interface {
	ServeStream(st *Stream)
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(st *Stream)

// ServeStream calls f(st).
func (f HandlerFunc) ServeStream(st *Stream) { f(st) }

// Server holds what every connection is configured with. Its fields are
// read-only once connections are served.
type Server struct {
	// Handler serves each stream.
	Handler Handler
	// IdleTimeout closes a connection without streams for this long
	// (with a GOAWAY); 0: never.
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds a request's decoded header list (RFC 9113
	// §6.5.2's size: names, values and 32 bytes per field); a larger one
	// is answered with 431.
	MaxHeaderBytes int
	// HeaderTimeout bounds a header block sent in several frames (from
	// its HEADERS frame to its END_HEADERS) and, until its response
	// begins, each wait of a handler for the next bytes of a request body
	// (the handler's read then fails with pace.ErrTooSlow, whose
	// Timeout() is true); 0: none.
	HeaderTimeout time.Duration
	// MinBodyRate is the rate, in bytes per second, a request body must
	// keep up while its handler waits for it before the response begins;
	// one that falls behind by more than HeaderTimeout fails the same
	// way (pace.Budget); 0: only silence is bounded.
	MinBodyRate int64
	// WriteTimeout bounds how long a stream's response may wait for the
	// client to open its flow-control window (a client that reads
	// nothing): the stream is then reset with CANCEL; 0: no bound.
	WriteTimeout time.Duration
	// MaxConcurrentStreams is advertised to clients and enforced
	// (DefaultMaxConcurrentStreams when zero).
	MaxConcurrentStreams uint32
	// StreamWindow and ConnWindow are the flow-control windows ebb grants
	// for request bodies, per stream and per connection (defaults when
	// zero).
	StreamWindow, ConnWindow uint32
	// StateChanged, if set, is told when a connection goes from idle to
	// serving streams (active) and back. c is the connection given to
	// Serve.
	StateChanged func(c net.Conn, active bool)
	// Log receives the engine's own messages (protocol errors of
	// clients, mostly), at debug level.
	Log *slog.Logger

	// Resets counts the RST_STREAM frames of every connection served.
	Resets ResetCounts

	workers workerPool // the goroutines handlers run on
}

// ResetCounts counts RST_STREAM frames by direction and error code. Its
// methods are safe for concurrent use.
type ResetCounts struct {
	sent, received [numErrCodes]atomic.Int64
}

// numErrCodes are RFC 9113's error codes, and one more slot for the codes
// it does not define.
const numErrCodes = int(http2.ErrCodeHTTP11Required) + 2

func (r *ResetCounts) add(to *[numErrCodes]atomic.Int64, code http2.ErrCode) {
	to[min(int(code), numErrCodes-1)].Add(1)
}

// Each calls f with the count of every direction ("sent" or "received")
// and error code (as RFC 9113 names it, "unknown" for the codes it does
// not define), zeros included.
func (r *ResetCounts) Each(f func(direction, code string, n int64)) {
	for i := range numErrCodes {
		name := "unknown"
		if i < numErrCodes-1 {
			name = http2.ErrCode(i).String()
		}
		f("sent", name, r.sent[i].Load())
		f("received", name, r.received[i].Load())
	}
}

func (s *Server) maxStreams() uint32 {
	if s.MaxConcurrentStreams == 0 {
		return DefaultMaxConcurrentStreams
	}
	return s.MaxConcurrentStreams
}

func (s *Server) streamWindow() int64 {
	if s.StreamWindow == 0 {
		return DefaultStreamWindow
	}
	return int64(s.StreamWindow)
}

func (s *Server) connWindow() int64 {
	if s.ConnWindow == 0 {
		return DefaultConnWindow
	}
	return max(int64(s.ConnWindow), 65535)
}

func (s *Server) maxHeaderBytes() int {
	if s.MaxHeaderBytes <= 0 {
		return 1 << 20
	}
	return s.MaxHeaderBytes
}

// Conn is one HTTP/2 connection being served.
type Conn struct {
	srv  *Server
	nc   net.Conn
	tls  bool
	ctx  context.Context // the base of every stream's context
	br   *bufio.Reader
	fr   *http2.Framer // reads frames from br
	dec  *hpack.Decoder
	done chan struct{}

	// The read loop's own.
	cur        *Stream // the stream whose header block is being decoded (nil: discarded)
	curEnd     bool    // the block's HEADERS ended the stream
	curRefuse  bool    // the block opens a stream that is refused
	curFrames  int     // CONTINUATION frames of the block so far
	curSize    int     // decoded size of the block so far
	sawRegular bool    // a regular field came in the block
	recvWindow int64   // what the client may still send on the connection
	recvUnack  int64   // bytes received, not credited back yet
	blockTimed bool    // a read deadline bounds the header block being received
	// Floods of frames that cost work and carry nothing (CVE-2019-9518):
	// emptyRun counts empty DATA frames in a row, ignoredBudget what the
	// client may still send of the frames ebb ignores (PRIORITY, unknown
	// types), earned by the streams it opens.
	emptyRun      int
	ignoredBudget int

	mu sync.Mutex
	// Guarded by mu.
	streams       map[uint32]*Stream
	maxClientID   uint32 // the highest stream id the client has used
	resetIDs      [32]uint32
	resetNext     int
	sendWindow    int64 // what the client lets us send on the connection
	peerWindow    int64 // the client's SETTINGS_INITIAL_WINDOW_SIZE
	peerFrame     int   // the client's SETTINGS_MAX_FRAME_SIZE
	pend          []byte
	spare         []byte
	wfr           *http2.Framer // writes frames into pend
	ready         []*Stream     // streams with output to send
	blocked       []*Stream     // streams waiting for the connection's window
	writerIdle    bool
	sentTableSize bool
	pingData      [8]byte
	goAwayStarted bool // the first GOAWAY was sent
	// goAwayPending: GoAway was asked before the client opened a stream;
	// the first GOAWAY goes with the first stream, with pendingGrace.
	goAwayPending bool
	pendingGrace  time.Duration
	finalGoAway   bool // the final GOAWAY was sent
	peerGoAway    bool
	closed        bool        // the connection is failing or ending: no more streams
	failed        atomic.Bool // a connection error was sent: the read loop stops
	wclose        bool        // the writer ends once everything queued is written
	abortOnExit   bool        // ... and then closes the connection
	// resetBudget is what the client may still reset of the streams it
	// opened before their answer (rapid reset, CVE-2023-44487): each such
	// reset costs one, each stream answered whole earns one back, up to
	// max_concurrent_streams. Below zero, the connection ends.
	resetBudget int
	unwinding   int       // handlers still running for streams reset under them
	running     int       // handlers running
	free        []*Stream // streams to give back to the pool at unlock (see recycleLocked)
	reported    bool      // the state last told to StateChanged: active
	stateDirty  bool      // the number of streams went to or from 0: report it (unlock)

	wake       chan struct{}
	writerDone chan struct{}
	pingAck    chan struct{} // closed when the drain's PING is acknowledged
	stateMu    sync.Mutex    // orders the calls of StateChanged
	idle       *time.Timer
	settingsT  *time.Timer
	stallT     *time.Timer // runs checkStalls (guarded by mu)
	stallAt    time.Time   // when stallT fires; zero: not armed (guarded by mu)
	handlers   sync.WaitGroup
	wg         sync.WaitGroup // the GOAWAY grace timers
}

// pendWriter appends the frames wfr writes to c.pend; it runs with c.mu
// held.
type pendWriter struct{ c *Conn }

func (w pendWriter) Write(p []byte) (int, error) {
	w.c.pend = append(w.c.pend, p...)
	return len(p), nil
}

// Serve serves HTTP/2 on nc until the connection ends, calling started
// (if not nil) with the Conn before the first byte is read. ctx is the
// base of every stream's context. nc must not have been read from (its
// client preface is read here), though bytes it replays are fine.
func (s *Server) Serve(ctx context.Context, nc net.Conn, started func(*Conn)) {
	c := &Conn{
		srv: s, nc: nc, ctx: ctx,
		br:         bufio.NewReaderSize(nc, 4<<10),
		done:       make(chan struct{}),
		streams:    make(map[uint32]*Stream),
		sendWindow: 65535, peerWindow: 65535, peerFrame: frameSize,
		recvWindow: s.connWindow(),
		wake:       make(chan struct{}, 1),
		writerDone: make(chan struct{}),
		pingAck:    make(chan struct{}),
	}
	_, c.tls = nc.(*tls.Conn)
	c.fr = http2.NewFramer(nil, c.br)
	c.fr.SetMaxReadFrameSize(frameSize)
	c.fr.SetReuseFrames()
	c.dec = hpack.NewDecoder(4096, c.emit)
	c.dec.SetMaxStringLength(s.maxHeaderBytes())
	c.wfr = http2.NewFramer(pendWriter{c}, nil)
	// The server preface: SETTINGS, and the connection's window.
	settings := []http2.Setting{
		{ID: http2.SettingMaxConcurrentStreams, Val: s.maxStreams()},
		{ID: http2.SettingInitialWindowSize, Val: uint32(s.streamWindow())},
		{ID: http2.SettingMaxHeaderListSize, Val: uint32(s.maxHeaderBytes())},
	}
	_ = c.wfr.WriteSettings(settings...)
	if inc := s.connWindow() - 65535; inc > 0 {
		_ = c.wfr.WriteWindowUpdate(0, uint32(inc))
	}
	c.resetBudget = int(s.maxStreams())
	c.ignoredBudget = ignoredPerStream
	c.settingsT = time.AfterFunc(settingsTimeout, func() { c.fatal(http2.ErrCodeSettingsTimeout, "SETTINGS not acknowledged") })
	if s.IdleTimeout > 0 {
		c.idle = time.AfterFunc(s.IdleTimeout, c.Shutdown)
	}
	if started != nil {
		started(c)
	}
	s.workers.connStarted()
	defer s.workers.connEnded()
	go c.writeLoop()
	err := c.readLoop()
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
		c.debug("connection ended", "err", err)
	}
	c.mu.Lock()
	c.closeLocked()
	c.unlock()
	// What is queued (a GOAWAY with the error) gets a moment to go out.
	_ = nc.SetWriteDeadline(time.Now().Add(closeLinger))
	<-c.writerDone
	nc.Close()
	c.settingsT.Stop()
	if c.idle != nil {
		c.idle.Stop()
	}
	c.mu.Lock()
	if c.stallT != nil {
		c.stallT.Stop()
	}
	c.mu.Unlock()
	c.handlers.Wait()
	close(c.done)
	c.wg.Wait()
	c.reportState()
}

// Streams returns the number of streams open on the connection: the
// requests in flight, for the drain's timeline.
func (c *Conn) Streams() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.streams)
}

// Done is closed when the connection has been served to its end.
func (c *Conn) Done() <-chan struct{} { return c.done }

func (c *Conn) debug(msg string, args ...any) {
	if c.srv.Log != nil {
		c.srv.Log.Debug(msg, append(args, "component", "http2")...)
	}
}

// GoAway starts the two-phase graceful shutdown of RFC 9113 §6.8: a
// GOAWAY with the highest stream id and no error ("stop opening streams;
// those on their way are still served") and a PING are sent at once; once
// the PING is acknowledged, or after grace, the final GOAWAY carries the
// real last stream id. The connection closes after its last stream.
// Calling it again does nothing.
//
// On a connection where the client has not opened a stream yet (one
// accepted during the drain, a spare one) the first GOAWAY waits for the
// first stream, which is served, or for idle to pass without one (idle
// <= 0: for the first stream only). Sent before, it would close the
// connection under the request the client dialled it for, and a client
// that has not begun a request on a connection does not expect it to end:
// Go's, for one, fails that request ("client conn could not be
// established") rather than retry it. An HTTP/1 connection accepted during
// the drain likewise serves its first request, with Connection: close.
func (c *Conn) GoAway(grace, idle time.Duration) {
	c.mu.Lock()
	defer c.unlock()
	if c.goAwayStarted || c.goAwayPending || c.finalGoAway || c.closed {
		return
	}
	c.pendingGrace = grace
	if c.maxClientID > 0 {
		c.beginGoAwayLocked()
		return
	}
	c.goAwayPending = true
	if idle <= 0 {
		return
	}
	c.wg.Go(func() {
		t := time.NewTimer(idle)
		defer t.Stop()
		select {
		case <-t.C:
		case <-c.done:
			return
		}
		c.mu.Lock()
		defer c.unlock()
		if c.goAwayPending && !c.closed {
			c.beginGoAwayLocked()
		}
	})
}

// beginGoAwayLocked sends the first GOAWAY and the PING, and has the
// final GOAWAY sent at the PING's acknowledgement or after pendingGrace.
func (c *Conn) beginGoAwayLocked() {
	c.goAwayPending = false
	c.goAwayStarted = true
	_, _ = rand.Read(c.pingData[:])
	_ = c.wfr.WriteGoAway(1<<31-1, http2.ErrCodeNo, nil)
	_ = c.wfr.WritePing(false, c.pingData)
	c.wakeLocked()
	grace := c.pendingGrace
	c.wg.Go(func() {
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-c.pingAck:
		case <-t.C:
		case <-c.done:
			return
		}
		c.Shutdown()
	})
}

// Shutdown sends the final GOAWAY (the real last stream id) now; the
// connection closes after its last stream.
func (c *Conn) Shutdown() {
	c.mu.Lock()
	defer c.unlock()
	c.finalLocked()
}

func (c *Conn) finalLocked() {
	if c.finalGoAway || c.closed {
		return
	}
	c.finalGoAway = true
	_ = c.wfr.WriteGoAway(c.maxClientID, http2.ErrCodeNo, nil)
	c.wakeLocked()
	c.maybeFinishLocked()
}

// Terminate ends the connection at once, as cleanly as that can be: the
// final GOAWAY, a RST_STREAM(CANCEL) for each stream still open, then the
// close once they are written.
func (c *Conn) Terminate() {
	c.mu.Lock()
	defer c.unlock()
	if c.closed {
		return
	}
	c.finalLocked()
	for _, st := range c.streams {
		c.resetLocked(st, http2.ErrCodeCancel, true)
	}
	c.abortOnExit = true
	_ = c.nc.SetWriteDeadline(time.Now().Add(closeLinger))
	c.closeLocked()
}

// fatal ends the connection with a connection error (RFC 9113 §5.4.1),
// from any goroutine.
func (c *Conn) fatal(code http2.ErrCode, why string) {
	c.mu.Lock()
	defer c.unlock()
	c.fatalLocked(code, why)
}

func (c *Conn) fatalLocked(code http2.ErrCode, why string) {
	if c.closed {
		return
	}
	c.debug("connection error", "code", code.String(), "reason", why)
	c.failed.Store(true)
	_ = c.wfr.WriteGoAway(c.maxClientID, code, []byte(why))
	c.finalGoAway = true
	c.abortOnExit = true
	// A writer stuck on a client that does not read gives up soon.
	_ = c.nc.SetWriteDeadline(time.Now().Add(closeLinger))
	c.closeLocked()
}

var errConnFailed = errors.New("h2: connection error sent")

// connError is a connection error the read loop ends with.
type connError struct {
	code http2.ErrCode
	why  string
}

func (e connError) Error() string { return "h2: connection error " + e.code.String() + ": " + e.why }

func (c *Conn) connErr(code http2.ErrCode, why string) error {
	c.fatal(code, why)
	return connError{code, why}
}

func (c *Conn) connErrLocked(code http2.ErrCode, why string) error {
	c.fatalLocked(code, why)
	return connError{code, why}
}

// closeLocked stops the connection: every stream is reset (without
// RST_STREAM: the connection is going), and the writer ends once what is
// queued is written.
func (c *Conn) closeLocked() {
	if c.closed {
		return
	}
	c.closed = true
	for _, st := range c.streams {
		c.resetLocked(st, http2.ErrCodeCancel, false)
	}
	c.wclose = true
	c.wakeLocked()
}

// maybeFinishLocked ends the connection gracefully once the final GOAWAY
// is out and no stream is left.
func (c *Conn) maybeFinishLocked() {
	if (c.finalGoAway || c.peerGoAway) && len(c.streams) == 0 && !c.closed {
		if !c.finalGoAway {
			c.finalLocked()
			return
		}
		c.closed = true
		c.wclose = true
		c.wakeLocked()
	}
}

// unlock gives the streams recycleLocked found free back to the pool,
// releases c.mu, then reports a change of state if there was one.
func (c *Conn) unlock() {
	for i, st := range c.free {
		st.clear()
		streamPool.Put(st)
		c.free[i] = nil
	}
	c.free = c.free[:0]
	dirty := c.stateDirty
	c.stateDirty = false
	c.mu.Unlock()
	if dirty {
		c.reportState()
	}
}

// reportState tells StateChanged whether the connection has streams.
func (c *Conn) reportState() {
	if c.srv.StateChanged == nil {
		return
	}
	c.stateMu.Lock()
	defer c.stateMu.Unlock()
	c.mu.Lock()
	active := len(c.streams) > 0
	changed := active != c.reported
	c.reported = active
	c.mu.Unlock()
	if changed {
		c.srv.StateChanged(c.nc, active)
	}
}

// readLoop reads and processes frames until the connection ends.
func (c *Conn) readLoop() error {
	_ = c.nc.SetReadDeadline(time.Now().Add(settingsTimeout))
	var pf [len(ClientPreface)]byte
	if _, err := io.ReadFull(c.br, pf[:]); err != nil {
		return err
	}
	if string(pf[:]) != ClientPreface {
		return c.connErr(http2.ErrCodeProtocol, "invalid connection preface")
	}
	first := true
	for {
		fh, err := c.fr.ReadFrameHeader()
		if err != nil {
			return c.readErr(err)
		}
		if first {
			if fh.Type != http2.FrameSettings || fh.Flags.Has(http2.FlagSettingsAck) {
				return c.connErr(http2.ErrCodeProtocol, "the client preface must end with SETTINGS")
			}
			first = false
			_ = c.nc.SetReadDeadline(time.Time{})
		}
		if err := c.process(fh); err != nil {
			return err
		}
		if c.failed.Load() {
			// A connection error found outside the frame's own handling
			// (its answers pile up unread): nothing more is read.
			return errConnFailed
		}
	}
}

// readErr turns an error of the framer into the connection error it
// means, or returns it (the connection failed).
func (c *Conn) readErr(err error) error {
	var ce http2.ConnectionError
	switch {
	case c.blockTimed && errors.Is(err, os.ErrDeadlineExceeded):
		return c.connErr(http2.ErrCodeProtocol, "header block not completed in time")
	case errors.Is(err, http2.ErrFrameTooLarge):
		return c.connErr(http2.ErrCodeFrameSize, "frame too large")
	case errors.As(err, &ce):
		return c.connErr(http2.ErrCode(ce), "malformed frame")
	}
	return err
}

// blockBufs holds buffers for header block fragments too large to be
// read in place.
var blockBufs = sync.Pool{New: func() any { b := make([]byte, frameSize); return &b }}

func (c *Conn) onBlockFrame(fh http2.FrameHeader, p []byte) error {
	if fh.Type == http2.FrameHeaders {
		return c.onHeaders(fh, p)
	}
	return c.onContinuation(fh, p)
}

// process handles one frame whose header has been read.
func (c *Conn) process(fh http2.FrameHeader) error {
	switch fh.Type {
	case http2.FrameHeaders, http2.FrameContinuation:
		if fh.Type == http2.FrameHeaders {
			c.emptyRun = 0
		}
		n := int(fh.Length)
		if n <= c.br.Size() {
			// The usual case: the payload is read in place, and consumed
			// once processed (the decoder copies what it keeps).
			p, err := c.br.Peek(n)
			if err != nil {
				return c.readErr(err)
			}
			err = c.onBlockFrame(fh, p)
			_, _ = c.br.Discard(n)
			return err
		}
		// A large block fragment: read into a pooled buffer, so that an
		// idle connection holds none.
		bp := blockBufs.Get().(*[]byte)
		defer blockBufs.Put(bp)
		p := (*bp)[:n]
		if _, err := io.ReadFull(c.br, p); err != nil {
			return c.readErr(err)
		}
		return c.onBlockFrame(fh, p)
	}
	switch fh.Type {
	case http2.FrameData:
		if fh.Length > 0 {
			c.emptyRun = 0
		} else if !fh.Flags.Has(http2.FlagDataEndStream) {
			if c.emptyRun++; c.emptyRun > maxEmptyRun {
				return c.connErr(http2.ErrCodeEnhanceYourCalm, "too many empty DATA frames")
			}
		}
	case http2.FrameSettings, http2.FramePing, http2.FrameWindowUpdate, http2.FrameRSTStream, http2.FrameGoAway, http2.FramePushPromise:
	default: // PRIORITY, and the types ebb does not know
		if c.ignoredBudget--; c.ignoredBudget < 0 {
			return c.connErr(http2.ErrCodeEnhanceYourCalm, "too many PRIORITY or unknown frames")
		}
	}
	f, err := c.fr.ReadFrameForHeader(fh)
	if err != nil {
		var se http2.StreamError
		if errors.As(err, &se) {
			return c.streamError(se.StreamID, se.Code)
		}
		return c.readErr(err)
	}
	switch f := f.(type) {
	case *http2.DataFrame:
		return c.onData(f)
	case *http2.SettingsFrame:
		return c.onSettings(f)
	case *http2.PingFrame:
		return c.onPing(f)
	case *http2.WindowUpdateFrame:
		return c.onWindowUpdate(f)
	case *http2.RSTStreamFrame:
		return c.onRSTStream(f)
	case *http2.GoAwayFrame:
		c.mu.Lock()
		c.peerGoAway = true
		c.maybeFinishLocked()
		c.unlock()
		if f.ErrCode != http2.ErrCodeNo {
			c.debug("client sent GOAWAY", "code", f.ErrCode.String(), "debug", string(f.DebugData()))
		}
	case *http2.PriorityFrame:
		if f.StreamDep == f.StreamID {
			return c.streamError(f.StreamID, http2.ErrCodeProtocol)
		}
	case *http2.PushPromiseFrame:
		return c.connErr(http2.ErrCodeProtocol, "PUSH_PROMISE from a client")
	}
	// Unknown frame types are ignored (RFC 9113 §4.1).
	return nil
}

// streamError resets stream id with code (RFC 9113 §5.4.2).
func (c *Conn) streamError(id uint32, code http2.ErrCode) error {
	c.mu.Lock()
	defer c.unlock()
	if st := c.streams[id]; st != nil {
		c.resetLocked(st, code, true)
		return nil
	}
	c.queueRSTLocked(id, code)
	return nil
}

// queueRSTLocked queues a RST_STREAM and remembers that ebb reset the
// stream: frames the client had sent on it before seeing the reset are
// ignored (RFC 9113 §5.1, "closed").
func (c *Conn) queueRSTLocked(id uint32, code http2.ErrCode) {
	if c.closed {
		return
	}
	_ = c.wfr.WriteRSTStream(id, code)
	c.srv.Resets.add(&c.srv.Resets.sent, code)
	c.resetIDs[c.resetNext] = id
	c.resetNext = (c.resetNext + 1) % len(c.resetIDs)
	c.controlLocked()
}

func (c *Conn) wasReset(id uint32) bool {
	for _, r := range c.resetIDs {
		if r == id {
			return true
		}
	}
	return false
}

// controlLocked wakes the writer for a control frame just queued, and
// ends the connection if the client lets them pile up.
func (c *Conn) controlLocked() {
	if len(c.pend) > maxControl {
		c.pend = c.pend[:0]
		c.fatalLocked(http2.ErrCodeEnhanceYourCalm, "control frames not read")
		return
	}
	c.wakeLocked()
}

// resetLocked resets st: its handler's reads and writes fail, its output
// is dropped, and (send) a RST_STREAM with code goes to the client.
func (c *Conn) resetLocked(st *Stream, code http2.ErrCode, send bool) {
	if st.reset {
		return
	}
	st.reset = true
	if !st.handlerDone {
		st.unwinding = true
		c.unwinding++
	}
	if st.inErr != io.EOF || st.inOff < len(st.in) {
		st.inErr = ErrStreamReset
	}
	st.in, st.inOff = st.in[:0], 0
	st.cancelLocked()
	st.cond.Broadcast()
	if send && !(st.localClosed && st.remoteClosed) {
		c.queueRSTLocked(st.id, code)
	}
	c.removeLocked(st)
}

// removeLocked takes st out of the connection's streams once both sides
// are done with it (or it was reset).
func (c *Conn) removeLocked(st *Stream) {
	if st.removed || !(st.reset || st.localClosed && st.remoteClosed) {
		return
	}
	st.removed = true
	delete(c.streams, st.id)
	if len(c.streams) == 0 {
		if c.idle != nil && !c.closed {
			c.idle.Reset(c.srv.IdleTimeout)
		}
		c.maybeFinishLocked()
		c.stateDirty = true
	}
	c.recycleLocked(st)
}

// onHeaders handles a HEADERS frame: a new request, or a request's
// trailers.
func (c *Conn) onHeaders(fh http2.FrameHeader, p []byte) error {
	id := fh.StreamID
	if id == 0 {
		return c.connErr(http2.ErrCodeProtocol, "HEADERS on stream 0")
	}
	pad := 0
	if fh.Flags.Has(http2.FlagHeadersPadded) {
		if len(p) < 1 {
			return c.connErr(http2.ErrCodeFrameSize, "HEADERS too short")
		}
		pad, p = int(p[0]), p[1:]
	}
	selfDep := false
	if fh.Flags.Has(http2.FlagHeadersPriority) {
		if len(p) < 5 {
			return c.connErr(http2.ErrCodeFrameSize, "HEADERS too short")
		}
		selfDep = binary.BigEndian.Uint32(p)&0x7fffffff == id
		p = p[5:]
	}
	if pad > len(p) {
		return c.connErr(http2.ErrCodeProtocol, "HEADERS padding longer than the frame")
	}
	frag := p[:len(p)-pad]
	if !fh.Flags.Has(http2.FlagHeadersEndHeaders) && c.srv.HeaderTimeout > 0 {
		// The rest of the block must come in time: nothing else may
		// come on the connection until it has (RFC 9113 §6.10).
		_ = c.nc.SetReadDeadline(time.Now().Add(c.srv.HeaderTimeout))
		c.blockTimed = true
	}
	c.cur, c.curEnd, c.curRefuse = nil, fh.Flags.Has(http2.FlagHeadersEndStream), false
	c.curFrames, c.curSize, c.sawRegular = 0, 0, false
	c.mu.Lock()
	st := c.streams[id]
	switch {
	case st != nil:
		if st.remoteClosed || st.inTrailers {
			c.unlock()
			return c.skipBlock(fh, frag, func() error { return c.streamError(id, http2.ErrCodeStreamClosed) })
		}
		st.decoding = true // until endTrailers
		c.unlock()
		st.inTrailers = true
		c.cur = st
	case id%2 == 0:
		c.unlock()
		return c.connErr(http2.ErrCodeProtocol, "stream id from a client must be odd")
	case id <= c.maxClientID:
		reset := c.wasReset(id)
		c.unlock()
		if reset {
			return c.skipBlock(fh, frag, nil)
		}
		return c.connErr(http2.ErrCodeProtocol, "HEADERS on a closed stream")
	default:
		c.maxClientID = id
		if c.goAwayPending && !c.finalGoAway && !c.closed {
			// The first stream of a connection told to go away before
			// it had one: it is served, and the GOAWAY goes now.
			c.beginGoAwayLocked()
		}
		ignore := c.finalGoAway || c.peerGoAway || c.closed
		// Handlers of reset streams still unwinding count as streams:
		// resets never let more handlers run than the limit.
		refuse := uint32(len(c.streams)+c.unwinding) >= c.srv.maxStreams()
		c.unlock()
		if ignore {
			// Streams after the final GOAWAY are ignored (RFC 9113
			// §6.8); their header block must still be decoded.
			return c.skipBlock(fh, frag, nil)
		}
		if selfDep {
			return c.skipBlock(fh, frag, func() error { return c.streamError(id, http2.ErrCodeProtocol) })
		}
		c.curRefuse = refuse
		c.cur = c.newStream(id)
		c.ignoredBudget = min(c.ignoredBudget+ignoredPerStream, 100*ignoredPerStream)
	}
	return c.block(fh.Flags.Has(http2.FlagHeadersEndHeaders), frag)
}

// skipBlock decodes a header block whose fields are not wanted (HPACK's
// table must stay in step), then runs then if not nil.
func (c *Conn) skipBlock(fh http2.FrameHeader, frag []byte, then func() error) error {
	c.cur = nil
	if err := c.block(fh.Flags.Has(http2.FlagHeadersEndHeaders), frag); err != nil {
		return err
	}
	if then != nil && fh.Flags.Has(http2.FlagHeadersEndHeaders) {
		return then()
	}
	return nil
}

// onContinuation handles a CONTINUATION frame; the framer has checked
// that it follows a HEADERS or CONTINUATION frame of its stream without
// END_HEADERS.
func (c *Conn) onContinuation(fh http2.FrameHeader, p []byte) error {
	c.curFrames++
	// CONTINUATION floods (CVE-2024-27316): a block's frames are bounded
	// by what limits.max_header_bytes needs, empty ones included.
	if c.curFrames > 4+c.srv.maxHeaderBytes()/1024 {
		return c.connErr(http2.ErrCodeEnhanceYourCalm, "too many CONTINUATION frames")
	}
	return c.block(fh.Flags.Has(http2.FlagContinuationEndHeaders), p)
}

// block decodes a header block fragment; at the block's end it completes
// the request or its trailers.
func (c *Conn) block(end bool, frag []byte) error {
	if _, err := c.dec.Write(frag); err != nil {
		return c.connErr(http2.ErrCodeCompression, "HPACK: "+err.Error())
	}
	if !end {
		return nil
	}
	if c.blockTimed {
		c.blockTimed = false
		_ = c.nc.SetReadDeadline(time.Time{})
	}
	if err := c.dec.Close(); err != nil {
		return c.connErr(http2.ErrCodeCompression, "HPACK: "+err.Error())
	}
	st := c.cur
	c.cur = nil
	if st == nil {
		return nil
	}
	if st.inTrailers {
		return c.endTrailers(st)
	}
	return c.endRequest(st)
}

// emit receives each decoded field of the block being decoded.
func (c *Conn) emit(f hpack.HeaderField) {
	st := c.cur
	if st == nil {
		return
	}
	c.curSize += int(f.Size())
	if c.curSize > c.srv.maxHeaderBytes() {
		st.tooLarge = true
	}
	if st.tooLarge || st.malformed != "" {
		return
	}
	if f.IsPseudo() {
		if st.inTrailers {
			st.malformed = "pseudo-header field in trailers"
			return
		}
		if c.sawRegular {
			st.malformed = "pseudo-header field after a regular one"
			return
		}
		var bit uint8
		switch f.Name {
		case ":method":
			bit = 1
		case ":scheme":
			bit = 2
		case ":authority":
			bit = 4
		case ":path":
			bit = 8
		default:
			st.malformed = "unknown pseudo-header field " + f.Name
			return
		}
		if st.pseudoSeen&bit != 0 {
			st.malformed = "repeated " + f.Name
			return
		}
		st.pseudoSeen |= bit
		st.pseudo.add(f.Name, f.Value)
		return
	}
	c.sawRegular = true
	if why := checkField(f.Name, f.Value); why != "" {
		st.malformed = why
		return
	}
	if st.inTrailers {
		st.trailers.add(f.Name, f.Value)
		return
	}
	switch f.Name {
	case "content-length":
		n, ok := parseLength(f.Value)
		if !ok || st.contentLength >= 0 && st.contentLength != n {
			st.malformed = "invalid content-length"
			return
		}
		st.contentLength = n
	case "expect":
		if asciiEqualFold(f.Value, "100-continue") {
			st.expectContinue = true
		}
	}
	st.fields.add(f.Name, f.Value)
}

// checkField returns why a regular field makes a request malformed (RFC
// 9113 §8.2), or "".
func checkField(name, value string) string {
	for i := 0; i < len(name); i++ {
		if c := name[i]; 'A' <= c && c <= 'Z' {
			return "upper-case field name"
		}
	}
	if !httpguts.ValidHeaderFieldName(name) {
		return "invalid field name"
	}
	if !httpguts.ValidHeaderFieldValue(value) {
		return "invalid field value in " + name
	}
	// RFC 9113 §8.2.1: a value must not start or end with whitespace
	// (HTTP/1.1's parsers would trim it, so two hops would disagree).
	if n := len(value); n > 0 && (isSpace(value[0]) || isSpace(value[n-1])) {
		return "whitespace around the value of " + name
	}
	if connectionSpecific(name) {
		return "connection-specific field " + name
	}
	if name == "te" && value != "trailers" {
		return "te other than trailers"
	}
	return ""
}

// isSpace reports whether b is whitespace a field value may hold inside
// it but not at its ends (SP, HTAB: RFC 9110 §5.5).
func isSpace(b byte) bool { return b == ' ' || b == '\t' }

func parseLength(s string) (int64, bool) {
	if s == "" || len(s) > 18 {
		return 0, false
	}
	var n int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

func asciiEqualFold(s, t string) bool {
	if len(s) != len(t) {
		return false
	}
	for i := 0; i < len(s); i++ {
		a, b := s[i], t[i]
		if 'A' <= a && a <= 'Z' {
			a += 'a' - 'A'
		}
		if a != b {
			return false
		}
	}
	return true
}

// newStream makes the stream a HEADERS frame opens.
func (c *Conn) newStream(id uint32) *Stream {
	st, _ := streamPool.Get().(*Stream)
	if st == nil {
		st = new(Stream)
		st.stopWatch = st.unwatch
	}
	st.c, st.id, st.contentLength, st.recvWindow = c, id, -1, c.srv.streamWindow()
	st.inPace = pace.New(c.srv.MinBodyRate, c.srv.HeaderTimeout)
	st.cond.L = &c.mu
	return st
}

// recycleLocked gives st back to the pool once nothing refers to it: its
// handler has returned, it has left c.streams, the writer's queues and the
// read loop, and nothing outside the engine may hold it (st.keep).
func (c *Conn) recycleLocked(st *Stream) {
	if !st.handlerDone || !st.removed || st.queued || st.blocked || st.decoding || st.keep {
		return
	}
	// Pooled by unlock, so that every check of this critical section
	// sees the stream as it is, kept (st.keep).
	st.keep = true
	c.free = append(c.free, st)
}

// endRequest completes a request's header block: it is validated, then
// served by the handler, answered by the engine (431), or refused.
func (c *Conn) endRequest(st *Stream) error {
	if st.malformed == "" && !st.tooLarge {
		st.malformed = st.setPseudo()
	}
	if st.malformed == "" && !st.tooLarge && c.curEnd && st.contentLength > 0 {
		// RFC 9113 §8.1.1: the content (none: the HEADERS frame ended
		// the stream) must be as long as the content-length says.
		st.malformed = "content-length with no content"
	}
	c.mu.Lock()
	defer c.unlock()
	if c.closed {
		return nil
	}
	if st.malformed != "" {
		c.debug("malformed request", "stream", st.id, "reason", st.malformed)
		c.queueRSTLocked(st.id, http2.ErrCodeProtocol)
		st.clear()
		streamPool.Put(st)
		return nil
	}
	if c.curRefuse {
		c.queueRSTLocked(st.id, http2.ErrCodeRefusedStream)
		st.clear()
		streamPool.Put(st)
		// A client that opens more streams than allowed spends the
		// budget rapid resets spend: refusing costs little, but not
		// nothing.
		if c.resetBudget--; c.resetBudget < 0 {
			return c.connErrLocked(http2.ErrCodeEnhanceYourCalm, "too many streams refused")
		}
		return nil
	}
	st.sendWindow = c.peerWindow
	c.streams[st.id] = st
	if len(c.streams) == 1 {
		if c.idle != nil {
			c.idle.Stop()
		}
		c.stateDirty = true
	}
	st.hasBody = !c.curEnd
	if c.curEnd {
		st.remoteClosed, st.inErr = true, io.EOF
	}
	if st.tooLarge {
		// Answered here: the handler would see a truncated request.
		st.hq = appendStatus(st.hq, 431)
		st.hq = appendField(st.hq, []byte("content-length"), "0")
		st.hqItems = append(st.hqItems, headerItem{n: len(st.hq), end: true})
		st.finalSent, st.outEnd, st.handlerDone = true, true, true
		st.rstWanted = !st.remoteClosed
		st.cancelLocked()
		c.queueLocked(st)
		return nil
	}
	c.handlers.Add(1)
	c.running++
	c.srv.workers.serve(st)
	return nil
}

// setPseudo checks the request's pseudo-header fields (RFC 9113 §8.3.1)
// and keeps them; it returns why they are malformed, or "".
func (st *Stream) setPseudo() string {
	st.method = st.pseudo.Get(":method")
	st.scheme = st.pseudo.Get(":scheme")
	st.path = st.pseudo.Get(":path")
	st.authority = st.pseudo.Get(":authority")
	if st.authority == nil {
		st.authority = st.fields.Get("host")
	}
	if len(st.method) == 0 {
		return "no :method"
	}
	for _, b := range st.method {
		if !httpguts.IsTokenRune(rune(b)) {
			return "invalid :method"
		}
	}
	if string(st.method) == "CONNECT" {
		if st.scheme != nil || st.path != nil || len(st.authority) == 0 {
			return "CONNECT with :scheme or :path, or without :authority"
		}
		return ""
	}
	if len(st.scheme) == 0 {
		return "no :scheme"
	}
	if !validScheme(st.scheme) {
		return "invalid :scheme"
	}
	if len(st.path) == 0 {
		return "no :path"
	}
	if st.path[0] != '/' && !(string(st.path) == "*" && string(st.method) == "OPTIONS") {
		return "invalid :path"
	}
	for _, b := range st.path {
		if b <= ' ' || b == 0x7f {
			return "invalid :path"
		}
	}
	for _, b := range st.authority {
		if b <= ' ' || b == 0x7f || b == '/' || b == '?' || b == '#' || b == '@' {
			return "invalid :authority"
		}
	}
	// RFC 9113 §8.3.1: a host field that names another target than
	// :authority makes the request malformed (a server SHOULD refuse it):
	// ebb routes on :authority, and an upstream that reads host would
	// see another request. Without :authority the first host is the
	// authority, and a second one must agree with it.
	for i := range st.fields.Len() {
		if name, value := st.fields.At(i); string(name) == "host" && !bytes.EqualFold(value, st.authority) {
			return "host other than :authority"
		}
	}
	return ""
}

// validScheme reports whether s is a URI scheme (RFC 3986 §3.1):
// ALPHA *( ALPHA / DIGIT / "+" / "-" / "." ).
func validScheme(s []byte) bool {
	for i, b := range s {
		switch {
		case 'a' <= b && b <= 'z', 'A' <= b && b <= 'Z':
		case i > 0 && ('0' <= b && b <= '9' || b == '+' || b == '-' || b == '.'):
		default:
			return false
		}
	}
	return len(s) > 0
}

// endTrailers completes a request's trailers: the body has ended.
func (c *Conn) endTrailers(st *Stream) error {
	c.mu.Lock()
	defer c.unlock()
	st.decoding = false
	if !c.curEnd || st.malformed != "" || st.tooLarge {
		c.resetLocked(st, http2.ErrCodeProtocol, true)
	} else {
		c.endBodyLocked(st)
	}
	c.recycleLocked(st)
	return nil
}

// endBodyLocked marks st's body as ended, checking it against its
// content-length.
func (c *Conn) endBodyLocked(st *Stream) {
	if st.reset {
		return
	}
	if st.contentLength >= 0 && st.received != st.contentLength {
		c.resetLocked(st, http2.ErrCodeProtocol, true)
		return
	}
	st.remoteClosed = true
	st.inErr = io.EOF
	st.cond.Broadcast()
	c.removeLocked(st)
}

// onData handles a DATA frame: flow control, then the bytes go to the
// stream's body.
func (c *Conn) onData(f *http2.DataFrame) error {
	id, n := f.StreamID, int64(f.Length)
	if n > c.recvWindow {
		return c.connErr(http2.ErrCodeFlowControl, "DATA beyond the connection's window")
	}
	// The connection's window is credited back as soon as bytes arrive:
	// each stream's own window bounds what ebb holds.
	c.recvWindow -= n
	c.recvUnack += n
	c.mu.Lock()
	defer c.unlock()
	if c.recvUnack >= c.srv.connWindow()/4 {
		_ = c.wfr.WriteWindowUpdate(0, uint32(c.recvUnack))
		c.recvWindow += c.recvUnack
		c.recvUnack = 0
		c.controlLocked()
	}
	st := c.streams[id]
	if st == nil {
		if id > c.maxClientID {
			return c.connErrLocked(http2.ErrCodeProtocol, "DATA on an idle stream")
		}
		if !c.wasReset(id) {
			c.queueRSTLocked(id, http2.ErrCodeStreamClosed)
		}
		return nil
	}
	if st.remoteClosed {
		c.resetLocked(st, http2.ErrCodeStreamClosed, true)
		return nil
	}
	if n > st.recvWindow {
		c.resetLocked(st, http2.ErrCodeFlowControl, true)
		return nil
	}
	st.recvWindow -= n
	data := f.Data()
	// Padding is credited back at once; so is everything once the
	// handler no longer reads.
	st.unacked += n - int64(len(data))
	st.received += int64(len(data))
	if st.contentLength >= 0 && st.received > st.contentLength {
		c.resetLocked(st, http2.ErrCodeProtocol, true)
		return nil
	}
	if st.handlerDone || st.bodyClosed {
		st.unacked += int64(len(data))
	} else if len(data) > 0 {
		if st.inOff > 0 && st.inOff == len(st.in) {
			st.in, st.inOff = st.in[:0], 0
		} else if st.inOff > cap(st.in)/2 {
			k := copy(st.in, st.in[st.inOff:])
			st.in, st.inOff = st.in[:k], 0
		}
		st.in = append(st.in, data...)
		var waited time.Duration
		if !st.inStall.IsZero() {
			waited = time.Since(st.inStall)
		}
		st.inPace.Waited(waited, len(data))
		st.inStall = time.Time{}
		st.cond.Broadcast()
	}
	if f.StreamEnded() {
		c.endBodyLocked(st)
		return nil
	}
	c.creditLocked(st)
	return nil
}

// creditLocked gives the client back the stream window it used, in
// steps of a quarter window (at once when nobody reads the body any
// more): the client always has three quarters of a window to send on.
func (c *Conn) creditLocked(st *Stream) {
	if st.unacked == 0 || st.remoteClosed || st.reset || st.unacked < c.srv.streamWindow()/4 && !st.handlerDone && !st.bodyClosed {
		return
	}
	_ = c.wfr.WriteWindowUpdate(st.id, uint32(st.unacked))
	st.recvWindow += st.unacked
	st.unacked = 0
	c.controlLocked()
}

func (c *Conn) onSettings(f *http2.SettingsFrame) error {
	if f.IsAck() {
		c.settingsT.Stop()
		return nil
	}
	err := f.ForeachSetting(func(s http2.Setting) error {
		if err := s.Valid(); err != nil {
			return err
		}
		switch s.ID {
		case http2.SettingInitialWindowSize:
			c.mu.Lock()
			delta := int64(s.Val) - c.peerWindow
			c.peerWindow = int64(s.Val)
			for _, st := range c.streams {
				st.sendWindow += delta
				if st.sendWindow > 1<<31-1 {
					c.unlock()
					return http2.ConnectionError(http2.ErrCodeFlowControl)
				}
				if delta > 0 && st.outOff < len(st.out) {
					c.queueLocked(st)
				}
			}
			c.unlock()
		case http2.SettingMaxFrameSize:
			c.mu.Lock()
			c.peerFrame = int(min(s.Val, frameSize))
			c.unlock()
		}
		// HEADER_TABLE_SIZE: the encoder uses no dynamic table; ENABLE_PUSH:
		// ebb never pushes; the others are advisory.
		return nil
	})
	if err != nil {
		var ce http2.ConnectionError
		if errors.As(err, &ce) {
			return c.connErr(http2.ErrCode(ce), "invalid SETTINGS")
		}
		return c.connErr(http2.ErrCodeProtocol, "invalid SETTINGS")
	}
	c.mu.Lock()
	defer c.unlock()
	_ = c.wfr.WriteSettingsAck()
	c.controlLocked()
	return nil
}

func (c *Conn) onPing(f *http2.PingFrame) error {
	if f.StreamID != 0 {
		return c.connErr(http2.ErrCodeProtocol, "PING on a stream")
	}
	c.mu.Lock()
	defer c.unlock()
	if f.IsAck() {
		if c.goAwayStarted && f.Data == c.pingData {
			select {
			case <-c.pingAck:
			default:
				close(c.pingAck)
			}
		}
		return nil
	}
	_ = c.wfr.WritePing(true, f.Data)
	c.controlLocked()
	return nil
}

func (c *Conn) onWindowUpdate(f *http2.WindowUpdateFrame) error {
	inc := int64(f.Increment)
	c.mu.Lock()
	defer c.unlock()
	if f.StreamID == 0 {
		c.sendWindow += inc
		if c.sendWindow > 1<<31-1 {
			return c.connErrLocked(http2.ErrCodeFlowControl, "connection window above 2^31-1")
		}
		for _, st := range c.blocked {
			st.blocked = false
			if st.reset {
				c.recycleLocked(st)
				continue
			}
			c.queueLocked(st)
		}
		c.blocked = c.blocked[:0]
		return nil
	}
	st := c.streams[f.StreamID]
	if st == nil {
		if f.StreamID > c.maxClientID {
			return c.connErrLocked(http2.ErrCodeProtocol, "WINDOW_UPDATE on an idle stream")
		}
		return nil // a closed stream: allowed for a while
	}
	st.sendWindow += inc
	if st.sendWindow > 1<<31-1 {
		c.resetLocked(st, http2.ErrCodeFlowControl, true)
		return nil
	}
	if st.outOff < len(st.out) || st.outEnd && !st.localClosed {
		c.queueLocked(st)
	}
	return nil
}

func (c *Conn) onRSTStream(f *http2.RSTStreamFrame) error {
	c.srv.Resets.add(&c.srv.Resets.received, f.ErrCode)
	c.mu.Lock()
	defer c.unlock()
	st := c.streams[f.StreamID]
	if st == nil {
		if f.StreamID > c.maxClientID {
			return c.connErrLocked(http2.ErrCodeProtocol, "RST_STREAM on an idle stream")
		}
		return nil
	}
	if !st.handlerDone {
		// A reset before the answer: the upstream request is cancelled
		// (the stream's context), and it counts against the budget.
		c.resetBudget--
		if c.resetBudget < 0 {
			return c.connErrLocked(http2.ErrCodeEnhanceYourCalm, "too many streams reset before their answer")
		}
	}
	c.resetLocked(st, f.ErrCode, false)
	return nil
}

// serveStream runs the handler for st, and makes sure the stream is
// answered.
// It runs on a worker's goroutine, and is the last to touch st there.
func (c *Conn) serveStream(st *Stream) {
	defer c.handlers.Done()
	defer c.handlerDone(st)
	defer func() {
		if r := recover(); r != nil && c.srv.Log != nil {
			// A bug of ebb's: the stream is reset, the connection and
			// the process live on.
			c.srv.Log.Error("HTTP/2 stream handler panicked", "stream", st.id, "panic", r, "stack", string(debug.Stack()))
		}
	}()
	c.srv.Handler.ServeStream(st)
}

// handlerDone is what happens when a stream's handler returns: an
// unanswered stream is reset; an answered one whose body is still coming
// is reset (NO_ERROR) once the answer is out, so the client stops sending
// (RFC 9113 §8.1).
func (c *Conn) handlerDone(st *Stream) {
	c.mu.Lock()
	defer c.unlock()
	st.handlerDone = true
	c.running--
	if st.unwinding {
		c.unwinding--
	}
	st.cancelLocked()
	defer c.recycleLocked(st)
	if st.reset {
		return
	}
	if st.outEnd && c.resetBudget < int(c.srv.maxStreams()) {
		c.resetBudget++
	}
	if !st.outEnd {
		c.resetLocked(st, http2.ErrCodeInternal, true)
		return
	}
	// Bytes not read are credited back: nobody will read them.
	st.unacked += int64(len(st.in) - st.inOff)
	st.in, st.inOff = st.in[:0], 0
	if !st.remoteClosed {
		st.rstWanted = true
		if st.localClosed {
			c.resetLocked(st, http2.ErrCodeNo, true)
		}
	}
}

// armStallLocked makes checkStalls run by at.
func (c *Conn) armStallLocked(at time.Time) {
	if !c.stallAt.IsZero() && !at.Before(c.stallAt) {
		return
	}
	c.stallAt = at
	if c.stallT == nil {
		c.stallT = time.AfterFunc(time.Until(at), c.checkStalls)
		return
	}
	c.stallT.Reset(time.Until(at))
}

// checkStalls ends what has waited on the client for too long: a
// handler's wait for request body bytes fails (the handler answers 408),
// and a stream whose response has waited for a flow-control window is
// reset (the client's memory of it, not ebb's, is what it then lacks).
func (c *Conn) checkStalls() {
	c.mu.Lock()
	defer c.unlock()
	c.stallAt = time.Time{}
	if c.closed {
		return
	}
	now := time.Now()
	var next time.Time
	for _, st := range c.streams {
		if st.finalSent && !st.inStall.IsZero() {
			// The response began while the handler waited: the rest of
			// the body is the upstream's business.
			st.inStall = time.Time{}
		}
		for _, w := range [2]struct {
			since *time.Time
			limit time.Duration
		}{{&st.inStall, st.inPace.Left()}, {&st.outStall, c.srv.WriteTimeout}} {
			if w.since.IsZero() {
				continue
			}
			if end := w.since.Add(w.limit); now.Before(end) {
				if next.IsZero() || end.Before(next) {
					next = end
				}
				continue
			}
			*w.since = time.Time{}
			if w.since == &st.inStall {
				c.debug("request body stalled or too slow", "stream", st.id)
				st.inErr, st.bodyClosed = pace.ErrTooSlow, true
				st.cond.Broadcast()
				continue
			}
			c.debug("response stalled: the client's window stayed closed", "stream", st.id)
			c.resetLocked(st, http2.ErrCodeCancel, true)
			break
		}
	}
	if !next.IsZero() {
		c.armStallLocked(next)
	}
}

// queueLocked puts st among the streams with output for the writer.
func (c *Conn) queueLocked(st *Stream) {
	if !st.queued {
		st.queued = true
		c.ready = append(c.ready, st)
	}
	c.wakeLocked()
}

func (c *Conn) wakeLocked() {
	if c.writerIdle {
		c.writerIdle = false
		select {
		case c.wake <- struct{}{}:
		default:
		}
	}
}

// writeLoop is the connection's writer: it gathers what is queued into
// one buffer and writes it in one system call, batch after batch.
func (c *Conn) writeLoop() {
	defer close(c.writerDone)
	yielded := false
	for {
		c.mu.Lock()
		c.fillLocked()
		if len(c.pend) > 0 && len(c.pend) < minBatch && c.running > 0 && !yielded && !c.wclose {
			// Little to write while handlers are still at work: those
			// about to queue more get to run first, so that one system
			// call carries what several of them answer (grpc-go's writer
			// does the same). With none running, nothing is coming.
			yielded = true
			c.unlock()
			runtime.Gosched()
			continue
		}
		yielded = false
		if len(c.pend) == 0 {
			if c.wclose {
				abort := c.abortOnExit
				c.unlock()
				c.endWrites(abort)
				return
			}
			c.writerIdle = true
			c.unlock()
			<-c.wake
			continue
		}
		buf := c.pend
		c.pend, c.spare = c.spare[:0], nil
		c.unlock()
		_, err := c.nc.Write(buf)
		c.mu.Lock()
		if cap(buf) <= 2*maxBatch {
			c.spare = buf[:0]
		}
		if err != nil {
			c.closeLocked()
			c.pend = c.pend[:0]
			c.unlock()
			c.nc.Close()
			return
		}
		c.unlock()
	}
}

// endWrites ends the connection's sending side once the writer is done:
// closing it when the connection failed; otherwise half-closing it (the
// final GOAWAY is out, no stream is left) and giving the client a moment
// to close first, so that nothing it sent crosses a close (a reset).
func (c *Conn) endWrites(abort bool) {
	if abort {
		c.nc.Close()
		return
	}
	if cw, ok := c.nc.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	_ = c.nc.SetReadDeadline(time.Now().Add(closeLinger))
}

// fillLocked moves the output of ready streams into c.pend, within the
// flow-control windows and about maxBatch bytes.
func (c *Conn) fillLocked() {
	i := 0
	for ; i < len(c.ready) && len(c.pend) < maxBatch; i++ {
		st := c.ready[i]
		st.queued = false
		c.emitLocked(st)
		c.recycleLocked(st)
	}
	n := copy(c.ready, c.ready[i:])
	clear(c.ready[n:])
	c.ready = c.ready[:n]
}

// emitLocked frames what st has to send.
func (c *Conn) emitLocked(st *Stream) {
	if st.reset {
		st.hq, st.hqItems = st.hq[:0], st.hqItems[:0]
		st.out, st.outOff = nil, 0
		return
	}
	off := 0
	for _, it := range st.hqItems {
		c.writeBlockLocked(st.id, st.hq[off:off+it.n], it.end)
		off += it.n
		if it.end {
			st.localClosed = true
		}
	}
	st.hq, st.hqItems = st.hq[:0], st.hqItems[:0]
	sent, stalled := false, false
	for st.outOff < len(st.out) {
		if len(c.pend) >= maxBatch {
			c.queueLocked(st)
			break
		}
		n := int(min(int64(len(st.out)-st.outOff), st.sendWindow, c.sendWindow, int64(c.peerFrame)))
		if n <= 0 {
			if c.sendWindow <= 0 && !st.blocked {
				st.blocked = true
				c.blocked = append(c.blocked, st)
			}
			stalled = true
			break // the stream's window: its WINDOW_UPDATE queues it again
		}
		end := st.outEnd && st.outOff+n == len(st.out) && len(st.trailerBlk) == 0
		_ = c.wfr.WriteData(st.id, end, st.out[st.outOff:st.outOff+n])
		st.outOff += n
		st.sendWindow -= int64(n)
		c.sendWindow -= int64(n)
		sent = true
		if end {
			st.localClosed = true
		}
	}
	if st.outOff == len(st.out) {
		st.out, st.outOff = st.out[:0], 0
	}
	if st.outEnd && st.outOff == len(st.out) && !st.localClosed {
		if len(st.trailerBlk) > 0 {
			c.writeBlockLocked(st.id, st.trailerBlk, true)
		} else {
			_ = c.wfr.WriteData(st.id, true, nil)
		}
		st.localClosed = true
	}
	if sent {
		st.outStall = time.Time{}
		st.cond.Broadcast()
	}
	if stalled && st.outStall.IsZero() && c.srv.WriteTimeout > 0 {
		st.outStall = time.Now()
		c.armStallLocked(st.outStall.Add(c.srv.WriteTimeout))
	}
	if st.localClosed {
		if st.rstWanted && !st.remoteClosed {
			c.resetLocked(st, http2.ErrCodeNo, true)
			return
		}
		c.removeLocked(st)
	}
}

// writeBlockLocked frames a header block: HEADERS, then CONTINUATION
// frames if it is larger than a frame.
func (c *Conn) writeBlockLocked(id uint32, blk []byte, end bool) {
	if !c.sentTableSize {
		// The first block says the dynamic table is empty and stays so.
		c.sentTableSize = true
		b := make([]byte, 0, len(blk)+1)
		blk = append(append(b, tableSizeZero), blk...)
	}
	n := min(len(blk), c.peerFrame)
	_ = c.wfr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: blk[:n], EndStream: end, EndHeaders: n == len(blk)})
	for blk = blk[n:]; len(blk) > 0; blk = blk[n:] {
		n = min(len(blk), c.peerFrame)
		_ = c.wfr.WriteContinuation(id, n == len(blk), blk[:n])
	}
}
