package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ebb-proxy/ebb/admin"
)

// fakeEbb is an admin server whose Drain and Shutdown report their causes.
type fakeEbb struct {
	*admin.Server
	addr              string
	drains, shutdowns chan string
}

type alwaysReady struct{}

func (alwaysReady) Ready() (bool, string) { return true, "ready" }

func startFakeEbb(t *testing.T, withDrain bool) *fakeEbb {
	t.Helper()
	f := &fakeEbb{drains: make(chan string, 4), shutdowns: make(chan string, 4)}
	o := admin.Options{
		Address:   "127.0.0.1:0",
		Readiness: alwaysReady{},
		Config:    func() any { return nil },
		Log:       slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	if withDrain {
		o.Drain = func(cause string) { f.drains <- cause }
		o.Shutdown = func(cause string) { f.shutdowns <- cause }
	}
	s, err := admin.Start(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	f.Server, f.addr = s, s.Addr().String()
	return f
}

// closedAddr returns a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// checkGoroutines fails the test if goroutines started during it outlive it.
func checkGoroutines(t *testing.T) {
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for runtime.NumGoroutine() > before {
			select {
			case <-ctx.Done():
				t.Errorf("goroutines: %d before, %d after", before, runtime.NumGoroutine())
				return
			case <-tick.C:
			}
		}
	})
}

// cmdResult is what one ebb command did: its exit status and output.
type cmdResult struct {
	code     int
	out, err string
}

// runCmd runs the ebb command cmd with args, as main does.
func runCmd(cmd string, args ...string) cmdResult {
	var out, errOut strings.Builder
	code := run(append([]string{cmd}, args...), &out, &errOut)
	return cmdResult{code, out.String(), errOut.String()}
}

func runDrain(args ...string) cmdResult { return runCmd("drain", args...) }

func TestDrainAccepted(t *testing.T) {
	checkGoroutines(t)
	f := startFakeEbb(t, true)
	tests := []struct {
		args  []string
		calls chan string
		cause string
	}{
		{args: []string{"-admin", f.addr}, calls: f.drains, cause: "admin /drain from 127.0.0.1:"},
		// Again: a running drain accepts the request as well.
		{args: []string{"-admin", f.addr}, calls: f.drains, cause: "admin /drain from 127.0.0.1:"},
		{args: []string{"-admin", f.addr, "-now"}, calls: f.shutdowns, cause: "admin /shutdown?now from 127.0.0.1:"},
	}
	for _, tt := range tests {
		r := runDrain(tt.args...)
		if r.code != exitOK || !strings.Contains(r.out, "ebb at "+f.addr+": accepted") {
			t.Errorf("%q: exit %d, stdout %q, stderr %q", tt.args, r.code, r.out, r.err)
		}
		select {
		case cause := <-tt.calls:
			if !strings.HasPrefix(cause, tt.cause) {
				t.Errorf("%q: cause %q, want %q...", tt.args, cause, tt.cause)
			}
		default:
			t.Errorf("%q: callback not called", tt.args)
		}
	}
	if len(f.drains)+len(f.shutdowns) > 0 {
		t.Errorf("extra calls: %d drains, %d shutdowns", len(f.drains), len(f.shutdowns))
	}
}

func TestDrainFailures(t *testing.T) {
	checkGoroutines(t)
	closed := closedAddr(t)
	noDrain := startFakeEbb(t, false) // an ebb without /drain: 404
	tests := []struct {
		args []string
		err  string
	}{
		{[]string{"-admin", closed}, "ebb drain: asking ebb at " + closed + " to drain: dial tcp " + closed + ": connect: connection refused"},
		{[]string{"-admin", closed, "-now"}, "asking ebb at " + closed + " to close now: dial tcp"},
		{[]string{"-admin", noDrain.addr}, "asking ebb at " + noDrain.addr + " to drain: answered 404 Not Found: no such endpoint"},
	}
	for _, tt := range tests {
		r := runDrain(tt.args...)
		if r.code != exitFailed || !strings.Contains(r.err, tt.err) || r.out != "" {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want %d with %q", tt.args, r.code, r.out, r.err, exitFailed, tt.err)
		}
	}
}

func TestDrainConfig(t *testing.T) {
	f := startFakeEbb(t, true)
	cfg := func(adminAddr string) string { return writeAdminConfig(t, `address: "`+adminAddr+`"`) }
	r := runDrain("-config", cfg(f.addr))
	if r.code != exitOK || len(f.drains) != 1 {
		t.Errorf("admin.address from the file: exit %d, %d drains, stderr %q", r.code, len(f.drains), r.err)
	}
	r = runDrain("-config", cfg(closedAddr(t)), "-set", "admin.address="+f.addr)
	if r.code != exitOK || len(f.drains) != 2 {
		t.Errorf("admin.address from -set: exit %d, %d drains, stderr %q", r.code, len(f.drains), r.err)
	}
	t.Setenv("EBB_ADMIN__ADDRESS", f.addr)
	r = runDrain("-config", cfg(closedAddr(t)))
	if r.code != exitOK || len(f.drains) != 3 {
		t.Errorf("admin.address from the environment: exit %d, %d drains, stderr %q", r.code, len(f.drains), r.err)
	}
	r = runDrain("-config", filepath.Join(t.TempDir(), "missing.yaml"))
	if r.code != exitConfig || !strings.Contains(r.err, "missing.yaml: no such file") {
		t.Errorf("missing file: exit %d, stderr %q", r.code, r.err)
	}
}

func TestDrainWait(t *testing.T) {
	checkGoroutines(t)
	f := startFakeEbb(t, true)
	done := make(chan cmdResult, 1)
	go func() { done <- runDrain("-admin", f.addr, "-wait") }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	select {
	case <-f.drains:
	case <-ctx.Done():
		t.Fatal("the drain was not asked for")
	}
	// ebb "exits": the admin server goes away once the 202 is written.
	if err := f.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		if r.code != exitOK || !strings.Contains(r.out, "ebb at "+f.addr+": exited") {
			t.Errorf("exit %d, stdout %q, stderr %q", r.code, r.out, r.err)
		}
	case <-ctx.Done():
		t.Fatal("ebb drain -wait did not return after ebb exited")
	}
}

func TestDrainWaitTimeout(t *testing.T) {
	checkGoroutines(t)
	f := startFakeEbb(t, true) // never goes away
	start := time.Now()
	r := runDrain("-admin", f.addr, "-wait", "-timeout", "300ms")
	want := "ebb drain: waiting for ebb at " + f.addr + " to exit: still running after -timeout 300ms"
	if r.code != exitFailed || !strings.Contains(r.err, want) {
		t.Errorf("exit %d, stderr %q; want %d with %q", r.code, r.err, exitFailed, want)
	}
	if len(f.drains) != 1 {
		t.Errorf("%d drains, want 1", len(f.drains))
	}
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Errorf("returned after %s, before -timeout", d)
	}
}

// TestAdminToken: against an admin server that requires a token, ebb
// drain and ebb reload send the one in -token-file, or in the file
// admin.token_file names with -config; without it they fail and say why.
func TestAdminToken(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("0123456789abcdef0123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var drains, reloads atomic.Int32
	s, err := admin.Start(admin.Options{
		Address:   "127.0.0.1:0",
		Readiness: readyAlways{},
		Config:    func() any { return nil },
		Drain:     func(string) { drains.Add(1) },
		Reload: func(string) (any, bool) {
			reloads.Add(1)
			return reloadResult{Applied: true, Generation: 1}, true
		},
		Token: "0123456789abcdef0123",
		Log:   slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	addr := s.Addr().String()
	cfg := writeAdminConfig(t, `address: "`+addr+`", token_file: "`+tokenFile+`"`)

	if r := runDrain("-admin", addr); r.code != exitFailed || !strings.Contains(r.err, "401") || !strings.Contains(r.err, "admin.token_file") || drains.Load() != 0 {
		t.Errorf("drain without the token: exit %d, stderr %q, %d drains", r.code, r.err, drains.Load())
	}
	if r := runDrain("-admin", addr, "-token-file", tokenFile); r.code != exitOK || drains.Load() != 1 {
		t.Errorf("drain with -token-file: exit %d, stderr %q", r.code, r.err)
	}
	if r := runDrain("-config", cfg); r.code != exitOK || drains.Load() != 2 {
		t.Errorf("drain with admin.token_file: exit %d, stderr %q", r.code, r.err)
	}
	short := filepath.Join(dir, "short")
	os.WriteFile(short, []byte("abc"), 0o600)
	if r := runDrain("-admin", addr, "-token-file", short); r.code != exitUsage || !strings.Contains(r.err, "at least 16 characters") {
		t.Errorf("drain with a short token: exit %d, stderr %q", r.code, r.err)
	}

	var out, errOut strings.Builder
	if code := run([]string{"reload", "-admin", addr}, &out, &errOut); code != exitFailed || !strings.Contains(errOut.String(), "401") || reloads.Load() != 0 {
		t.Errorf("reload without the token: exit %d, stderr %q", code, errOut.String())
	}
	out.Reset()
	errOut.Reset()
	if code := run([]string{"reload", "-config", cfg}, &out, &errOut); code != exitOK || reloads.Load() != 1 {
		t.Errorf("reload with admin.token_file: exit %d, stdout %q, stderr %q", code, out.String(), errOut.String())
	}
}

type readyAlways struct{}

func (readyAlways) Ready() (bool, string) { return true, "ready" }

// writeAdminConfig writes a valid configuration whose admin section holds
// admin (the inside of its braces) and returns its path.
func writeAdminConfig(t *testing.T, admin string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ebb.yaml")
	err := os.WriteFile(path, []byte(`
admin: { `+admin+` }
listeners:
  - name: public
    address: 127.0.0.1:0
    routes: [{ match: { path_prefix: "/" }, cluster: app }]
clusters:
  - name: app
    discovery: { static: ["127.0.0.1:9000"] }
`), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	return path
}
