// Command slowloris holds slow HTTP/1.1 connections open against a proxy
// on the loopback interface, so that bench/run.sh can measure what they do
// to a normal client's latency, and when the proxy cuts them. Two classic
// shapes, half the connections each (-body-share):
//
//   - headers: a request head that never ends, one more header line every
//     -line-every;
//   - bodies: a complete POST head with a Content-Length, then the body one
//     byte every -byte-every.
//
// It prints "ready opened=N failed=M" once every connection is open and
// has sent its first bytes, and when the attack ends (after -duration, or
// on SIGTERM or SIGINT) one line of key=value figures: how many of each
// shape the proxy still held open, when it cut the others (seconds after
// they opened, median and largest) and what it answered before cutting
// them (status codes; "none": it closed without a word).
//
// Only loopback addresses are accepted, and every loop ends with the
// attack: this is a benchmark tool, not a weapon.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os/signal"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// config is the attack's shape, read-only once the attack starts.
type config struct {
	target        string
	path          string // the slow bodies' path
	lineEvery     time.Duration
	byteEvery     time.Duration
	contentLength int
}

// result is what became of one connection.
type result struct {
	body   bool
	opened bool
	cut    bool          // the proxy closed it before the attack ended
	after  time.Duration // from open to cut
	answer string        // status code the proxy sent, "" if none
}

func main() {
	var cfg config
	flag.StringVar(&cfg.target, "target", "127.0.0.1:18080", "host:port of the proxy (a loopback address)")
	conns := flag.Int("conns", 1000, "slow connections to hold")
	bodyShare := flag.Float64("body-share", 0.5, "share of the connections that trickle a body (the others trickle a head)")
	duration := flag.Duration("duration", 30*time.Second, "length of the attack, from the start (at most 10m)")
	flag.DurationVar(&cfg.lineEvery, "line-every", 5*time.Second, "pause between two header lines of a slow head")
	flag.DurationVar(&cfg.byteEvery, "byte-every", time.Second, "pause between two bytes of a slow body")
	flag.IntVar(&cfg.contentLength, "content-length", 65536, "Content-Length of the slow bodies")
	flag.StringVar(&cfg.path, "path", "/", "path of the slow bodies' POST")
	parallel := flag.Int("parallel", 100, "connections being opened at once")
	flag.Parse()
	log.SetFlags(0)

	host, _, err := net.SplitHostPort(cfg.target)
	if err != nil {
		log.Fatalf("slowloris: -target: %v", err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		log.Fatalf("slowloris: -target %s: only a loopback IP address is accepted", cfg.target)
	}
	switch {
	case *conns < 1 || *parallel < 1 || cfg.contentLength < 1:
		log.Fatal("slowloris: -conns, -parallel and -content-length must be positive")
	case *duration <= 0 || *duration > 10*time.Minute:
		log.Fatal("slowloris: -duration must be above 0 and at most 10m")
	case cfg.lineEvery <= 0 || cfg.byteEvery <= 0:
		log.Fatal("slowloris: -line-every and -byte-every must be positive")
	case *bodyShare < 0 || *bodyShare > 1:
		log.Fatal("slowloris: -body-share must be between 0 and 1")
	}

	sigCtx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	ctx, cancel := context.WithTimeout(sigCtx, *duration)
	defer cancel()

	bodies := int(float64(*conns)**bodyShare + 0.5)
	results := make([]result, *conns)
	sem := make(chan struct{}, *parallel)
	var opened, failed atomic.Int64
	var opening, running sync.WaitGroup
	for i := range results {
		body := i < bodies
		// Spread each shape's writes over its interval rather than all at once.
		phase := cfg.lineEvery * time.Duration(i-bodies) / time.Duration(max(*conns-bodies, 1))
		if body {
			phase = cfg.byteEvery * time.Duration(i) / time.Duration(max(bodies, 1))
		}
		opening.Add(1)
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			failed.Add(1)
			opening.Done()
			results[i] = result{body: body}
			continue
		}
		running.Go(func() {
			results[i] = attack(ctx, &cfg, i, body, phase, func(ok bool) {
				if ok {
					opened.Add(1)
				} else {
					failed.Add(1)
				}
				<-sem
				opening.Done()
			})
		})
	}
	opening.Wait()
	fmt.Printf("ready opened=%d failed=%d\n", opened.Load(), failed.Load())
	running.Wait()
	fmt.Println(summary(results))
}

// attack runs one slow connection until the attack ends or the proxy cuts
// it. It calls opened once, when the connection is open and has sent its
// first bytes (or could not).
func attack(ctx context.Context, cfg *config, i int, body bool, phase time.Duration, opened func(ok bool)) result {
	r := result{body: body}
	var d net.Dialer
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	c, err := d.DialContext(dctx, "tcp", cfg.target)
	cancel()
	if err != nil {
		opened(false)
		return r
	}
	defer c.Close()
	start := time.Now()
	if dl, ok := ctx.Deadline(); ok {
		// A backstop: no read or write outlives the attack for long. Later
		// than its end, so that the reader's timeout is never taken for
		// the proxy closing the connection.
		_ = c.SetDeadline(dl.Add(5 * time.Second))
	}
	var first string
	if body {
		first = fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: bench-slowloris\r\n"+
			"Content-Type: application/octet-stream\r\nContent-Length: %d\r\n\r\n", cfg.path, cfg.target, cfg.contentLength)
	} else {
		first = fmt.Sprintf("GET /?slowloris=%d HTTP/1.1\r\nHost: %s\r\nUser-Agent: bench-slowloris\r\n", i, cfg.target)
	}
	if _, err := c.Write([]byte(first)); err != nil {
		opened(false)
		return r
	}
	r.opened = true
	opened(true)

	// The reader notes what the proxy answers and when it closes.
	gone := make(chan struct{})
	var goneAt time.Time
	go func() {
		defer close(gone)
		r.answer = readAnswer(c)
		goneAt = time.Now()
	}()

	every := cfg.lineEvery
	if body {
		every = cfg.byteEvery
	}
	t := time.NewTimer(phase + every)
	defer t.Stop()
	sent := 0
	for {
		select {
		case <-ctx.Done():
			c.Close()
			<-gone
			return r
		case <-gone:
			r.cut, r.after = true, goneAt.Sub(start)
			return r
		case <-t.C:
		}
		var err error
		switch {
		case !body:
			_, err = fmt.Fprintf(c, "X-Slowloris-%d: %d\r\n", sent, sent)
			sent++
		case sent < cfg.contentLength:
			_, err = c.Write([]byte{'x'})
			sent++
		}
		if err != nil {
			at := time.Now()
			c.Close()
			<-gone
			if ctx.Err() == nil {
				r.cut, r.after = true, at.Sub(start)
			}
			return r
		}
		t.Reset(every)
	}
}

// readAnswer reads until the connection ends and returns the status code
// of the first response line the proxy sent, if any.
func readAnswer(c net.Conn) string {
	br := bufio.NewReaderSize(c, 512)
	line, err := br.ReadString('\n')
	code := ""
	if f := strings.Fields(line); len(f) >= 2 && strings.HasPrefix(f[0], "HTTP/") {
		code = f[1]
	}
	if err == nil {
		_, _ = br.WriteTo(io.Discard)
	}
	return code
}

// summary is the final line: per shape, how many were opened, how many
// were still open at the end, and when the others were cut; then the
// answers, by status code.
func summary(results []result) string {
	var b strings.Builder
	failed := 0
	answers := map[string]int{}
	for _, shape := range []struct {
		name string
		body bool
	}{{"headers", false}, {"bodies", true}} {
		n, open := 0, 0
		var cuts []time.Duration
		for _, r := range results {
			if r.body != shape.body {
				continue
			}
			if !r.opened {
				failed++
				continue
			}
			n++
			if r.cut {
				cuts = append(cuts, r.after)
			} else {
				open++
			}
		}
		p50, top := "NaN", "NaN"
		if len(cuts) > 0 {
			slices.Sort(cuts)
			p50 = fmt.Sprintf("%.1f", cuts[(len(cuts)-1)/2].Seconds())
			top = fmt.Sprintf("%.1f", cuts[len(cuts)-1].Seconds())
		}
		fmt.Fprintf(&b, "%s=%d %s_open=%d %s_cut_p50_s=%s %s_cut_max_s=%s ", shape.name, n, shape.name, open, shape.name, p50, shape.name, top)
	}
	open := 0
	for _, r := range results {
		if r.opened && !r.cut {
			open++
		}
		if r.opened {
			a := r.answer
			if a == "" {
				a = "none"
			}
			answers[a]++
		}
	}
	codes := make([]string, 0, len(answers))
	for a, n := range answers {
		codes = append(codes, fmt.Sprintf("%s:%d", a, n))
	}
	sort.Strings(codes)
	return fmt.Sprintf("conns=%d open=%d failed=%d %sanswers=%s", len(results), open, failed, b.String(), strings.Join(codes, ","))
}
