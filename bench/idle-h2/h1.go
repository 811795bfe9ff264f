package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// connectH1 opens one connection and makes one HTTP/1.1 GET on it,
// reading the whole answer; the connection must stay open afterwards
// (no "Connection: close", nothing after the body).
func connectH1(ctx context.Context, target, path string) (net.Conn, error) {
	c, err := dial(ctx, target)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (net.Conn, error) {
		c.Close()
		return nil, fmt.Errorf("%s: %w", target, err)
	}
	if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", path, target); err != nil {
		return fail(err)
	}
	br := bufio.NewReaderSize(c, 4096)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return fail(err)
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	switch {
	case err != nil:
		return fail(err)
	case resp.StatusCode != http.StatusOK:
		return fail(fmt.Errorf("status %d", resp.StatusCode))
	case resp.Close:
		return fail(fmt.Errorf("the proxy closes the connection after the answer"))
	case br.Buffered() > 0:
		return fail(fmt.Errorf("%d bytes after the answer", br.Buffered()))
	}
	if err := c.SetDeadline(time.Time{}); err != nil {
		return fail(err)
	}
	return c, nil
}
