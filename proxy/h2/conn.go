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
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
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
