package e2e

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// TestComposeAdminOnLoopback: docker-compose.yml keeps ebb's admin on
// the container's loopback (the default) and publishes the probe port.
func TestComposeAdminOnLoopback(t *testing.T) {
	t.Parallel()
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.ReadFile(filepath.Join(root, "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var compose struct {
		Services map[string]struct {
			Environment map[string]string `yaml:"environment"`
			Ports       []string          `yaml:"ports"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(f, &compose); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	ebb, ok := compose.Services["ebb"]
	if !ok {
		t.Fatal("docker-compose.yml has no ebb service")
	}
	if a, set := ebb.Environment["EBB_ADMIN__ADDRESS"]; set {
		if host, _, err := net.SplitHostPort(a); err != nil || !net.ParseIP(host).IsLoopback() {
			t.Errorf("docker-compose.yml binds ebb's admin on %q, not loopback", a)
		}
	}
	probe := ebb.Environment["EBB_ADMIN__PROBE_ADDRESS"]
	_, port, err := net.SplitHostPort(probe)
	if err != nil {
		t.Fatalf("docker-compose.yml: EBB_ADMIN__PROBE_ADDRESS %q: %v", probe, err)
	}
	published := false
	for _, p := range ebb.Ports {
		published = published || strings.HasSuffix(p, ":"+port)
	}
	if !published {
		t.Errorf("docker-compose.yml does not publish the probe port %s: %v", port, ebb.Ports)
	}
}
