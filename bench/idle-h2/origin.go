package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// The origin of the idle-up part (-origin ADDR): an HTTP/2 server in
// cleartext, prior knowledge only, that makes a proxy hold many upstream
// connections. It allows one stream per connection
// (SETTINGS_MAX_CONCURRENT_STREAMS 1, and a second stream is refused),
// and holds every request for the hold path until -barrier of them are in
// flight at once, or -barrier-wait has passed since the first one came:
// then it answers them all. A proxy that passes -barrier requests at once
// must therefore open -barrier connections to it, which then sit idle in
// its pool. Any other path is answered at once.
//
// A request counts as held once the proxy has acknowledged this origin's
// SETTINGS on its connection: the proxy then knows that the connection
// takes no second stream. /stats?held=K answers once K requests are held
// (or after -barrier-wait), and the client (-inflight) sends each request
// only once the origin holds the one before: a proxy that opens a
// connection for a request and puts the next ones on it before the
// SETTINGS come (HAProxy 2.6 assumes 100 streams until then) would
// otherwise have them refused. /stats alone answers at once; both say how
// many connections are open to the origin (the one asking excepted), so
// that the caller can check the proxy still held them all when its memory
// was read.
//
// It is written on x/net's Framer rather than on a server package, as the
// client side of this command is: it counts connections and refuses
// streams itself, and nothing in bench may serve HTTP with net/http but
// the helpers listed in proxy/deps_test.go.

// originConfig is what the origin serves.
type originConfig struct {
	barrier  int           // requests held until this many are in flight
	wait     time.Duration // the longest a request is held
	holdPath string
	body     []byte    // every answer's body but /stats'
	log      io.Writer // a line for each release of the barrier
}

// origin is the server's state, shared by its connections.
type origin struct {
	cfg originConfig
	bar barrier
	// open counts the connections open to the origin; refused the
	// streams refused for want of a free slot.
	open, refused atomic.Int64
}

// runOrigin serves on ln until ctx ends, then closes it.
func runOrigin(ctx context.Context, ln net.Listener, cfg originConfig) error {
	o := &origin{cfg: cfg, bar: barrier{n: cfg.barrier, wait: cfg.wait, log: cfg.log, changed: make(chan struct{})}}
	var wg sync.WaitGroup
	var mu sync.Mutex
	conns := map[net.Conn]bool{} // guarded by mu, as closed is
	closed := false
	// The end of ctx, or a failed accept, ends the accept loop and every
	// connection, one accepted meanwhile included; the connections'
	// goroutines are waited for below.
	shut := func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		closed = true
		for c := range conns {
			c.Close()
		}
	}
	stop := context.AfterFunc(ctx, shut)
	defer stop()
	for {
		c, err := ln.Accept()
		if err != nil {
			shut()
			wg.Wait()
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		mu.Lock()
		if closed {
			c.Close()
		}
		conns[c] = true
		mu.Unlock()
		wg.Go(func() {
			o.serveConn(c)
			mu.Lock()
			delete(conns, c)
			mu.Unlock()
		})
	}
}

// originConn is one connection: its reader is serveConn's goroutine,
// which owns the framer's reading side; answers are written under mu by
// whichever goroutine has one ready.
type originConn struct {
	o *origin
	// acked is closed when the peer acknowledges our SETTINGS; done when
	// the read loop ends: held requests give up.
	acked, done chan struct{}

	mu sync.Mutex
	// Guarded by mu.
	bw     *bufio.Writer
	fr     *http2.Framer
	enc    *hpack.Encoder
	hbuf   bytes.Buffer
	active int // streams open: at most one
}

// serveConn serves one connection until it fails or the peer goes away.
func (o *origin) serveConn(c net.Conn) {
	o.open.Add(1)
	defer o.open.Add(-1)
	defer c.Close()
	preface := make([]byte, len(http2.ClientPreface))
	if _, err := io.ReadFull(c, preface); err != nil || string(preface) != http2.ClientPreface {
		return
	}
	oc := &originConn{o: o, acked: make(chan struct{}), done: make(chan struct{}), bw: bufio.NewWriter(c)}
	oc.fr = http2.NewFramer(oc.bw, bufio.NewReader(c))
	oc.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	oc.enc = hpack.NewEncoder(&oc.hbuf)
	// The answers' goroutines end once done is closed and the connection
	// (on which one may be writing) too.
	var wg sync.WaitGroup
	defer func() {
		close(oc.done)
		c.Close()
		wg.Wait()
	}()
	if oc.write(func() error {
		return oc.fr.WriteSettings(http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: 1})
	}) != nil {
		return
	}
	acked := false
	pending := map[uint32]string{} // stream id -> path, of requests whose body has not ended
	for {
		f, err := oc.fr.ReadFrame()
		if err != nil {
			return
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if f.IsAck() && !acked {
				acked = true
				close(oc.acked)
			} else if !f.IsAck() && oc.write(oc.fr.WriteSettingsAck) != nil {
				return
			}
		case *http2.PingFrame:
			if !f.IsAck() && oc.write(func() error { return oc.fr.WritePing(true, f.Data) }) != nil {
				return
			}
		case *http2.MetaHeadersFrame:
			if !oc.take() {
				o.refused.Add(1)
				// Above the limit this connection announced (the peer
				// may not have had our SETTINGS yet): refused, which
				// says it was not processed (RFC 9113 §5.1.2).
				if oc.write(func() error { return oc.fr.WriteRSTStream(f.StreamID, http2.ErrCodeRefusedStream) }) != nil {
					return
				}
				continue
			}
			path := f.PseudoValue("path")
			if !f.StreamEnded() {
				pending[f.StreamID] = path
				continue
			}
			wg.Go(func() { oc.answer(f.StreamID, path) })
		case *http2.DataFrame:
			if path, ok := pending[f.StreamID]; ok && f.StreamEnded() {
				delete(pending, f.StreamID)
				wg.Go(func() { oc.answer(f.StreamID, path) })
			}
		case *http2.RSTStreamFrame:
			if _, ok := pending[f.StreamID]; ok {
				delete(pending, f.StreamID)
				_ = oc.write(func() error { oc.active--; return nil })
			}
		case *http2.GoAwayFrame:
			return
		}
	}
}

// take takes the connection's one stream slot, if free.
func (oc *originConn) take() bool {
	oc.mu.Lock()
	defer oc.mu.Unlock()
	if oc.active > 0 {
		return false
	}
	oc.active++
	return true
}

// write runs fn, which frames into the connection's buffer, and sends
// what it framed.
func (oc *originConn) write(fn func() error) error {
	oc.mu.Lock()
	defer oc.mu.Unlock()
	if err := fn(); err != nil {
		return err
	}
	return oc.bw.Flush()
}

// answer answers a request that has arrived whole: at once, or once the
// barrier lets it go if its path is the hold path. The stream's slot is
// free again once the answer is framed, before it is sent: the peer can
// use the slot only once it has the answer.
func (oc *originConn) answer(id uint32, path string) {
	body := oc.o.cfg.body
	p, query, _ := strings.Cut(path, "?")
	switch p {
	case oc.o.cfg.holdPath:
		select {
		case <-oc.acked:
		case <-oc.done:
			return
		}
		if !oc.o.bar.await(oc.done) {
			return
		}
	case "/stats":
		q, _ := url.ParseQuery(query)
		if k, err := strconv.Atoi(q.Get("held")); err == nil {
			oc.o.bar.awaitHeld(k, oc.done)
		}
		// The connection asking is not one the caller counts.
		body = fmt.Appendf(nil, "conns=%d %s refused=%d\n", oc.o.open.Load()-1, oc.o.bar.stats(), oc.o.refused.Load())
	}
	_ = oc.write(func() error {
		oc.active--
		oc.hbuf.Reset()
		// Nothing goes into HPACK's dynamic table (Sensitive: literals
		// never indexed), so that no peer's SETTINGS_HEADER_TABLE_SIZE
		// needs honouring: nginx announces 0 to its upstreams, and fails
		// a response that refers to the dynamic table.
		_ = oc.enc.WriteField(hpack.HeaderField{Name: ":status", Value: "200"})
		_ = oc.enc.WriteField(hpack.HeaderField{Name: "content-type", Value: "text/plain", Sensitive: true})
		_ = oc.enc.WriteField(hpack.HeaderField{Name: "content-length", Value: strconv.Itoa(len(body)), Sensitive: true})
		if err := oc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: oc.hbuf.Bytes(), EndHeaders: true}); err != nil {
			return err
		}
		return oc.fr.WriteData(id, true, body)
	})
}

// barrier holds requests until n are in flight at once, or until wait has
// passed since the first of them came; then it lets them all go, and the
// next request starts a new round.
type barrier struct {
	n    int
	wait time.Duration
	log  io.Writer

	mu sync.Mutex
	// Guarded by mu.
	round   *round        // nil: no request held
	held    int           // requests held in this round
	changed chan struct{} // closed (and replaced) when held changes
	last    string        // the last release: "N:full" or "N:timeout"
}

// round is one filling of the barrier.
type round struct {
	released chan struct{} // closed when the round's requests go
	deadline time.Time     // when they go, if not all came
	start    time.Time
}

// await holds the caller until its round is released; false if done
// ended first.
func (b *barrier) await(done <-chan struct{}) bool {
	b.mu.Lock()
	if b.round == nil {
		now := time.Now()
		b.round = &round{released: make(chan struct{}), deadline: now.Add(b.wait), start: now}
	}
	r := b.round
	b.held++
	b.changedLocked()
	if b.held >= b.n {
		b.releaseLocked("full")
	}
	b.mu.Unlock()
	t := time.NewTimer(time.Until(r.deadline))
	defer t.Stop()
	select {
	case <-r.released:
		return true
	case <-t.C:
		b.mu.Lock()
		if b.round == r {
			b.releaseLocked("timeout")
		}
		b.mu.Unlock()
		return true
	case <-done:
		return false
	}
}

// awaitHeld returns once k requests are held in the current round, or
// after wait, or when done ends.
func (b *barrier) awaitHeld(k int, done <-chan struct{}) {
	t := time.NewTimer(b.wait)
	defer t.Stop()
	for {
		b.mu.Lock()
		held, changed := b.held, b.changed
		b.mu.Unlock()
		if held >= k {
			return
		}
		select {
		case <-changed:
		case <-t.C:
			return
		case <-done:
			return
		}
	}
}

// changedLocked wakes those waiting for held to change; b.mu is held.
func (b *barrier) changedLocked() {
	close(b.changed)
	b.changed = make(chan struct{})
}

// releaseLocked lets the round's requests go; b.mu is held.
func (b *barrier) releaseLocked(why string) {
	b.last = fmt.Sprintf("%d:%s", b.held, why)
	fmt.Fprintf(b.log, "released %d (%s) after %v\n", b.held, why, time.Since(b.round.start).Round(time.Millisecond))
	close(b.round.released)
	b.round, b.held = nil, 0
	b.changedLocked()
}

// stats says how many requests are held and how the last round ended.
func (b *barrier) stats() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	last := b.last
	if last == "" {
		last = "none"
	}
	return fmt.Sprintf("held=%d last=%s", b.held, last)
}
