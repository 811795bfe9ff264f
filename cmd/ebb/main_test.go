package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ebb-proxy/ebb/config"
	"github.com/ebb-proxy/ebb/discovery"
)

func TestCommands(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("listeners: [{name: a, adress: ':1'}]\n"), 0o600)
	tests := []struct {
		args     []string
		code     int
		out, err string
	}{
		{args: []string{"version"}, code: exitOK, out: "ebb "},
		{args: []string{"help"}, code: exitOK, out: "usage:"},
		{args: []string{"frobnicate"}, code: exitUsage, err: `unknown command "frobnicate"`},
		{args: []string{"check", "-nope"}, code: exitUsage, err: "flag provided but not defined: -nope"},
		{args: []string{"check", "-config", bad, "extra"}, code: exitUsage, err: `unexpected argument "extra"`},
		{args: []string{"check", "-config", "../../examples/ebb.yaml"}, code: exitOK, out: "examples/ebb.yaml: ok"},
		{args: []string{"check", "-config", bad}, code: exitConfig, err: "bad.yaml: listeners[0].adress: unknown key (did you mean \"address\"?)"},
		{args: []string{"run", "-config", bad}, code: exitConfig, err: "listeners[0].adress: unknown key"},
		{args: []string{"-config", filepath.Join(dir, "missing.yaml")}, code: exitConfig, err: "missing.yaml: no such file"},
		{args: []string{"drain", "-h"}, code: exitOK, err: "-wait"},
		{args: []string{"drain", "-nope"}, code: exitUsage, err: "flag provided but not defined: -nope"},
		{args: []string{"drain", "now"}, code: exitUsage, err: `ebb drain: unexpected argument "now"`},
		{args: []string{"drain", "-admin", "127.0.0.1"}, code: exitUsage, err: `-admin: expected host:port, got "127.0.0.1"`},
		{args: []string{"drain", "-admin", ":1", "-config", bad}, code: exitUsage, err: "-admin and -config both name the admin address"},
		{args: []string{"drain", "-set", "admin.address=:1"}, code: exitUsage, err: "-set needs -config"},
		{args: []string{"drain", "-timeout", "0s"}, code: exitUsage, err: "-timeout must be positive"},
		{args: []string{"drain", "-config", bad}, code: exitConfig, err: "listeners[0].adress: unknown key"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var out, errOut strings.Builder
			code := run(tt.args, &out, &errOut)
			if code != tt.code {
				t.Errorf("exit %d, want %d (stderr: %s)", code, tt.code, errOut.String())
			}
			if !strings.Contains(out.String(), tt.out) {
				t.Errorf("stdout %q lacks %q", out.String(), tt.out)
			}
			if !strings.Contains(errOut.String(), tt.err) {
				t.Errorf("stderr %q lacks %q", errOut.String(), tt.err)
			}
		})
	}
}

// TestCheckEnvironment runs ebb check as a user would in a pod of a
// namespace with a Service named ebb: the service-link variables do not
// stop it and are not mentioned; a misspelt variable is listed as a
// warning, with the name meant, and the check still passes.
func TestCheckEnvironment(t *testing.T) {
	t.Setenv("EBB_SERVICE_HOST", "10.0.0.1")
	t.Setenv("EBB_SERVICE_PORT", "80")
	t.Setenv("EBB_PORT", "tcp://10.0.0.1:80")
	t.Setenv("EBB_PORT_80_TCP_ADDR", "10.0.0.1")
	t.Setenv("EBB_DRAIN_TIMEOUT", "40s")
	var out, errOut strings.Builder
	if code := run([]string{"check", "-config", "../../examples/ebb.yaml"}, &out, &errOut); code != exitOK {
		t.Fatalf("exit %d, want %d (stderr: %s)", code, exitOK, errOut.String())
	}
	if !strings.Contains(out.String(), "examples/ebb.yaml: ok") {
		t.Errorf("stdout %q, want the file reported ok", out.String())
	}
	want := "ebb: config: warning: environment EBB_DRAIN_TIMEOUT: not a configuration key (the top-level keys are admin, listeners, clusters, drain, telemetry, reload, takeover); ignored; did you mean EBB_DRAIN__TIMEOUT? Levels are separated by two underscores\n"
	if errOut.String() != want {
		t.Errorf("stderr:\n%s\nwant exactly:\n%s", errOut.String(), want)
	}
}

// TestCheckTracing: with tracing on, ebb check fails, as ebb run would,
// on an OTLP protocol from the environment that ebb cannot export with,
// and on TLS towards an http:// endpoint; with tracing off the variable
// does not matter.
func TestCheckTracing(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "")
	dir := t.TempDir()
	write := func(name, tracing string) string {
		path := filepath.Join(dir, name)
		yaml := "listeners: [{ name: a, address: '127.0.0.1:0', routes: [{ cluster: c }] }]\n" +
			"clusters: [{ name: c, discovery: { static: ['127.0.0.1:1'] } }]\n" +
			"telemetry: { tracing: " + tracing + " }\n"
		if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	on := write("on.yaml", "{ enabled: true }")
	off := write("off.yaml", "{ enabled: false }")
	tlsHTTP := write("tls.yaml", "{ enabled: true, protocol: http/protobuf, endpoint: 'http://collector:4318', tls: { insecure_skip_verify: true } }")
	for _, tc := range []struct {
		path, protocol string
		code           int
		err            string
	}{
		{path: on, protocol: "http/json", code: exitConfig, err: `ebb: telemetry: OTLP protocol "http/json" (OTEL_EXPORTER_OTLP_PROTOCOL): expected grpc or http/protobuf`},
		{path: on, protocol: "http/protobuf", code: exitOK},
		{path: off, protocol: "http/json", code: exitOK},
		{path: tlsHTTP, code: exitConfig, err: "tls.yaml: telemetry.tracing.tls: set, but telemetry.tracing.endpoint is http:// (no TLS): use an https:// endpoint or remove tls"},
	} {
		t.Run(filepath.Base(tc.path)+" "+tc.protocol, func(t *testing.T) {
			t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", tc.protocol)
			var out, errOut strings.Builder
			code := run([]string{"check", "-config", tc.path}, &out, &errOut)
			if code != tc.code {
				t.Errorf("exit %d, want %d (stderr: %s)", code, tc.code, errOut.String())
			}
			if !strings.Contains(errOut.String(), tc.err) {
				t.Errorf("stderr %q lacks %q", errOut.String(), tc.err)
			}
			if ok := strings.Contains(out.String(), ": ok"); ok != (tc.code == exitOK) {
				t.Errorf("stdout %q; want ok only when the check passes", out.String())
			}
		})
	}
}

// TestKubernetesWiredIn: the binary builds Kubernetes sources (package
// discovery does not import client-go; cmd/ebb plugs it in). A kubeconfig
// that does not exist fails as client-go's configuration, not as a source
// missing from the program.
func TestKubernetesWiredIn(t *testing.T) {
	_, err := discovery.New(config.Discovery{Kubernetes: &config.KubernetesSrc{Namespace: "shop", Service: "app",
		Kubeconfig: filepath.Join(t.TempDir(), "missing")}}, nil)
	if err == nil || !strings.Contains(err.Error(), "configuring the Kubernetes client for shop/app") {
		t.Fatalf("discovery.New with a Kubernetes source: %v; want client-go's configuration error", err)
	}
}
