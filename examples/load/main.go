// Command load sends keep-alive HTTP/1.1 traffic to the example origin
// (examples/origin) through whatever stands in front of it, and counts
// the client errors: the load client of the compose topology
// (docker-compose.yml, deploy/compose/restart.sh).
//
//	load -url http://waf [-duration 20s] [-warm 200]
//
// Kinds of clients: GETs on keep-alive connections, POSTs of 1 to 20 KiB
// to /echo on keep-alive connections (each body must come back whole),
// and GETs each on a new connection. It prints "warm" once -warm requests
// have been answered, a line every 5 seconds, and at the end (after
// -duration, or on SIGTERM or SIGINT) a line per kind and "client errors:
// N". Exit status 0 when no client saw an error, 1 otherwise, 2 on bad
// usage.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/ebb-proxy/ebb/examples/loadgen"
)

// progressEvery is how often a progress line is printed.
const progressEvery = 5 * time.Second

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("load", flag.ContinueOnError)
	fs.SetOutput(stderr)
	target := fs.String("url", "http://127.0.0.1:8080", "where to send the load: the proxy in front of examples/origin")
	duration := fs.Duration("duration", 0, "stop after this long (0: on SIGTERM or SIGINT)")
	warm := fs.Int("warm", 200, `print "warm" once this many requests have been answered`)
	workers := fs.Int("workers", 2, "workers per kind of client")
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	u, err := url.Parse(*target)
	switch {
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "load: unexpected argument %q\n", fs.Arg(0))
		return 2
	case err != nil || u.Scheme != "http" || u.Host == "" || (u.Path != "" && u.Path != "/"):
		fmt.Fprintf(stderr, "load: -url: expected http://host[:port], got %q\n", *target)
		return 2
	case *duration < 0 || *warm < 1 || *workers < 1:
		fmt.Fprintln(stderr, "load: -duration must not be negative, -warm and -workers must be positive")
		return 2
	}
	base := "http://" + u.Host

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if *duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *duration)
		defer cancel()
	}
	began := time.Now()
	l, err := loadgen.Start(loadgen.Spec{Abandon: true, Groups: []loadgen.Group{
		{Kind: loadgen.Go("HTTP/1.1 keep-alive GET", loadgen.GoConfig{}), Addr: u.Host, Workers: *workers, Request: loadgen.Greeting},
		{Kind: loadgen.Go("HTTP/1.1 keep-alive POST", loadgen.GoConfig{}), Addr: u.Host, Workers: *workers, Request: loadgen.Echo()},
		{Kind: loadgen.Go("HTTP/1.1 new connections", loadgen.GoConfig{NoKeepAlive: true}), Addr: u.Host, Workers: *workers,
			Request: loadgen.Greeting},
	}})
	if err != nil {
		fmt.Fprintf(stderr, "load: %v\n", err)
		return 1
	}
	defer l.Close()
	fmt.Fprintf(stdout, "load: sending to %s\n", base)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	isWarm, nextProgress := false, began.Add(progressEvery)
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case now := <-tick.C:
			ok, errs := l.Counts()
			if !isWarm && ok >= *warm {
				isWarm = true
				fmt.Fprintf(stdout, "warm: %d answered, %d errors, after %.1fs\n", ok, errs, now.Sub(began).Seconds())
			}
			if !now.Before(nextProgress) {
				nextProgress = nextProgress.Add(progressEvery)
				fmt.Fprintf(stdout, "%5.1fs: %d answered, %d errors\n", now.Sub(began).Seconds(), ok, errs)
			}
		}
	}
	l.Stop()
	errs, lines := l.Report()
	for _, s := range lines {
		fmt.Fprintln(stdout, s)
	}
	fmt.Fprintf(stdout, "client errors: %d, in %.1fs\n", errs, time.Since(began).Seconds())
	if errs > 0 || !isWarm {
		if !isWarm {
			fmt.Fprintf(stdout, "load: fewer than %d requests were answered\n", *warm)
		}
		return 1
	}
	return 0
}
