package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// The open-loop mode (-rate): requests are sent at a constant rate, on
// a schedule fixed in advance, whether or not the answers to the earlier
// ones have come. A request's latency runs from the instant the pacer
// issued it, so that a slow answer is not hidden by the client waiting
// for it (coordinated omission) and a request that had to wait for a
// free connection counts the wait; how late the pacer itself woke, after
// the instant scheduled, is the generator's and is reported apart (lag).
//
// The schedule comes from a periodic timerfd read through the Go
// network poller, not from time.Sleep or a time.Ticker: a Go program
// with nothing to run waits for its next timer in epoll_wait, whose
// timeout is in milliseconds, so a sleep of 200 µs lasts about 1.1 ms and
// a "constant" 5,000 req/s goes out in bursts of five or six a
// millisecond apart (vegeta paces with time.Sleep and does this). A
// timerfd is a file that becomes readable when its high-resolution timer
// fires: the poller wakes the pacer at the tick, microseconds late, and a
// read returns how many ticks have passed, so a late pacer catches up
// without losing any.

// openLoopConfig is what -rate mode is asked to do.
type openLoopConfig struct {
	target, path string
	proto        string // h1: conns HTTP/1.1 keep-alive connections; h2c: one connection, at most conns streams
	conns, rate  int
	dur          time.Duration
}

// sample is one answered request: its latency, from the instant the
// pacer issued it, and how late the pacer issued it, after the instant
// scheduled.
type sample struct{ latency, lag time.Duration }

// job is a request issued: its place in the schedule, and when.
type job struct {
	k      int64
	issued time.Time
}

// tally is what one worker saw; the workers' are added up at the end.
type tally struct {
	samples         []sample
	non2xx, errored int
	firstErr        error
}

// openLoop runs the schedule and returns its line of figures.
func openLoop(cfg openLoopConfig) (string, error) {
	interval := time.Second / time.Duration(cfg.rate)
	total := int64(float64(cfg.rate) * cfg.dur.Seconds())
	if interval <= 0 || total <= 0 {
		return "", fmt.Errorf("-rate %d over -d %s schedules no request", cfg.rate, cfg.dur)
	}
	var (
		do    func(ctx context.Context, w int) (int, error)
		conns func() int
		done  func()
	)
	switch cfg.proto {
	case "h1":
		pool, err := dialH1(cfg)
		if err != nil {
			return "", err
		}
		do, conns, done = pool.do, func() int { return len(pool.conns) }, pool.close
	case "h2c":
		c, err := newH2C(cfg)
		if err != nil {
			return "", err
		}
		do, conns, done = c.do, func() int { return int(c.dials.Load()) }, c.close
	default:
		return "", fmt.Errorf("-proto %q: h1 or h2c", cfg.proto)
	}
	defer done()

	tfd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return "", fmt.Errorf("timerfd_create: %w", err)
	}
	// Non-blocking, so os.NewFile hands it to the network poller. Its Fd
	// method is never called: that would make it blocking again.
	timer := os.NewFile(uintptr(tfd), "timerfd")
	defer timer.Close()

	// Every request left unanswered 30 s after the schedule's end fails.
	ctx, cancel := context.WithTimeout(context.Background(), cfg.dur+30*time.Second)
	defer cancel()
	// Scheduled requests wait here for a free worker (a free connection,
	// for h1). One second of the schedule fits; a request that finds it
	// full is dropped, and the achieved rate shows it.
	jobs := make(chan job, cfg.rate)
	tallies := make([]tally, cfg.conns)
	var start time.Time
	var wg sync.WaitGroup
	// Workers wait on jobs in the order they became free (a channel's
	// receivers are served first come, first served): for h1, the
	// connection idle the longest takes the next request, and the load
	// goes round all of them.
	for w := range cfg.conns {
		wg.Go(func() {
			t := &tallies[w]
			for j := range jobs {
				status, err := do(ctx, w)
				switch {
				case err != nil:
					t.errored++
					if t.firstErr == nil {
						t.firstErr = err
					}
					continue
				case status < 200 || status > 299:
					t.non2xx++
				}
				due := start.Add(time.Duration(j.k+1) * interval)
				t.samples = append(t.samples, sample{latency: time.Since(j.issued), lag: j.issued.Sub(due)})
			}
		})
	}

	start = time.Now()
	spec := unix.ItimerSpec{Interval: unix.NsecToTimespec(int64(interval)), Value: unix.NsecToTimespec(int64(interval))}
	if err := unix.TimerfdSettime(tfd, 0, &spec, nil); err != nil {
		close(jobs)
		wg.Wait()
		return "", fmt.Errorf("timerfd_settime: %w", err)
	}
	var dropped int64
	var buf [8]byte
	var pacingErr error
	for k := int64(0); k < total; {
		if _, err := io.ReadFull(timer, buf[:]); err != nil {
			pacingErr = fmt.Errorf("reading the timerfd: %w", err)
			break
		}
		now := time.Now()
		for n := binary.NativeEndian.Uint64(buf[:]); n > 0 && k < total; n-- {
			select {
			case jobs <- job{k, now}:
			default:
				dropped++
			}
			k++
		}
	}
	close(jobs)
	wg.Wait()
	if pacingErr != nil {
		return "", pacingErr
	}

	var all tally
	for _, t := range tallies {
		all.samples = append(all.samples, t.samples...)
		all.non2xx += t.non2xx
		all.errored += t.errored
		if all.firstErr == nil {
			all.firstErr = t.firstErr
		}
	}
	if all.firstErr != nil {
		fmt.Fprintln(os.Stderr, "latseries: first error:", all.firstErr)
	}
	return openLoopSummary(cfg, total, dropped, all, conns()), nil
}

// openLoopSummary is the line bench/harness parses: the schedule, what
// became of it, the percentiles of the answers' latencies (nearest rank)
// and of how late the pacer issued the requests, in µs.
func openLoopSummary(cfg openLoopConfig, scheduled, dropped int64, t tally, conns int) string {
	lat := make([]time.Duration, len(t.samples))
	lag := make([]time.Duration, len(t.samples))
	for i, s := range t.samples {
		lat[i], lag[i] = s.latency, s.lag
	}
	slices.Sort(lat)
	slices.Sort(lag)
	us := func(sorted []time.Duration, q float64) string {
		if len(sorted) == 0 {
			return "NaN"
		}
		i := max(int(q*float64(len(sorted))+0.5), 1)
		return fmt.Sprintf("%.1f", float64(sorted[i-1])/float64(time.Microsecond))
	}
	return fmt.Sprintf("openloop proto=%s conns=%d target_rps=%d seconds=%g scheduled=%d dropped=%d done=%d non2xx=%d errors=%d "+
		"rps=%.1f p50_us=%s p90_us=%s p99_us=%s max_us=%s lag_p50_us=%s lag_p99_us=%s",
		cfg.proto, conns, cfg.rate, cfg.dur.Seconds(), scheduled, dropped, len(t.samples), t.non2xx, t.errored,
		float64(len(t.samples))/cfg.dur.Seconds(), us(lat, 0.5), us(lat, 0.9), us(lat, 0.99), us(lat, 1), us(lag, 0.5), us(lag, 0.99))
}

// h1Pool is one HTTP/1.1 keep-alive connection per worker, all dialled
// before the schedule starts.
type h1Pool struct {
	target string
	req    []byte
	conns  []*h1Conn
}

type h1Conn struct {
	c  net.Conn
	br *bufio.Reader
}

func dialH1(cfg openLoopConfig) (*h1Pool, error) {
	p := &h1Pool{target: cfg.target, req: []byte("GET " + cfg.path + " HTTP/1.1\r\nHost: " + cfg.target + "\r\n\r\n")}
	for range cfg.conns {
		c, err := p.dial()
		if err != nil {
			p.close()
			return nil, err
		}
		p.conns = append(p.conns, c)
	}
	return p, nil
}

func (p *h1Pool) dial() (*h1Conn, error) {
	c, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		return nil, err
	}
	return &h1Conn{c: c, br: bufio.NewReader(c)}, nil
}

// do sends one request on worker w's connection and reads its answer.
// A connection that fails is closed and dialled again for the next
// request: the failure is this request's.
func (p *h1Pool) do(ctx context.Context, w int) (int, error) {
	c := p.conns[w]
	if c == nil {
		var err error
		if c, err = p.dial(); err != nil {
			return 0, err
		}
		p.conns[w] = c
	}
	status, err := c.roundTrip(ctx, p.req)
	if err != nil {
		c.c.Close()
		p.conns[w] = nil
	}
	return status, err
}

func (c *h1Conn) roundTrip(ctx context.Context, req []byte) (int, error) {
	if dl, ok := ctx.Deadline(); ok {
		if err := c.c.SetDeadline(dl); err != nil {
			return 0, err
		}
	}
	if _, err := c.c.Write(req); err != nil {
		return 0, err
	}
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		return 0, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, errors.Join(err, resp.Body.Close())
}

func (p *h1Pool) close() {
	for _, c := range p.conns {
		if c != nil {
			c.c.Close()
		}
	}
}

// h2cClient is net/http's HTTP/2 client with prior knowledge (no TLS, no
// upgrade): one connection, as many streams at once as there are
// workers. The connection is opened by a first request before the
// schedule starts.
type h2cClient struct {
	url   string
	tr    *http.Transport
	dials atomic.Int64
}

func newH2C(cfg openLoopConfig) (*h2cClient, error) {
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	c := &h2cClient{url: "http://" + cfg.target + cfg.path}
	d := &net.Dialer{Timeout: 5 * time.Second}
	c.tr = &http.Transport{
		Protocols:          &protos,
		DisableCompression: true,
		// For HTTP/2 this bounds the connections being dialled at once: a
		// burst of requests that finds no connection (at the start, or
		// after a GOAWAY) waits for one dial instead of making one each.
		MaxConnsPerHost: 1,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c.dials.Add(1)
			return d.DialContext(ctx, network, addr)
		},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	status, err := c.do(ctx, 0)
	if err != nil {
		c.close()
		return nil, fmt.Errorf("the first h2c request: %w", err)
	}
	if status != http.StatusOK {
		c.close()
		return nil, fmt.Errorf("the first h2c request: status %d", status)
	}
	return c, nil
}

func (c *h2cClient) do(ctx context.Context, _ int) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := c.tr.RoundTrip(req)
	if err != nil {
		return 0, err
	}
	if resp.ProtoMajor != 2 {
		resp.Body.Close()
		return 0, fmt.Errorf("answered over %s, not HTTP/2", resp.Proto)
	}
	_, err = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, errors.Join(err, resp.Body.Close())
}

func (c *h2cClient) close() { c.tr.CloseIdleConnections() }
