// Command grpc-bench is the gRPC part of ebb's benchmark (bench/run.sh):
// a unary echo server and a closed-loop client that reports latency
// percentiles. The service is examples/grpcecho's: no protoc, messages
// are raw bytes; the client calls its Unary method.
//
//	grpc-bench -mode server -addr 127.0.0.1:18086
//	grpc-bench -mode client -target 127.0.0.1:18087 -duration 10s -concurrency 16
//
// The client opens one connection (as a gRPC client does), runs
// -concurrency goroutines that each call Unary back to back for
// -duration, checks every answer is the payload it sent, and prints one
// line: requests=N errors=N seconds=S rps=R p50_us=P p99_us=P mean_us=M.
// Both sides are plaintext HTTP/2 (h2c, prior knowledge).
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
	"slices"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ebb-proxy/ebb/examples/grpcecho"
)

func main() {
	mode := flag.String("mode", "", "server or client")
	addr := flag.String("addr", "127.0.0.1:18086", "server: address to listen on")
	target := flag.String("target", "127.0.0.1:18086", "client: host:port to call (the server, or a proxy in front of it)")
	duration := flag.Duration("duration", 10*time.Second, "client: how long to send calls")
	concurrency := flag.Int("concurrency", 1, "client: calls in flight (goroutines sharing one connection)")
	size := flag.Int("size", 64, "client: payload bytes per call (echoed back)")
	timeout := flag.Duration("timeout", 5*time.Second, "client: deadline of each call")
	flag.Parse()
	log.SetFlags(0)
	log.SetPrefix("grpc-bench: ")

	switch *mode {
	case "server":
		serve(*addr)
	case "client":
		if *concurrency < 1 || *duration <= 0 || *size < 0 {
			log.Fatal("need -concurrency >= 1, -duration > 0, -size >= 0")
		}
		if err := runClient(*target, *duration, *concurrency, *size, *timeout); err != nil {
			log.Fatal(err)
		}
	default:
		log.Fatal("-mode must be server or client")
	}
}

// serve runs the echo server until SIGTERM or SIGINT.
func serve(addr string) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		log.Fatal(err)
	}
	srv := grpcecho.NewServer()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-sig
		stopped := make(chan struct{})
		go func() { srv.GracefulStop(); close(stopped) }()
		select {
		case <-stopped:
		case <-time.After(2 * time.Second):
			srv.Stop()
		}
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		log.Fatal(err)
	}
}

type workerResult struct {
	lat    []time.Duration // one per successful call
	errs   int
	errMsg string // the first error
}

func runClient(target string, duration time.Duration, concurrency, size int, timeout time.Duration) error {
	conn, err := grpcecho.NewClient(target, insecure.NewCredentials())
	if err != nil {
		return err
	}
	defer conn.Close()

	payload := bytes.Repeat([]byte{'g'}, size)
	// One call before the clock starts: it connects, and fails fast if
	// nothing answers.
	{
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		var out []byte
		err := conn.Invoke(ctx, grpcecho.Unary, &payload, &out)
		cancel()
		if err != nil {
			return fmt.Errorf("first call to %s: %w", target, err)
		}
		if !bytes.Equal(out, payload) {
			return fmt.Errorf("first call to %s: answer is %d bytes, not the %d sent", target, len(out), len(payload))
		}
	}

	results := make([]workerResult, concurrency)
	start := time.Now()
	deadline := start.Add(duration)
	var wg sync.WaitGroup
	for w := range results {
		wg.Go(func() {
			r := &results[w]
			r.lat = make([]time.Duration, 0, 1<<14)
			var out []byte
			for {
				t0 := time.Now()
				if !t0.Before(deadline) {
					return
				}
				ctx, cancel := context.WithTimeout(context.Background(), timeout)
				err := conn.Invoke(ctx, grpcecho.Unary, &payload, &out)
				cancel()
				if err == nil && !bytes.Equal(out, payload) {
					err = fmt.Errorf("answer is %d bytes, not the %d sent", len(out), len(payload))
				}
				if err != nil {
					if r.errs == 0 {
						r.errMsg = err.Error()
					}
					r.errs++
					continue
				}
				r.lat = append(r.lat, time.Since(t0))
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)

	var all []time.Duration
	errs := 0
	for _, r := range results {
		all = append(all, r.lat...)
		if r.errs > 0 {
			if errs == 0 {
				log.Printf("first error: %s", r.errMsg)
			}
			errs += r.errs
		}
	}
	slices.Sort(all)
	var sum time.Duration
	for _, d := range all {
		sum += d
	}
	n := len(all)
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	pct := func(p float64) float64 {
		if n == 0 {
			return 0
		}
		i := int(p*float64(n)+0.5) - 1 // nearest rank
		return us(all[max(0, min(n-1, i))])
	}
	mean := 0.0
	if n > 0 {
		mean = us(sum) / float64(n)
	}
	fmt.Printf("requests=%d errors=%d seconds=%.3f rps=%.1f p50_us=%.1f p99_us=%.1f mean_us=%.1f\n",
		n, errs, elapsed.Seconds(), float64(n)/elapsed.Seconds(), pct(0.50), pct(0.99), mean)
	return nil
}
