package e2e

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
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
	dec := yaml.NewDecoder(bytes.NewReader(f))
	for {
		var doc struct {
			Kind string            `yaml:"kind"`
			Data map[string]string `yaml:"data"`
		}
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("deploy/kubernetes.yaml: %v", err)
		}
		if doc.Kind == "ConfigMap" {
			config = doc.Data["ebb.yaml"]
		}
	}
	if config == "" {
		t.Fatal("deploy/kubernetes.yaml has no ConfigMap with an ebb.yaml")
	}
	path := writeConfig(t, config)
	if code, stdout, stderr := runOnce(t, nil, "check", "-config", path); code != 0 {
		t.Fatalf("ebb check of the example's ebb.yaml: status %d\n%s%s", code, stdout, stderr)
	}
}
