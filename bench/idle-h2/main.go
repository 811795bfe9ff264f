// Command idle-h2 opens many HTTP/2 connections (cleartext, prior
// knowledge) to a proxy, makes one request on each, and then holds them
// open and idle, so that bench/run.sh can measure what an idle HTTP/2
// connection costs the proxy in memory. It prints "ready N" once every
// connection has had its answer, and exits when its standard input
// closes (or after -hold).
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

func main() {
	target := flag.String("target", "127.0.0.1:18080", "host:port of the proxy")
	conns := flag.Int("conns", 2000, "connections to open")
	path := flag.String("path", "/", "path of the one request made on each connection")
	hold := flag.Duration("hold", 5*time.Minute, "longest time to hold the connections")
	flag.Parse()
	log.SetFlags(0)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	open := make([]net.Conn, *conns)
	errs := make([]error, *conns)
	sem := make(chan struct{}, 64) // connections being opened at once
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
		log.Fatalf("idle-h2: %v", err)
	}
	fmt.Printf("ready %d\n", len(open))
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(*hold):
	}
	for _, c := range open {
		c.Close()
	}
}

// connect opens one connection, exchanges SETTINGS and makes one GET,
// reading frames until the answer has ended.
func connect(ctx context.Context, target, path string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", target)
	if err != nil {
		return nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", target}, {":path", path}} {
		_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	bw := bufio.NewWriter(c)
	fr := http2.NewFramer(bw, bufio.NewReader(c))
	_, _ = io.WriteString(bw, http2.ClientPreface)
	_ = fr.WriteSettings()
	_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndStream: true, EndHeaders: true})
	if err := bw.Flush(); err != nil {
		c.Close()
		return nil, err
	}
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("%s: %w", target, err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = fr.WriteSettingsAck()
			}
		case *http2.DataFrame:
			if f.StreamID == 1 && f.StreamEnded() {
				return c, finish(c, bw)
			}
		case *http2.HeadersFrame:
			if f.StreamID == 1 && f.StreamEnded() {
				return c, finish(c, bw)
			}
		case *http2.RSTStreamFrame:
			c.Close()
			return nil, fmt.Errorf("%s: stream reset (%v)", target, f.ErrCode)
		case *http2.GoAwayFrame:
			c.Close()
			return nil, fmt.Errorf("%s: GOAWAY (%v)", target, f.ErrCode)
		}
		if err := bw.Flush(); err != nil {
			c.Close()
			return nil, err
		}
	}
}

func finish(c net.Conn, bw *bufio.Writer) error {
	if err := bw.Flush(); err != nil {
		return err
	}
	return c.SetDeadline(time.Time{})
}
