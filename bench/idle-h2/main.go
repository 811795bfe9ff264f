// Command idle-h2 opens many connections to a proxy, makes one request on
// each, and then holds them open and idle, so that bench/run.sh can
// measure what an idle connection costs the proxy in memory: HTTP/2 in
// cleartext with prior knowledge (-proto h2c, the default, whence the
// name) or HTTP/1.1 keep-alive (-proto h1).
//
// It prints "ready N" once every connection has had its answer, then
// holds them until SIGTERM or SIGINT (or -hold), and before closing them
// prints "alive N closed M": how many the proxy still held open, so that
// the caller knows its measurement saw them all.
//
// Two more modes serve the idle-up part, which measures idle upstream
// connections instead. With -origin ADDR it is the origin behind the
// proxy: h2c, one stream per connection, requests held until -barrier are
// in flight at once (see origin.go); it prints "ready" once it listens
// and serves until SIGTERM or SIGINT. With -inflight N it is the client:
// N requests at once through the proxy to that origin (see inflight.go),
// which must then open N connections to it.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"
)

func main() {
	proto := flag.String("proto", "h2c", "h2c (HTTP/2, prior knowledge) or h1 (HTTP/1.1 keep-alive)")
	target := flag.String("target", "127.0.0.1:18080", "host:port of the proxy")
	conns := flag.Int("conns", 2000, "connections to open")
	path := flag.String("path", "/", "path of the one request made on each connection")
	hold := flag.Duration("hold", 5*time.Minute, "longest time to hold the connections (-inflight: the longest the whole run may take)")
	parallel := flag.Int("parallel", 64, "connections being opened at once")
	originAddr := flag.String("origin", "", "serve as the idle-up part's h2c origin on this host:port instead")
	inflight := flag.Int("inflight", 0, "instead of -conns: have this many requests for -path in flight at once, over h2c, to -gate's origin")
	gate := flag.String("gate", "127.0.0.1:18110", "-inflight: host:port of the -origin behind the proxy, asked before each request")
	perConn := flag.Int("streams", 100, "-inflight: requests per connection to the proxy")
	barrierN := flag.Int("barrier", 1000, "origin: requests for -hold-path held until this many are in flight at once")
	barrierWait := flag.Duration("barrier-wait", 20*time.Second, "origin: the longest a request for -hold-path is held")
	holdPath := flag.String("hold-path", "/hold", "origin: the path whose requests are held")
	bodyBytes := flag.Int("body-bytes", 64, "origin: the size of every answer's body but /stats'")
	flag.Parse()
	log.SetFlags(0)
	if *originAddr != "" {
		if *barrierN < 1 || *barrierWait <= 0 || *bodyBytes < 0 {
			log.Fatal("idle-h2: -barrier and -barrier-wait must be positive, -body-bytes not negative")
		}
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
		defer stop()
		cfg := originConfig{barrier: *barrierN, wait: *barrierWait, holdPath: *holdPath,
			body: bytes.Repeat([]byte("x"), *bodyBytes), log: os.Stdout}
		ln, err := net.Listen("tcp", *originAddr)
		if err != nil {
			log.Fatalf("idle-h2: %v", err)
		}
		fmt.Println("ready")
		if err := runOrigin(ctx, ln, cfg); err != nil {
			log.Fatalf("idle-h2: %v", err)
		}
		return
	}
	if *inflight > 0 {
		if *perConn < 1 {
			log.Fatal("idle-h2: -streams must be positive")
		}
		ctx, cancel := context.WithTimeout(context.Background(), *hold)
		defer cancel()
		if err := runInflight(ctx, os.Stdout, *target, *gate, *path, *inflight, *perConn); err != nil {
			log.Fatalf("idle-h2: %v", err)
		}
		return
	}
	var connect func(ctx context.Context, target, path string) (net.Conn, error)
	switch *proto {
	case "h2c":
		connect = connectH2C
	case "h1":
		connect = connectH1
	default:
		log.Fatalf("idle-h2: -proto %q: want h2c or h1", *proto)
	}
	if *conns < 1 || *parallel < 1 {
		log.Fatal("idle-h2: -conns and -parallel must be positive")
	}

	// The signal ends the hold; before that it stops the opening too.
	sigCtx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	ctx, cancel := context.WithTimeout(sigCtx, time.Minute)
	defer cancel()
	open := make([]net.Conn, *conns)
	errs := make([]error, *conns)
	sem := make(chan struct{}, *parallel)
	var wg sync.WaitGroup
	for i := range open {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			open[i], errs[i] = connect(ctx, *target, *path)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		closeAll(open)
		log.Fatalf("idle-h2: %v", err)
	}
	fmt.Printf("ready %d\n", len(open))

	holdCtx, cancelHold := context.WithTimeout(sigCtx, *hold)
	defer cancelHold()
	<-holdCtx.Done()
	alive := countAlive(open)
	fmt.Printf("alive %d closed %d\n", alive, len(open)-alive)
	closeAll(open)
}

// countAlive tells how many connections the peer still holds open: a
// read that times out finds an open, silent connection; end of file, an
// error or bytes (an HTTP/2 GOAWAY, say) count as not idle any more. All
// reads share one short deadline, so the check takes that long at most.
func countAlive(conns []net.Conn) int {
	deadline := time.Now().Add(200 * time.Millisecond)
	ok := make([]bool, len(conns))
	var wg sync.WaitGroup
	for i, c := range conns {
		if c == nil {
			continue
		}
		wg.Go(func() {
			if c.SetReadDeadline(deadline) != nil {
				return
			}
			var b [1]byte
			_, err := c.Read(b[:])
			ok[i] = errors.Is(err, os.ErrDeadlineExceeded)
		})
	}
	wg.Wait()
	n := 0
	for _, alive := range ok {
		if alive {
			n++
		}
	}
	return n
}

func closeAll(conns []net.Conn) {
	for _, c := range conns {
		if c != nil {
			c.Close()
		}
	}
}

// dial opens a TCP connection bounded by ctx, with ctx's deadline on its
// reads and writes until the caller clears it.
func dial(ctx context.Context, target string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", target)
	if err != nil {
		return nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	return c, nil
}
