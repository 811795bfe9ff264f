// Package discovery produces the endpoint sets of clusters. A source
// delivers immutable snapshots, latest wins, and keeps its last good set
// when it errs. Sources know nothing about proxying: the proxy consumes
// the sets.
//
// This package has the static, file and DNS sources; the Kubernetes source,
// on client-go, is package discovery/kubernetes, which plugs into New
// (UseKubernetes) where a program links it in (cmd/ebb).
package discovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"github.com/ebb-proxy/ebb/config"
)

// Endpoint is one upstream address.
type Endpoint struct {
	// Address is host:port.
	Address string
	// State says whether the endpoint takes new requests freely or only as
	// a last resort. The zero value is Ready.
	State EndpointState
}

// EndpointState is the readiness of an endpoint, as far as its source knows.
// Lower is better: a consumer merging two states of one address keeps the
// lower.
type EndpointState uint8

const (
	// Ready endpoints take new requests. Sources without a notion of
	// readiness (static, file, DNS) deliver only ready endpoints.
	Ready EndpointState = iota
	// Serving endpoints are terminating but still serve (a Kubernetes
	// endpoint with ready=false, serving=true, terminating=true): use them
	// only while no ready endpoint is left, so that a Service whose pods
	// are all being replaced keeps answering.
	Serving
	// Terminating endpoints are going away and no longer serve. No source
	// in this package delivers them: an endpoint that does not serve is
	// left out of the set, which is how a consumer learns to send it no new
	// request while requests in flight on it finish. The state exists so
	// that a consumer that keeps a removed endpoint around (to finish its
	// requests, or for /endpoints) can name it.
	Terminating
)

// String returns the state's name, for /endpoints and logs.
func (s EndpointState) String() string {
	switch s {
	case Ready:
		return "ready"
	case Serving:
		return "serving"
	case Terminating:
		return "terminating"
	}
	return fmt.Sprintf("EndpointState(%d)", uint8(s))
}

// Set is an immutable snapshot of a cluster's endpoints.
type Set struct {
	Endpoints []Endpoint
	// Source names where the set came from, for /endpoints and logs.
	Source string
	// Updated is when the source produced it.
	Updated time.Time
}

// Addresses returns the endpoints' addresses in order.
func (s Set) Addresses() []string {
	out := make([]string, len(s.Endpoints))
	for i, e := range s.Endpoints {
		out[i] = e.Address
	}
	return out
}

// Source watches one cluster's endpoints.
type Source interface {
	// Load returns the current set once, without watching: the proxy calls
	// it at start so that the first requests have endpoints.
	Load() (Set, error)
	// Run calls update with each new set, from one goroutine, until ctx
	// ends; update must not block for long. A source that errs keeps its
	// last good set (it does not call update) and logs why.
	Run(ctx context.Context, update func(Set)) error
}

// New returns the source configured for a cluster.
func New(d config.Discovery, log *slog.Logger) (Source, error) {
	switch {
	case d.Static != nil:
		return NewStatic(d.Static), nil
	case d.File != "":
		return NewFile(d.File, log), nil
	case d.DNS != nil:
		return NewDNS(d.DNS.Name, d.DNS.Port, d.DNS.Refresh, d.DNS.Server, log), nil
	case d.Kubernetes != nil:
		newKube := kubernetes.Load()
		if newKube == nil {
			return nil, errors.New("discovery: Kubernetes sources are not built into this program (package discovery/kubernetes, Use)")
		}
		return (*newKube)(*d.Kubernetes, log)
	}
	return nil, fmt.Errorf("discovery: no supported source configured")
}

// KubernetesFunc builds a source for a Kubernetes Service.
type KubernetesFunc func(config.KubernetesSrc, *slog.Logger) (Source, error)

// kubernetes is the builder of Kubernetes sources, set by UseKubernetes;
// nil until then.
var kubernetes atomic.Pointer[KubernetesFunc]

// UseKubernetes has New build Kubernetes sources with f. Package
// discovery/kubernetes (Use) passes its own: this package does not import
// client-go, so that the data path, which builds its clusters' sources
// here, does not either.
func UseKubernetes(f KubernetesFunc) { kubernetes.Store(&f) }

// Static is a fixed list of endpoints.
type Static struct {
	set Set
}

// NewStatic returns a source that always has addrs.
func NewStatic(addrs []string) *Static {
	eps := make([]Endpoint, len(addrs))
	for i, a := range addrs {
		eps[i] = Endpoint{Address: a}
	}
	return &Static{set: Set{Endpoints: eps, Source: "static", Updated: time.Now()}}
}

// Load returns the set.
func (s *Static) Load() (Set, error) {
	return Set{Endpoints: slices.Clone(s.set.Endpoints), Source: s.set.Source, Updated: s.set.Updated}, nil
}

// Run delivers the set once and waits for ctx to end.
func (s *Static) Run(ctx context.Context, update func(Set)) error {
	set, _ := s.Load()
	update(set)
	<-ctx.Done()
	return nil
}
