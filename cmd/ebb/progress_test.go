package main

import (
	"context"
	"io"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ebb-proxy/ebb/admin"
	"github.com/ebb-proxy/ebb/config"
	"github.com/ebb-proxy/ebb/drain"
	"github.com/ebb-proxy/ebb/proxy/downstream"
)

type noServer struct{}

func (noServer) StopAccepting() {}
func (noServer) Close() error   { return nil }

// startDrainingEbb is an admin server in front of a real drain
// controller with no connections and a 1.2 s announce phase; once the
// drain has ended, the admin server goes away as ebb's does at its exit.
func startDrainingEbb(t *testing.T) string {
	t.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg := config.Drain{Delay: 1200 * time.Millisecond, Quiet: 100 * time.Millisecond, Timeout: 20 * time.Second,
		AcceptUntil: config.AcceptUntilExit, HTTP1: config.DrainHTTP1{IdleClose: config.IdleClose(time.Second)}}
	ctl := drain.NewController(cfg, downstream.NewRegistry(), noServer{}, quiet)
	s, err := admin.Start(admin.Options{Address: "127.0.0.1:0", Readiness: alwaysReady{}, Config: func() any { return nil },
		Drain: ctl.Trigger, Shutdown: ctl.Force, Timeline: ctl.Timeline(), Log: quiet})
	if err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		ctl.Run(context.Background())
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		s.Shutdown(ctx)
	}()
	t.Cleanup(func() {
		ctl.Force("test over")
		<-exited
	})
	return s.Addr().String()
}

// TestDrainWaitProgress: `ebb drain -wait` shows the drain as it goes,
// as plain lines (a line per phase, at most one a second within one) or
// as a line rewritten in place, then the summary and the exit reason,
// then the exit.
func TestDrainWaitProgress(t *testing.T) {
	checkGoroutines(t)
	line := regexp.MustCompile(`^drain (announce|signal|wait|exit) +\d+\.\ds since the trigger, +\d+\.\ds left \| connections 0: HTTP/1 0, HTTP/2 0, WebSocket 0, silent 0 \| in flight 0 \(event streams 0\)$`)
	for _, mode := range []string{progressLines, progressInPlace, progressOff} {
		t.Run(mode, func(t *testing.T) {
			addr := startDrainingEbb(t)
			r := runDrain("-admin", addr, "-wait", "-progress", mode)
			if r.code != exitOK || r.err != "" {
				t.Fatalf("exit %d, stderr %q, stdout %q", r.code, r.err, r.out)
			}
			lines := strings.Split(strings.TrimSuffix(r.out, "\n"), "\n")
			if lines[0] != "ebb at "+addr+": accepted (drain)" || lines[len(lines)-1] != "ebb at "+addr+": exited" {
				t.Fatalf("stdout:\n%s", r.out)
			}
			n := len(lines)
			if !strings.HasPrefix(lines[n-3], "The drain (admin /drain from 127.0.0.1:") || !strings.Contains(lines[n-3], "ended drained after 1.2") {
				t.Errorf("no summary before the end:\n%s", r.out)
			}
			if !regexp.MustCompile(`^ebb at .*: drain ended: drained after 1\.2\ds, 0 connections closed by force \(ebb exits 0\)$`).MatchString(lines[n-2]) {
				t.Errorf("no exit reason before the end:\n%s", r.out)
			}
			progress := lines[1 : n-3]
			var phases []string
			for _, l := range progress {
				if mode == progressInPlace {
					// Each state rewrites the line; the last one of a
					// phase stays.
					parts := strings.Split(l, "\r\x1b[K")
					if parts[0] != "" || len(parts) < 2 {
						t.Fatalf("an in-place line does not rewrite itself: %q", l)
					}
					l = parts[len(parts)-1]
				} else if strings.Contains(l, "\x1b") {
					t.Fatalf("an escape sequence in plain lines: %q", l)
				}
				if !line.MatchString(l) {
					t.Fatalf("progress line %q", l)
				}
				if p := strings.Fields(l)[1]; len(phases) == 0 || phases[len(phases)-1] != p {
					phases = append(phases, p)
				}
			}
			switch mode {
			case progressOff:
				if len(progress) != 0 {
					t.Errorf("-progress off showed progress:\n%s", r.out)
				}
			case progressLines:
				// A line for each phase, and within the 1.2 s of the
				// announce phase a second one, a second after the first.
				if got := strings.Join(phases, " "); got != "announce signal wait exit" {
					t.Errorf("phases %q, want announce signal wait exit:\n%s", got, r.out)
				}
				for i := 1; i < len(progress); i++ {
					a, b := strings.Fields(progress[i-1]), strings.Fields(progress[i])
					at0, _ := strconv.ParseFloat(strings.TrimSuffix(a[2], "s"), 64)
					at1, _ := strconv.ParseFloat(strings.TrimSuffix(b[2], "s"), 64)
					if a[1] == b[1] && at1-at0 < 0.95 {
						t.Errorf("two lines of one phase less than a second apart:\n%s\n%s", progress[i-1], progress[i])
					}
				}
			case progressInPlace:
				if got := strings.Join(phases, " "); got != "announce signal wait exit" || len(progress) != 4 {
					t.Errorf("phases %q in %d lines, want a line for each of announce signal wait exit:\n%q", got, len(progress), r.out)
				}
			}
		})
	}
}

func TestDrainProgressFlag(t *testing.T) {
	r := runDrain("-admin", "127.0.0.1:1", "-wait", "-progress", "fancy")
	if r.code != exitUsage || !strings.Contains(r.err, `ebb drain: -progress: expected auto, inplace, lines or off, got "fancy"`) {
		t.Errorf("exit %d, stderr %q", r.code, r.err)
	}
	var b strings.Builder
	if got := resolveProgress(progressAuto, &b); got != progressLines {
		t.Errorf("-progress auto on a pipe: %s, want lines", got)
	}
}
