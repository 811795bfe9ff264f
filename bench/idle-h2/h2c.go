package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// connectH2C opens one connection, exchanges SETTINGS and makes one GET,
// reading frames until the answer has ended.
func connectH2C(ctx context.Context, target, path string) (net.Conn, error) {
	c, err := dial(ctx, target)
	if err != nil {
		return nil, err
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
				return c, finishH2C(c, bw)
			}
		case *http2.HeadersFrame:
			if f.StreamID == 1 && f.StreamEnded() {
				return c, finishH2C(c, bw)
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

func finishH2C(c net.Conn, bw *bufio.Writer) error {
	if err := bw.Flush(); err != nil {
		return err
	}
	return c.SetDeadline(time.Time{})
}
