// One connection to the upstream: its handshake, its read loop and the
// frames that concern the whole connection (SETTINGS, PING, GOAWAY,
// WINDOW_UPDATE), its timer (PING when silent, close when idle), its end.

package h2client

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/ebb-proxy/ebb/proxy/h2/wire"
	"github.com/ebb-proxy/ebb/proxy/sock"
	"github.com/ebb-proxy/ebb/proxy/upstream"
)

const (
	// frameSize is the largest frame payload ebb sends or accepts: the
	// protocol's default, which ebb does not raise.
	frameSize = 16 << 10
	// initialMaxStreams is how many streams a connection carries before
	// the peer's SETTINGS says (RFC 9113 §6.5.2 recommends no fewer than
	// 100); the handshake waits for them, so it is seldom used.
	initialMaxStreams = 100
	// maxControl bounds the control frames (PING and SETTINGS
	// acknowledgements, RST_STREAM) queued for a peer that sends them
	// faster than it reads their answers (CVE-2019-9512, CVE-2019-9515).
	maxControl = 64 << 10
	// maxPend bounds what stream writers queue for the writer before
	// they wait for it: the windows bound it too, this bounds it when
	// the peer opens them wide.
	maxPend = 256 << 10
	// maxBatch is about how many bytes the writer writes at once.
	maxBatch = 64 << 10
	// minBatch is what the writer would rather wait to gather a little
	// more than write alone (see writeLoop).
	minBatch = 4 << 10
	// writeTimeout bounds one write of the connection (to between half
	// of it and all of it: see writeLoop): a peer that stops reading
	// ends its connection.
	writeTimeout = 30 * time.Second
	// closeLinger bounds the wait of a connection closed gracefully (its
	// GOAWAY written) for the peer to close first.
	closeLinger = time.Second
)

// conn is one HTTP/2 connection to the endpoint.
type conn struct {
	p          *Pool
	nc         net.Conn
	sio        sock.IO // reads and writes nc (see package sock)
	br         *bufio.Reader
	fr         *http2.Framer // reads frames from br
	dec        *hpack.Decoder
	done       chan struct{} // closed when the read loop has returned
	writerDone chan struct{}
	timer      *time.Timer
	lastRead   atomic.Int64 // unix nanoseconds of the last frame read

	// Guarded by the pool's mu.
	slots      int    // streams open or reserved
	maxStreams uint32 // the peer's SETTINGS_MAX_CONCURRENT_STREAMS

	// The read loop's own.
	blk        headerBlock
	recvWindow int64       // what the peer may still send on the connection
	recvUnack  int64       // bytes received, not credited back yet
	idleRun    int         // frames in a row that carried no response (see idleFrame)
	sentData   atomic.Bool // DATA went up since the last idle frame

	mu sync.Mutex
	// Guarded by mu.
	streams       map[uint32]*Stream
	nextID        uint32
	sendWindow    int64 // what the peer lets us send on the connection
	peerWindow    int64 // the peer's SETTINGS_INITIAL_WINDOW_SIZE
	peerFrame     int   // the largest frame payload ebb sends
	pend          []byte
	spare         []byte
	wfr           *http2.Framer // writes frames into pend
	wake          chan struct{}
	writerIdle    bool
	wcond         sync.Cond // stream writers waiting for a window or for the writer
	sentTableSize bool
	goAway        bool // the peer's GOAWAY came: no new stream
	retiring      bool // ebb closes it once its streams are done
	closed        bool // failed or closing: no new stream, nothing more written but pend
	wclose        bool // the writer closes the connection once pend is written
	err           error
	idleSince     time.Time
	pingOut       bool
	pingAt        time.Time
	pingData      [8]byte
	control       int         // bytes of control frames in pend
	toRelease     int         // slots to give back to the pool at unlock
	toClose       []io.Closer // request bodies to close at unlock
}

// pendWriter appends what wfr writes to c.pend; used with c.mu held.
type pendWriter struct{ c *conn }

func (w pendWriter) Write(b []byte) (int, error) {
	w.c.pend = append(w.c.pend, b...)
	return len(b), nil
}

// dial opens a connection and makes the HTTP/2 handshake: ebb's preface,
// SETTINGS and connection window, then the peer's SETTINGS, which must
// come first (RFC 9113 §3.4). A failure is a connect failure: no request
// went out.
func (p *Pool) dial(ctx context.Context) (*conn, error) {
	nc, err := p.cfg.Dial(ctx)
	if err != nil {
		return nil, err
	}
	// A small read buffer: frame headers and small frames come through
	// it several at a time, and the Framer reads a large payload past it
	// straight into its own buffer. An idle connection costs less so
	// (BenchmarkIdleConnMemory: 10.7 KB with it, 21.9 KB with 16 KiB).
	c := &conn{
		p: p, nc: nc,
		done: make(chan struct{}), writerDone: make(chan struct{}), wake: make(chan struct{}, 1),
		maxStreams: initialMaxStreams, streams: make(map[uint32]*Stream), nextID: 1,
		sendWindow: 65535, peerWindow: 65535, peerFrame: frameSize,
		recvWindow: int64(p.cfg.ConnWindow), idleSince: time.Now(),
	}
	c.wcond.L = &c.mu
	c.sio.Init(nc)
	c.br = bufio.NewReaderSize(&c.sio, 4<<10)
	c.fr = http2.NewFramer(nil, c.br)
	c.fr.SetMaxReadFrameSize(frameSize)
	c.dec = hpack.NewDecoder(4096, c.blk.field)
	c.dec.SetMaxStringLength(p.cfg.MaxHeaderBytes)
	c.blk.c = c
	c.wfr = http2.NewFramer(pendWriter{c}, nil)
	c.lastRead.Store(time.Now().UnixNano())
	if err := c.handshake(ctx); err != nil {
		nc.Close()
		return nil, &upstream.Error{Kind: upstream.KindConnect, Err: fmt.Errorf("HTTP/2 handshake: %w", err)}
	}
	// The timer exists before anything that may stop it runs, and runs
	// only once it is stored.
	c.timer = time.AfterFunc(time.Hour, c.tick)
	c.timer.Reset(c.tickEvery())
	go c.readLoop()
	go c.writeLoop()
	return c, nil
}

func (c *conn) handshake(ctx context.Context) error {
	deadline := time.Now().Add(c.p.cfg.ConnectTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = c.nc.SetDeadline(deadline)
	c.pend = append(c.pend, http2.ClientPreface...)
	_ = c.wfr.WriteSettings(
		http2.Setting{ID: http2.SettingEnablePush, Val: 0},
		http2.Setting{ID: http2.SettingInitialWindowSize, Val: uint32(c.p.cfg.StreamWindow)},
		http2.Setting{ID: http2.SettingMaxFrameSize, Val: frameSize},
		http2.Setting{ID: http2.SettingMaxHeaderListSize, Val: uint32(c.p.cfg.MaxHeaderBytes)},
	)
	if inc := int64(c.p.cfg.ConnWindow) - 65535; inc > 0 {
		_ = c.wfr.WriteWindowUpdate(0, uint32(inc))
	}
	if _, err := c.nc.Write(c.pend); err != nil {
		return err
	}
	c.pend = c.pend[:0]
	f, err := c.fr.ReadFrame()
	if err != nil {
		return err
	}
	sf, ok := f.(*http2.SettingsFrame)
	if !ok || sf.IsAck() {
		return fmt.Errorf("the upstream's first frame is %v, not SETTINGS", f.Header().Type)
	}
	if err := c.onSettings(sf); err != nil {
		return err
	}
	return c.nc.SetDeadline(time.Time{})
}

// reserveLocked reserves a stream slot, if the connection takes new
// streams and has room; p.mu is held.
func (c *conn) reserveLocked() bool {
	if c.slots >= int(c.maxStreams) {
		return false
	}
	c.slots++
	return true
}

// unlock releases c.mu, then gives back the slots of the streams that
// ended meanwhile, and closes the connection if it was waiting for its
// last stream.
func (c *conn) unlock() {
	n, closers := c.toRelease, c.toClose
	c.toRelease, c.toClose = 0, nil
	c.mu.Unlock()
	if n > 0 {
		c.p.mu.Lock()
		c.slots -= n
		c.p.wakeLocked()
		c.p.mu.Unlock()
	}
	for _, b := range closers {
		_ = b.Close()
	}
}

// readLoop reads and processes every frame until the connection ends.
func (c *conn) readLoop() {
	defer close(c.done)
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			var se http2.StreamError
			if errors.As(err, &se) {
				c.mu.Lock()
				if st := c.streams[se.StreamID]; st != nil {
					c.resetLocked(st, se.Code, &upstream.Error{Kind: upstream.KindInvalid, Err: se})
				}
				c.unlock()
				continue
			}
			c.fail(readError(err))
			return
		}
		c.lastRead.Store(time.Now().UnixNano())
		if err := c.process(f); err != nil {
			c.fail(err)
			return
		}
	}
}

// maxIdleRun is how many frames in a row may carry nothing of a
// response (PING, SETTINGS, PRIORITY, unknown types, empty DATA): an
// upstream has no use for more, a flood (CVE-2019-9512, -9515, -9518)
// does.
const maxIdleRun = 1000

// idleFrame counts a frame that carried nothing of a response. A
// request body going up restarts the count: gRPC servers answer the DATA
// they receive with PINGs (to estimate the bandwidth-delay product).
func (c *conn) idleFrame() error {
	if c.sentData.Load() && c.sentData.Swap(false) {
		c.idleRun = 0
	}
	c.idleRun++
	if c.idleRun > maxIdleRun {
		return connError{http2.ErrCodeEnhanceYourCalm, "frames that carry nothing, in a row"}
	}
	return nil
}

// process handles one frame; an error ends the connection.
func (c *conn) process(f http2.Frame) error {
	switch f.(type) {
	case *http2.HeadersFrame, *http2.ContinuationFrame, *http2.DataFrame, *http2.WindowUpdateFrame, *http2.RSTStreamFrame, *http2.GoAwayFrame:
		// DATA counts itself (see onData).
	default:
		if err := c.idleFrame(); err != nil {
			return err
		}
	}
	switch f := f.(type) {
	case *http2.DataFrame:
		return c.onData(f)
	case *http2.HeadersFrame:
		c.idleRun = 0
		return c.blk.start(f)
	case *http2.ContinuationFrame:
		return c.blk.more(f.HeaderBlockFragment(), f.HeadersEnded())
	case *http2.RSTStreamFrame:
		return c.onReset(f)
	case *http2.SettingsFrame:
		if f.IsAck() {
			return nil
		}
		return c.onSettings(f)
	case *http2.PingFrame:
		return c.onPing(f)
	case *http2.GoAwayFrame:
		c.onGoAway(f)
	case *http2.WindowUpdateFrame:
		return c.onWindowUpdate(f)
	case *http2.PushPromiseFrame:
		// SETTINGS_ENABLE_PUSH is 0 (RFC 9113 §6.6).
		return connError{http2.ErrCodeProtocol, "PUSH_PROMISE with push disabled"}
	}
	// PRIORITY and frames of unknown types are ignored (§5.5).
	return nil
}

// connError is a connection error ebb detects (RFC 9113 §5.4.1): the
// connection ends with a GOAWAY carrying code.
type connError struct {
	code http2.ErrCode
	why  string
}

func (e connError) Error() string {
	return fmt.Sprintf("upstream HTTP/2 connection error %v: %s", e.code, e.why)
}

// readError turns the read loop's error into the connection's.
func readError(err error) error {
	var ce http2.ConnectionError
	if errors.As(err, &ce) {
		return connError{http2.ErrCode(ce), err.Error()}
	}
	if errors.Is(err, http2.ErrFrameTooLarge) {
		return connError{http2.ErrCodeFrameSize, "frame larger than SETTINGS_MAX_FRAME_SIZE"}
	}
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

func (c *conn) onSettings(f *http2.SettingsFrame) error {
	err := f.ForeachSetting(func(s http2.Setting) error {
		if err := s.Valid(); err != nil {
			return err
		}
		switch s.ID {
		case http2.SettingMaxConcurrentStreams:
			c.p.mu.Lock()
			c.maxStreams = s.Val
			c.p.wakeLocked()
			c.p.mu.Unlock()
		case http2.SettingInitialWindowSize:
			c.mu.Lock()
			delta := int64(s.Val) - c.peerWindow
			c.peerWindow = int64(s.Val)
			for _, st := range c.streams {
				st.sendWindow += delta
				if st.sendWindow > wire.MaxWindow {
					c.mu.Unlock()
					return http2.ConnectionError(http2.ErrCodeFlowControl)
				}
			}
			c.wcond.Broadcast()
			c.mu.Unlock()
		}
		// HEADER_TABLE_SIZE: ebb's encoder uses no dynamic table;
		// MAX_FRAME_SIZE: ebb sends frames of the default size, which
		// every peer takes; the others are advisory.
		return nil
	})
	if err != nil {
		return connError{wire.SettingsErrCode(err), "invalid SETTINGS"}
	}
	c.mu.Lock()
	defer c.unlock()
	_ = c.wfr.WriteSettingsAck()
	return c.controlLocked(9)
}

// controlLocked wakes the writer for a control frame of n bytes just
// queued, and ends the connection if the peer lets them pile up.
func (c *conn) controlLocked(n int) error {
	c.control += n
	if c.control > maxControl {
		return connError{http2.ErrCodeEnhanceYourCalm, "control frames sent faster than their answers are read"}
	}
	c.wakeLocked()
	return nil
}

func (c *conn) onPing(f *http2.PingFrame) error {
	c.mu.Lock()
	defer c.unlock()
	if f.IsAck() {
		if c.pingOut && f.Data == c.pingData {
			c.pingOut = false
		}
		return nil
	}
	_ = c.wfr.WritePing(true, f.Data)
	return c.controlLocked(17)
}

// onGoAway: no new stream goes on the connection; those above the last
// stream id were not processed and fail so (the retry policy sends them
// again, elsewhere); those below finish.
func (c *conn) onGoAway(f *http2.GoAwayFrame) {
	c.p.mu.Lock()
	c.p.removeLocked(c)
	c.p.mu.Unlock()
	c.mu.Lock()
	c.goAway = true
	for id, st := range c.streams {
		if id > f.LastStreamID {
			c.resetLocked(st, 0, errGoneAway)
		}
	}
	c.closeIfDoneLocked()
	c.unlock()
}

func (c *conn) onWindowUpdate(f *http2.WindowUpdateFrame) error {
	inc := int64(f.Increment)
	c.mu.Lock()
	defer c.unlock()
	if f.StreamID == 0 {
		c.sendWindow += inc
		if c.sendWindow > wire.MaxWindow {
			return connError{http2.ErrCodeFlowControl, "connection window above 2^31-1"}
		}
		c.wcond.Broadcast()
		return nil
	}
	st := c.streams[f.StreamID]
	if st == nil {
		if f.StreamID >= c.nextID {
			return connError{http2.ErrCodeProtocol, "WINDOW_UPDATE on an idle stream"}
		}
		return nil // a closed stream
	}
	st.sendWindow += inc
	if st.sendWindow > wire.MaxWindow {
		c.resetLocked(st, http2.ErrCodeFlowControl, &upstream.Error{Kind: upstream.KindInvalid, Err: errors.New("stream window above 2^31-1")})
		return nil
	}
	c.wcond.Broadcast()
	return nil
}

// tickEvery is how often the connection's timer looks at it.
func (c *conn) tickEvery() time.Duration {
	d := 15 * time.Second
	for _, x := range []time.Duration{c.p.cfg.PingAfter, c.p.cfg.PingTimeout, c.p.cfg.IdleTimeout} {
		if x > 0 && x < d {
			d = x
		}
	}
	return max(d/2, 10*time.Millisecond)
}

// tick closes a connection idle for the idle timeout, sends a PING on
// one silent for PingAfter, and fails one whose PING went unanswered.
func (c *conn) tick() {
	cfg := &c.p.cfg
	now := time.Now()
	c.mu.Lock()
	if c.closed {
		c.unlock()
		return
	}
	var dead bool
	switch {
	case len(c.streams) == 0 && cfg.IdleTimeout > 0 && now.Sub(c.idleSince) >= cfg.IdleTimeout:
		c.unlock()
		c.p.mu.Lock()
		c.p.removeLocked(c)
		c.p.mu.Unlock()
		c.retire()
		return
	case c.pingOut:
		dead = cfg.PingTimeout > 0 && now.Sub(c.pingAt) >= cfg.PingTimeout
	case cfg.PingAfter > 0 && now.Sub(time.Unix(0, c.lastRead.Load())) >= cfg.PingAfter:
		c.pingOut, c.pingAt = true, now
		c.pingData[0]++
		_ = c.wfr.WritePing(false, c.pingData)
		c.wakeLocked()
	}
	c.unlock()
	if dead {
		c.fail(errPingTimeout)
		return
	}
	c.timer.Reset(c.tickEvery())
}

var (
	errPingTimeout = errors.New("upstream HTTP/2 connection did not answer a PING")
	// errClosedGracefully: ebb closed the connection with its GOAWAY,
	// its streams done.
	errClosedGracefully = errors.New("upstream HTTP/2 connection closed by ebb")
	// errGoneAway and errRefused are the failures of streams the upstream
	// did not process.
	errGoneAway = fmt.Errorf("%w: the stream is beyond the last one of its GOAWAY", upstream.ErrResend)
	errRefused  = fmt.Errorf("%w: REFUSED_STREAM", upstream.ErrResend)
)

// retire closes the connection once its streams are done: no new stream
// goes on it (the pool no longer lists it).
func (c *conn) retire() {
	c.mu.Lock()
	c.retiring = true
	c.closeIfDoneLocked()
	c.unlock()
}

// closeIfDoneLocked closes a connection that went away or is retiring
// once no stream is left: a GOAWAY from ebb, then the close.
func (c *conn) closeIfDoneLocked() {
	if c.closed || len(c.streams) > 0 || !(c.goAway || c.retiring) {
		return
	}
	c.closed = true
	c.err = errClosedGracefully
	_ = c.wfr.WriteGoAway(0, http2.ErrCodeNo, nil)
	c.wclose = true
	c.wakeLocked()
	c.timer.Stop()
}

// fail ends the connection at once: every stream left fails with err.
func (c *conn) fail(err error) {
	c.p.mu.Lock()
	c.p.removeLocked(c)
	c.p.mu.Unlock()
	c.mu.Lock()
	if c.closed && c.wclose && len(c.streams) == 0 {
		// Closed gracefully, and now over: the read loop ends here
		// (the upstream closed, or the linger passed), and the writer
		// has half-closed the connection, or is writing its GOAWAY.
		c.unlock()
		c.nc.Close()
		return
	}
	if !c.closed {
		c.closed = true
		c.err = err
		var ce connError
		if errors.As(err, &ce) {
			// The GOAWAY goes out before the close, if the writer can.
			c.pend = c.pend[:0]
			_ = c.wfr.WriteGoAway(0, ce.code, nil)
			c.wclose = true
		}
	}
	for _, st := range c.streams {
		c.resetLocked(st, 0, connFailure(st, err))
	}
	if !c.wclose {
		c.pend = c.pend[:0]
		c.wclose = true
	}
	c.wakeLocked()
	c.wcond.Broadcast()
	c.unlock()
	if c.timer != nil {
		c.timer.Stop()
	}
	if !errors.As(err, new(connError)) {
		c.nc.Close()
	}
}

// connFailure is the error of st when its connection failed with err.
func connFailure(st *Stream, err error) error {
	var ue *upstream.Error
	if errors.As(err, &ue) {
		return err
	}
	return &upstream.Error{Kind: upstream.KindBroken, Unanswered: !st.gotHead, Err: err}
}

// wait waits for the connection's goroutines to return.
func (c *conn) wait() {
	<-c.done
	<-c.writerDone
}
