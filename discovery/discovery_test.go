package discovery

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/ebb-proxy/ebb/config"
)

func TestStatic(t *testing.T) {
	src, err := New(config.Discovery{Static: []string{"127.0.0.1:1", "127.0.0.1:2"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	sets := make(chan Set, 1)
	done := make(chan error)
	go func() { done <- src.Run(ctx, func(s Set) { sets <- s }) }()
	s := <-sets
	if got := s.Addresses(); !slices.Equal(got, []string{"127.0.0.1:1", "127.0.0.1:2"}) || s.Source != "static" {
		t.Fatalf("set = %v from %s", got, s.Source)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// Sets are snapshots: changing one changes nothing else.
	s.Endpoints[0].Address = "x"
	if again, _ := src.Load(); again.Endpoints[0].Address != "127.0.0.1:1" {
		t.Fatal("a delivered set aliases the source")
	}
}

func TestNewWithoutSource(t *testing.T) {
	if _, err := New(config.Discovery{}, nil); err == nil {
		t.Fatal("no error for a discovery with no source")
	}
}

// TestNewKubernetesNotLinked: a Kubernetes source asked of a program that
// did not link package discovery/kubernetes in is an error that says so.
func TestNewKubernetesNotLinked(t *testing.T) {
	src, err := New(config.Discovery{Kubernetes: &config.KubernetesSrc{Namespace: "shop", Service: "app"}}, nil)
	if err == nil || src != nil || !strings.Contains(err.Error(), "not built into this program") {
		t.Fatalf("New = %v, %v; want the error that Kubernetes sources are not built in", src, err)
	}
}
