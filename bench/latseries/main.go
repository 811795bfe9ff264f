// Command latseries is an HTTP client for latency, in two modes.
//
// By default it is a closed-loop HTTP/1.1 keep-alive client that
// reports its latency over time, bucket by bucket: where wrk gives one
// p99 for a whole run, a stall of a few tens of milliseconds shows here
// as the bucket it fell in. bench/README.md (Slowloris) tells how it
// found the instant when a proxy cuts a thousand slow connections at once.
//
// With -rate R it is the open-loop load generator of bench/run.sh's
// openloop part: R requests a second on a fixed schedule, over -c
// HTTP/1.1 keep-alive connections (-proto h1) or one h2c connection with
// at most -c streams (-proto h2c), for -d; it prints one line of figures
// (see openloop.go).
//
// Each of -c connections sends GET -path, reads the response and sends the
// next, for -d. It prints one line per -b bucket (by when each request was
// sent): requests, p50, p99 and the largest latency; then the whole run's.
// Only loopback addresses are accepted.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"slices"
	"sync"
	"time"
)

func main() {
	target := flag.String("target", "127.0.0.1:18080", "host:port of the proxy (a loopback address)")
	path := flag.String("path", "/", "path to GET")
	conns := flag.Int("c", 8, "connections")
	dur := flag.Duration("d", 12*time.Second, "length of the run (at most 10m)")
	bucket := flag.Duration("b", 100*time.Millisecond, "bucket width")
	rate := flag.Int("rate", 0, "open loop: requests a second on a fixed schedule (0: closed loop)")
	proto := flag.String("proto", "h1", "open loop: h1 (-c connections) or h2c (one connection, -c streams at most)")
	flag.Parse()
	log.SetFlags(0)

	host, _, err := net.SplitHostPort(*target)
	if err != nil {
		log.Fatalf("latseries: -target: %v", err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		log.Fatalf("latseries: -target %s: only a loopback IP address is accepted", *target)
	}
	switch {
	case *conns < 1:
		log.Fatal("latseries: -c must be positive")
	case *dur <= 0 || *dur > 10*time.Minute:
		log.Fatal("latseries: -d must be above 0 and at most 10m")
	case *bucket <= 0 || *bucket > *dur:
		log.Fatal("latseries: -b must be above 0 and at most -d")
	case *rate < 0 || *rate > 1000000:
		log.Fatal("latseries: -rate must be between 0 and 1000000")
	}
	if *rate > 0 {
		cfg := openLoopConfig{target: *target, path: *path, proto: *proto, conns: *conns, rate: *rate, dur: *dur}
		line, err := openLoop(cfg)
		if err != nil {
			log.Fatalf("latseries: %v", err)
		}
		fmt.Println(line)
		return
	}

	req := []byte("GET " + *path + " HTTP/1.1\r\nHost: " + *target + "\r\n\r\n")
	n := int(*dur / *bucket)
	if *dur%*bucket != 0 {
		n++
	}
	start := time.Now()
	end := start.Add(*dur)
	var (
		mu      sync.Mutex
		buckets = make([][]time.Duration, n)
		errs    []error
		wg      sync.WaitGroup
	)
	for range *conns {
		wg.Go(func() {
			mine := make([][]time.Duration, n)
			err := run(*target, req, end, func(sent time.Time, took time.Duration) {
				k := int(sent.Sub(start) / *bucket)
				mine[k] = append(mine[k], took)
			})
			mu.Lock()
			defer mu.Unlock()
			for k := range mine {
				buckets[k] = append(buckets[k], mine[k]...)
			}
			if err != nil {
				errs = append(errs, err)
			}
		})
	}
	wg.Wait()

	var all []time.Duration
	for k, b := range buckets {
		all = append(all, b...)
		if len(b) > 0 {
			fmt.Printf("%7.2fs %s\n", (time.Duration(k) * *bucket).Seconds(), stats(b))
		}
	}
	fmt.Printf("all     %s\n", stats(all))
	for _, err := range errs {
		fmt.Fprintln(os.Stderr, "latseries:", err)
	}
	if len(errs) > 0 {
		os.Exit(1)
	}
}

// run sends requests on one connection until end, reporting each one's
// send time and latency to record.
func run(target string, req []byte, end time.Time, record func(sent time.Time, took time.Duration)) error {
	c, err := net.DialTimeout("tcp", target, 5*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	// A request unanswered well past the run's end is an error, not a hang.
	if err := c.SetDeadline(end.Add(30 * time.Second)); err != nil {
		return err
	}
	br := bufio.NewReader(c)
	for {
		sent := time.Now()
		if !sent.Before(end) {
			return nil
		}
		if _, err := c.Write(req); err != nil {
			return err
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return err
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET: status %d", resp.StatusCode)
		}
		record(sent, time.Since(sent))
	}
}

// stats formats the count, p50, p99 and largest of d (sorted in place).
func stats(d []time.Duration) string {
	slices.Sort(d)
	us := func(x time.Duration) float64 { return float64(x) / float64(time.Microsecond) }
	return fmt.Sprintf("n=%6d p50=%7.0fµs p99=%7.0fµs max=%7.0fµs",
		len(d), us(d[len(d)/2]), us(d[len(d)*99/100]), us(d[len(d)-1]))
}
