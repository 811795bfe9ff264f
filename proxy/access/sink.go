package access

import (
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// The sink's batching.
const (
	// flushEvery is the longest a line waits in memory.
	flushEvery = 100 * time.Millisecond
	// flushAt is how much makes the writer go at once.
	flushAt = 64 << 10
	// maxPending is how much may wait: lines beyond it, when the output
	// cannot keep up, are dropped (and counted) rather than make
	// requests wait for it or memory grow without bound.
	maxPending = 8 << 20
	// errorEvery spaces the reports of failed writes.
	errorEvery = 10 * time.Second
)

// Sink writes lines to standard output or to a file, in batches, from a
// goroutine of its own: Write only appends to a buffer. A file is opened
// for appending, and reopened by Reopen (after logrotate has moved it).
type Sink struct {
	path    string // "": stdout
	onError func(error)

	mu      sync.Mutex
	pending []byte // guarded by mu: lines not yet written
	closed  bool   // guarded by mu

	wmu       sync.Mutex // held while writing, and by Reopen
	out       io.Writer  // guarded by wmu
	file      *os.File   // guarded by wmu; nil for stdout
	spare     []byte     // guarded by wmu: the other buffer
	lastError time.Time  // guarded by wmu

	dropped atomic.Uint64
	kick    chan struct{}
	stop    chan struct{}
	done    chan struct{}
}

// OpenSink returns a sink writing to the file at path, created if need
// be, or to stdout when path is "" or "-" (or "/dev/stdout"). onError is
// told of failed writes, at most once every 10 s. Close stops it.
func OpenSink(path string, stdout io.Writer, onError func(error)) (*Sink, error) {
	s := &Sink{path: path, onError: onError, out: stdout,
		kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	switch path {
	case "", "-", "/dev/stdout":
		s.path = ""
	default:
		f, err := openFile(path)
		if err != nil {
			return nil, err
		}
		s.out, s.file = f, f
	}
	go s.loop()
	return s, nil
}

func openFile(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("access log: %w", err)
	}
	return f, nil
}

// Path returns the file the sink writes to ("" for stdout).
func (s *Sink) Path() string { return s.path }

// Write queues line (copied) to be written.
func (s *Sink) Write(line []byte) {
	s.mu.Lock()
	if s.closed || len(s.pending)+len(line) > maxPending {
		s.mu.Unlock()
		s.dropped.Add(1)
		return
	}
	before := len(s.pending)
	s.pending = append(s.pending, line...)
	s.mu.Unlock()
	if before < flushAt && before+len(line) >= flushAt {
		select {
		case s.kick <- struct{}{}:
		default:
		}
	}
}

// Dropped returns how many lines were lost: the output could not keep
// up, or failed.
func (s *Sink) Dropped() uint64 { return s.dropped.Load() }

func (s *Sink) loop() {
	defer close(s.done)
	t := time.NewTimer(flushEvery)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			s.Flush()
			return
		case <-s.kick:
		case <-t.C:
		}
		s.Flush()
		t.Reset(flushEvery)
	}
}

// Flush writes what is queued, now.
func (s *Sink) Flush() {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.mu.Lock()
	batch := s.pending
	s.pending = s.spare[:0]
	s.mu.Unlock()
	if len(batch) > 0 {
		if _, err := s.out.Write(batch); err != nil {
			s.failed(batch, err)
		}
	}
	if cap(batch) > 4*flushAt {
		batch = nil // a burst's buffer is not kept
	}
	s.spare = batch[:0]
}

// failed counts the lines of a batch that could not be written and
// reports the error. Called with wmu held.
func (s *Sink) failed(batch []byte, err error) {
	var n uint64
	for _, c := range batch {
		if c == '\n' {
			n++
		}
	}
	s.dropped.Add(n)
	if now := time.Now(); s.onError != nil && now.Sub(s.lastError) >= errorEvery {
		s.lastError = now
		s.onError(err)
	}
}

// Reopen opens the sink's file anew, as logrotate expects after moving
// it (SIGUSR1): lines go to a file at the path from then on. On failure
// the sink keeps writing to the file it has. A no-op for stdout.
func (s *Sink) Reopen() error {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if s.path == "" || closed {
		return nil
	}
	f, err := openFile(s.path)
	if err != nil {
		return err
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	old := s.file
	s.out, s.file = f, f
	return old.Close()
}

// Close writes what is queued, stops the sink and closes its file.
// Lines written after it are dropped.
func (s *Sink) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	close(s.stop)
	<-s.done
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.file != nil {
		return s.file.Close()
	}
	return nil
}
