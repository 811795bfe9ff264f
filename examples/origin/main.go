// Command origin is a small HTTP application to put behind ebb in the
// quick start and the examples. It answers, as examples/echo's Handler:
//
//	GET  /            a greeting naming the host that served it
//	POST /echo        the request body, streamed back
//	GET  /bytes?n=N   N bytes (streamed, so any size works)
//	GET  /slow?d=2s   the greeting after a delay
//
// It stops gracefully on SIGTERM or SIGINT.
package main

import (
	"context"
	"errors"
	"flag"
	"log"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/ebb-proxy/ebb/examples/echo"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:9000", "address to listen on")
	name := flag.String("name", "origin", "name shown in the greeting")
	flag.Parse()

	srv := &http.Server{Addr: *addr, Handler: echo.Handler(*name), ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	log.Printf("origin %s listening on %s", *name, *addr)
	select {
	case err := <-errc:
		log.Print(err)
		os.Exit(1)
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		log.Print(err)
	}
}
