package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestValidateKubernetes(t *testing.T) {
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte("apiVersion: v1\nkind: Config\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		src  string   // the value of discovery.kubernetes
		want []string // problems; none if empty
	}{
		{name: "namespace and service", src: `{ namespace: shop, service: app }`},
		{name: "named port and kubeconfig", src: `{ namespace: shop, service: app, port: http, kubeconfig: "` + kubeconfig + `" }`},
		{name: "numeric port", src: `{ namespace: shop, service: app, port: "8080" }`},
		{
			name: "missing namespace and service",
			src:  `{ port: http }`,
			want: []string{
				"clusters[0].discovery.kubernetes.namespace: missing: the namespace of the Service",
				"clusters[0].discovery.kubernetes.service: missing: the name of the Service",
			},
		},
		{
			name: "bad names and port",
			src:  `{ namespace: Shop_1, service: "-app", port: "70000" }`,
			want: []string{
				`clusters[0].discovery.kubernetes.namespace: expected a namespace name (lowercase letters, digits and '-', at most 63), got "Shop_1"`,
				`clusters[0].discovery.kubernetes.service: expected a Service name`,
				"clusters[0].discovery.kubernetes.port: expected a port number from 1 to 65535 or a port name, got 70000",
			},
		},
		{
			name: "bad port name",
			src:  `{ namespace: shop, service: app, port: "http web" }`,
			want: []string{`clusters[0].discovery.kubernetes.port: expected a port name of the Service (such as http) or a number, got "http web"`},
		},
		{
			name: "missing kubeconfig",
			src:  `{ namespace: shop, service: app, kubeconfig: /nonexistent/kubeconfig }`,
			want: []string{"clusters[0].discovery.kubernetes.kubeconfig: cannot read /nonexistent/kubeconfig: no such file or directory"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			yaml := strings.Replace(minimal, `discovery: { static: ["127.0.0.1:9000"] }`, `discovery: { kubernetes: `+tt.src+` }`, 1)
			cfg, err := Load(writeConfig(t, yaml), Options{})
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				if k := cfg.Clusters[0].Discovery.Kubernetes; k == nil || k.Namespace != "shop" || k.Service != "app" {
					t.Fatalf("kubernetes source %+v", k)
				}
				return
			}
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("err = %v, want a *config.Error", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q; it is:\n%s", w, err)
				}
			}
		})
	}
}
