package main

import (
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/ebb-proxy/ebb/admin"
)

// switchReady is ready until drained is set.
type switchReady struct{ drained atomic.Bool }

func (r *switchReady) Ready() (bool, string) {
	if r.drained.Load() {
		return false, "draining: phase signal"
	}
	return true, "ready"
}

func runHealth(args ...string) cmdResult { return runCmd("health", args...) }

// TestHealth: ebb health answers 0 while /ready is 200 and 1 with the
// reason once it is not, asks the probe address before the admin one,
// and rejects bad usage with 2.
func TestHealth(t *testing.T) {
	ready := &switchReady{}
	s, err := admin.Start(admin.Options{
		Address:      "127.0.0.1:0",
		ProbeAddress: "127.0.0.1:0",
		Readiness:    ready,
		Config:       func() any { return nil },
		Log:          slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	adminAddr, probeAddr := s.Addr().String(), s.ProbeListener().Addr().String()

	if r := runHealth("-admin", adminAddr); r.code != exitOK || !strings.Contains(r.out, "200 OK ready") {
		t.Errorf("ready: exit %d, stdout %q, stderr %q; want 0 and 200 OK ready", r.code, r.out, r.err)
	}
	if r := runHealth("-admin", probeAddr, "-path", "/live"); r.code != exitOK {
		t.Errorf("-path /live: exit %d, stderr %q", r.code, r.err)
	}
	// The probe address wins over admin.address (here closed).
	cfg := writeAdminConfig(t, `address: "`+closedAddr(t)+`", probe_address: "`+probeAddr+`"`)
	if r := runHealth("-config", cfg); r.code != exitOK || !strings.Contains(r.out, probeAddr) {
		t.Errorf("-config with a probe address: exit %d, stdout %q, stderr %q; want 0, asked at %s", r.code, r.out, r.err, probeAddr)
	}
	if r := runHealth("-url", "http://"+adminAddr+"/live"); r.code != exitOK {
		t.Errorf("-url: exit %d, stderr %q", r.code, r.err)
	}

	ready.drained.Store(true)
	if r := runHealth("-admin", adminAddr); r.code != exitFailed || !strings.Contains(r.err, "503 Service Unavailable draining: phase signal") {
		t.Errorf("draining: exit %d, stderr %q; want 1 with the 503 and the phase", r.code, r.err)
	}
	closed := closedAddr(t)
	if r := runHealth("-admin", closed); r.code != exitFailed || !strings.Contains(r.err, "connection refused") {
		t.Errorf("nothing listening: exit %d, stderr %q; want 1, connection refused", r.code, r.err)
	}

	for _, args := range [][]string{
		{"-url", "ftp://x/"},
		{"-url", "http://" + adminAddr + "/", "-path", "/live"},
		{"-admin", "nohost"},
		{"-path", "ready"},
		{"-set", "admin.address=x"},
		{"extra"},
	} {
		if r := runHealth(args...); r.code != exitUsage || r.err == "" {
			t.Errorf("%q: exit %d, stderr %q; want %d and why", args, r.code, r.err, exitUsage)
		}
	}
}

func TestHealthURL(t *testing.T) {
	for addr, want := range map[string]string{
		"0.0.0.0:9902":   "http://127.0.0.1:9902/ready",
		":9902":          "http://127.0.0.1:9902/ready",
		"[::]:9902":      "http://[::1]:9902/ready",
		"10.0.0.5:9902":  "http://10.0.0.5:9902/ready",
		"localhost:9901": "http://localhost:9901/ready",
	} {
		if got, ok := healthURL(addr, "/ready"); !ok || got != want {
			t.Errorf("healthURL(%q) = %q, %v; want %q", addr, got, ok, want)
		}
	}
	if _, ok := healthURL("9902", "/ready"); ok {
		t.Error(`healthURL("9902") accepted an address without a port`)
	}
}
