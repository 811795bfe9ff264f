package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// TestDeployManifestConfig checks that the ebb.yaml in the Kubernetes
// example (deploy/kubernetes.yaml) passes `ebb check`, so that the example
// does not rot as the configuration evolves.
func TestDeployManifestConfig(t *testing.T) {
	t.Parallel()
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.ReadFile(filepath.Join(root, "deploy", "kubernetes.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var config string
	var containers []container
	dec := yaml.NewDecoder(bytes.NewReader(f))
	for {
		var doc struct {
			Kind string            `yaml:"kind"`
			Data map[string]string `yaml:"data"`
			Spec struct {
				Template struct {
					Spec struct {
						Containers []container `yaml:"containers"`
					} `yaml:"spec"`
				} `yaml:"template"`
			} `yaml:"spec"`
		}
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("deploy/kubernetes.yaml: %v", err)
		}
		switch doc.Kind {
		case "ConfigMap":
			config = doc.Data["ebb.yaml"]
		case "Deployment":
			containers = doc.Spec.Template.Spec.Containers
		}
	}
	if config == "" {
		t.Fatal("deploy/kubernetes.yaml has no ConfigMap with an ebb.yaml")
	}
	path := writeConfig(t, config)
	if code, stdout, stderr := runOnce(t, nil, "check", "-config", path); code != 0 {
		t.Fatalf("ebb check of the example's ebb.yaml: status %d\n%s%s", code, stdout, stderr)
	}

	// The admin can drain and reload: loopback only. The probes go to the
	// probe port, which serves /live and /ready only.
	var cfg struct {
		Admin struct {
			Address      string `yaml:"address"`
			ProbeAddress string `yaml:"probe_address"`
		} `yaml:"admin"`
	}
	if err := yaml.Unmarshal([]byte(config), &cfg); err != nil {
		t.Fatal(err)
	}
	if host, _, err := net.SplitHostPort(cfg.Admin.Address); err != nil || !net.ParseIP(host).IsLoopback() {
		t.Errorf("the example's admin.address %q is not on loopback", cfg.Admin.Address)
	}
	_, probePort, err := net.SplitHostPort(cfg.Admin.ProbeAddress)
	if err != nil {
		t.Fatalf("the example's admin.probe_address %q: %v", cfg.Admin.ProbeAddress, err)
	}
	if len(containers) != 1 {
		t.Fatalf("the Deployment has %d containers, want 1", len(containers))
	}
	c := containers[0]
	for name, probe := range map[string]*httpProbe{"readiness": c.Readiness, "liveness": c.Liveness} {
		if probe == nil {
			t.Errorf("the Deployment has no %s probe", name)
			continue
		}
		port := ""
		for _, p := range c.Ports {
			if p.Name == probe.HTTPGet.Port || fmt.Sprint(p.ContainerPort) == probe.HTTPGet.Port {
				port = fmt.Sprint(p.ContainerPort)
			}
		}
		if port != probePort {
			t.Errorf("the %s probe goes to port %q (container port %q), want the probe port %s", name, probe.HTTPGet.Port, port, probePort)
		}
		if probe.HTTPGet.Path != "/ready" && probe.HTTPGet.Path != "/live" {
			t.Errorf("the %s probe asks %s, which the probe port does not serve", name, probe.HTTPGet.Path)
		}
	}
	for _, p := range c.Ports {
		if _, adminPort, _ := net.SplitHostPort(cfg.Admin.Address); fmt.Sprint(p.ContainerPort) == adminPort {
			t.Errorf("the Deployment declares the admin port %d: it is on loopback", p.ContainerPort)
		}
	}
}

// container is what TestDeployManifestConfig reads of a pod's container.
type container struct {
	Ports []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	Readiness *httpProbe `yaml:"readinessProbe"`
	Liveness  *httpProbe `yaml:"livenessProbe"`
}

type httpProbe struct {
	HTTPGet struct {
		Path string `yaml:"path"`
		Port string `yaml:"port"`
	} `yaml:"httpGet"`
}

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
