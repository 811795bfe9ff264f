package config

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// TestEnvironmentNotOurs checks the environment rule: the variables
// Kubernetes injects for a Service named ebb never stop ebb and are not
// reported; other EBB_ variables that name no top-level key are ignored
// and reported with the name they were probably meant to have; a variable
// that addresses a section is read, and a misspelt key in it is an error.
func TestEnvironmentNotOurs(t *testing.T) {
	serviceLinks := []string{
		"EBB_SERVICE_HOST=10.0.0.1",
		"EBB_SERVICE_PORT=80",
		"EBB_SERVICE_PORT_HTTP=80",
		"EBB_SERVICE_PORT_ADMIN_API=9901",
		"EBB_PORT=tcp://10.0.0.1:80",
		"EBB_PORT_80_TCP=tcp://10.0.0.1:80",
		"EBB_PORT_80_TCP_PROTO=tcp",
		"EBB_PORT_80_TCP_PORT=80",
		"EBB_PORT_80_TCP_ADDR=10.0.0.1",
		"EBB_PORT_53_UDP_ADDR=10.0.0.1",
	}
	t.Run("service links", func(t *testing.T) {
		cfg, err := Load(writeConfig(t, minimal), Options{Environ: append(serviceLinks, "EBB_DRAIN__DELAY=4s")})
		if err != nil {
			t.Fatalf("Load: %v; the Kubernetes service-link variables must not stop ebb", err)
		}
		if len(cfg.Ignored) != 0 {
			t.Errorf("Ignored = %v, want none: service links are not reported", cfg.Ignored)
		}
		if cfg.Drain.Delay != 4*time.Second {
			t.Errorf("drain.delay = %v, want 4s from EBB_DRAIN__DELAY next to the service links", cfg.Drain.Delay)
		}
	})
	t.Run("reported", func(t *testing.T) {
		cfg, err := Load(writeConfig(t, minimal), Options{Environ: []string{
			"EBB_DRAIN_TIMEOUT=40s",        // one underscore
			"EBB_DRIAN__TIMEOUT=40s",       // misspelt section
			"EBB_LISTENER__0__ADDRESS=x",   // singular
			"EBB_VERSION=1.2",              // someone else's
			"EBB_SERVICE_HOSTNAME=a.local", // not a service link
		}})
		if err != nil {
			t.Fatalf("Load: %v; variables that are not config keys must not stop ebb", err)
		}
		var got []string
		for _, p := range cfg.Ignored {
			got = append(got, p.String())
		}
		const ignored = ": not a configuration key (the top-level keys are admin, listeners, clusters, drain, telemetry, reload, takeover); ignored"
		want := []string{
			"environment EBB_DRAIN_TIMEOUT" + ignored + "; did you mean EBB_DRAIN__TIMEOUT? Levels are separated by two underscores",
			"environment EBB_DRIAN__TIMEOUT" + ignored + "; did you mean EBB_DRAIN__TIMEOUT?",
			"environment EBB_LISTENER__0__ADDRESS" + ignored + "; did you mean EBB_LISTENERS__0__ADDRESS?",
			"environment EBB_VERSION" + ignored,
			"environment EBB_SERVICE_HOSTNAME" + ignored,
		}
		if !slices.Equal(got, want) {
			t.Errorf("Ignored:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		if cfg.Drain.Timeout == 40*time.Second {
			t.Error("drain.timeout was set from a variable that is not its name")
		}
	})
	t.Run("misspelt key in a section is an error", func(t *testing.T) {
		_, err := Load(writeConfig(t, minimal), Options{Environ: []string{"EBB_DRAIN__TIMEOUTT=40s"}})
		if err == nil || !strings.Contains(err.Error(), "environment EBB_DRAIN__TIMEOUTT: drain.timeoutt: unknown key (did you mean \"timeout\"?)") {
			t.Fatalf("err = %v; want the unknown key named, with its source", err)
		}
	})
}
