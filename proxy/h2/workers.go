package h2

import (
	"sync"
	"time"
)

// workerIdle is how long a worker waits for another stream before it
// ends.
const workerIdle = 10 * time.Second

// workerPool runs stream handlers on goroutines that, once a handler has
// returned, wait for the next stream of any of the server's connections
// instead of ending: a stream then costs no goroutine start and no
// allocation, and runs on a stack already grown to what forwarding needs.
// The most recently idle worker is used first, so that a quiet server's
// extra workers end after workerIdle (to twice that); all idle ones end
// with the server's last connection.
type workerPool struct {
	mu    sync.Mutex
	idle  []*worker // the most recently idle last
	conns int       // connections being served
	sweep uint64    // sweeps so far
	stop  chan struct{}
}

type worker struct {
	ch    chan *Stream // the next stream; nil: end
	since uint64       // the sweep count when it went idle
}

// serve runs st's handler on an idle worker, or on a new one.
func (p *workerPool) serve(st *Stream) {
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		w := p.idle[n-1]
		p.idle[n-1] = nil
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		w.ch <- st
		return
	}
	p.mu.Unlock()
	w := &worker{ch: make(chan *Stream, 1)}
	go p.run(w, st)
}

func (p *workerPool) run(w *worker, st *Stream) {
	for st != nil {
		st.c.serveStream(st)
		p.mu.Lock()
		if p.conns == 0 {
			p.mu.Unlock()
			return
		}
		w.since = p.sweep
		p.idle = append(p.idle, w)
		p.mu.Unlock()
		st = <-w.ch
	}
}

// connStarted counts a connection; the first one starts the sweep of
// workers idle for too long.
func (p *workerPool) connStarted() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.conns++
	if p.conns == 1 {
		p.stop = make(chan struct{})
		go p.sweeper(p.stop)
	}
}

// connEnded uncounts a connection; after the last one, no worker waits.
func (p *workerPool) connEnded() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.conns--
	if p.conns > 0 {
		return
	}
	close(p.stop)
	p.endIdleLocked(len(p.idle))
}

// endIdleLocked ends the n workers idle for longest.
func (p *workerPool) endIdleLocked(n int) {
	for _, w := range p.idle[:n] {
		w.ch <- nil
	}
	k := copy(p.idle, p.idle[n:])
	clear(p.idle[k:])
	p.idle = p.idle[:k]
}

// sweeper ends, every workerIdle, the workers that have been idle since
// before the last sweep (so for workerIdle to twice that), until stop is
// closed. Counting sweeps spares the workers a clock reading per stream.
func (p *workerPool) sweeper(stop chan struct{}) {
	t := time.NewTicker(workerIdle)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			p.mu.Lock()
			p.sweep++
			n := 0
			for n < len(p.idle) && p.idle[n].since+1 < p.sweep {
				n++
			}
			p.endIdleLocked(n)
			p.mu.Unlock()
		}
	}
}
