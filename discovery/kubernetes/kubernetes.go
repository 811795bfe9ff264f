// Package kubernetes is the discovery source of clusters that name a
// Kubernetes Service: it watches the Service's EndpointSlices with
// client-go and turns them into endpoint sets (ready endpoints, and those
// still serving while they terminate). It stands apart from package
// discovery so that client-go stays out of the data path: cmd/ebb plugs
// it in (Use).
package kubernetes

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/go-logr/logr"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	apiwatch "k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/ebb-proxy/ebb/config"
	"github.com/ebb-proxy/ebb/discovery"
)

// kubernetesTimeout bounds Load's one List call.
const kubernetesTimeout = 10 * time.Second

// apiLogInterval is the least time between two logged failures to reach
// the Kubernetes API: client-go retries with backoff on its own, and every
// retry would otherwise be a log line.
const apiLogInterval = time.Minute

// Kubernetes watches the EndpointSlices of a Service with a client-go
// informer and delivers their endpoints.
//
// An endpoint is discovery.Ready when its ready condition is true (or unset), and
// discovery.Serving when it is not ready but still serving while terminating; any
// other endpoint is left out. Only the first address of an endpoint is
// used (the API defines no meaning for the others). An address in several
// slices, as during a slice rebalance, appears once, in its best state.
//
// If the API cannot be reached, the informer keeps its cache, so the last
// good set stays, and the failures are logged at most once a minute. A
// Service whose last endpoint goes away is a real answer, not an error: the
// empty set is delivered, and the cluster's discovery.on_empty decides
// whether it is applied.
//
// All fields are read-only after construction; api guards itself.
type Kubernetes struct {
	name     string // "namespace/service", for logs
	selector string // label selector of the Service's slices
	port     string // as configured: a name, a number or empty
	portNum  int32  // port as a number; 0 when it is a name or empty
	client   sliceClient
	log      *slog.Logger
	klog     logr.Logger // client-go's own logging, into log
	api      apiHealth
}

// Use has discovery.New build this package's sources for clusters that
// name a Kubernetes Service. cmd/ebb calls it: client-go comes into the
// binary there, and not into the data path, which knows only package
// discovery.
func Use() {
	discovery.UseKubernetes(func(c config.KubernetesSrc, log *slog.Logger) (discovery.Source, error) {
		k, err := New(c, log)
		if err != nil {
			return nil, err // not a typed nil in a Source
		}
		return k, nil
	})
}

// New returns a source for the Service c names. Without a kubeconfig it
// uses the pod's service account (in-cluster config).
func New(c config.KubernetesSrc, log *slog.Logger) (*Kubernetes, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	name := c.Namespace + "/" + c.Service
	log = log.With("source", "kubernetes "+name)
	var cfg *rest.Config
	var err error
	if c.Kubeconfig == "" {
		cfg, err = rest.InClusterConfig()
	} else {
		cfg, err = clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	}
	if err != nil {
		return nil, fmt.Errorf("discovery: configuring the Kubernetes client for %s: %w", name, err)
	}
	client, err := newSliceClient(cfg, c.Namespace)
	if err != nil {
		return nil, fmt.Errorf("discovery: creating the Kubernetes client for %s: %w", name, err)
	}
	k := &Kubernetes{
		name:     name,
		selector: discoveryv1.LabelServiceName + "=" + c.Service,
		port:     c.Port,
		client:   client,
		log:      log,
		klog:     logr.FromSlogHandler(log.Handler()),
		api:      apiHealth{log: log},
	}
	if n, err := strconv.ParseUint(c.Port, 10, 16); err == nil {
		k.portNum = int32(n)
	}
	return k, nil
}

// Load lists the Service's slices once.
func (k *Kubernetes) Load() (discovery.Set, error) {
	ctx, cancel := context.WithTimeout(klog.NewContext(context.Background(), k.klog), kubernetesTimeout)
	defer cancel()
	list, err := k.client.List(ctx, metav1.ListOptions{LabelSelector: k.selector})
	if err != nil {
		return discovery.Set{}, fmt.Errorf("discovery: listing the EndpointSlices of %s: %w", k.name, err)
	}
	ss := make([]*discoveryv1.EndpointSlice, len(list.Items))
	for i := range list.Items {
		ss[i] = &list.Items[i]
	}
	eps := k.endpoints(ss, map[string]string{})
	if len(eps) == 0 {
		return discovery.Set{}, fmt.Errorf("discovery: kubernetes %s has no ready or serving endpoints", k.name)
	}
	return k.set(eps), nil
}

func (k *Kubernetes) set(eps []discovery.Endpoint) discovery.Set {
	return discovery.Set{Endpoints: eps, Source: "kubernetes " + k.name, Updated: time.Now()}
}

// Run watches the slices and delivers the set once the informer has its
// first complete view, then each set that differs from the last, until ctx
// ends. It returns after the informer's goroutines have.
func (k *Kubernetes) Run(ctx context.Context, update func(discovery.Set)) error {
	inf := cache.NewSharedIndexInformer(k.listWatch(), &discoveryv1.EndpointSlice{}, 0, cache.Indexers{})
	if err := inf.SetWatchErrorHandlerWithContext(k.watchError); err != nil {
		return fmt.Errorf("discovery: watching %s: %w", k.name, err)
	}
	// The handler only signals; this goroutine reads the informer's store
	// and delivers, so a burst of events becomes one set (latest wins) and
	// a slow update never holds up the informer.
	changed := make(chan struct{}, 1)
	signal := func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	reg, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { signal() },
		UpdateFunc: func(any, any) { signal() },
		DeleteFunc: func(any) { signal() },
	})
	if err != nil {
		return fmt.Errorf("discovery: watching %s: %w", k.name, err)
	}

	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { inf.RunWithContext(klog.NewContext(ctx, k.klog)) })

	synced := reg.HasSyncedChecker().Done() // nil once synced
	var last []discovery.Endpoint
	delivered := false
	logged := map[string]string{} // slices skipped, and why, as last logged
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-synced:
			synced = nil
		case <-changed:
			if synced != nil {
				continue // part of the initial list; delivered once synced
			}
		}
		objs := inf.GetStore().List()
		ss := make([]*discoveryv1.EndpointSlice, 0, len(objs))
		for _, o := range objs {
			if s, ok := o.(*discoveryv1.EndpointSlice); ok {
				ss = append(ss, s)
			}
		}
		eps := k.endpoints(ss, logged)
		if delivered && slices.Equal(eps, last) {
			continue
		}
		// An empty set after a non-empty one is delivered too: the
		// cluster decides what to make of it (discovery.on_empty).
		last, delivered = eps, true
		update(k.set(slices.Clone(eps))) // the consumer's own copy
	}
}

// listWatch lists and watches the Service's slices, and tells api how the
// calls went.
func (k *Kubernetes) listWatch() *cache.ListWatch {
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = k.selector
			l, err := k.client.List(ctx, o)
			k.observe(ctx, o, err)
			return l, err
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (apiwatch.Interface, error) {
			o.LabelSelector = k.selector
			w, err := k.client.Watch(ctx, o)
			k.observe(ctx, o, err)
			return w, err
		},
	}
}

func (k *Kubernetes) observe(ctx context.Context, o metav1.ListOptions, err error) {
	switch {
	case err == nil:
		k.api.ok()
	case ctx.Err() != nil:
		// Shutting down.
	case apierrors.IsResourceExpired(err) || apierrors.IsGone(err):
		// The watch's resource version is too old: client-go lists
		// again, as designed.
	case o.SendInitialEvents != nil && (apierrors.IsInvalid(err) || apierrors.IsBadRequest(err)):
		// An API server without streaming lists (the WatchList
		// feature): client-go falls back to a plain list.
	default:
		k.api.failed(err)
	}
}

// watchError replaces client-go's default handler, which logs every failed
// list-and-watch cycle as an error.
func (k *Kubernetes) watchError(_ context.Context, _ *cache.Reflector, err error) {
	switch {
	case errors.Is(err, io.EOF), apierrors.IsResourceExpired(err), apierrors.IsGone(err):
		// A watch that ended normally, or must start over from a list.
	case k.api.seen(err):
		// A failed call, already counted by observe.
	default:
		k.api.failed(err)
	}
}

// endpoints merges the endpoints of slices, sorted by address. A slice
// without the configured port is skipped with a warning, logged when its
// reason differs from the one in logged (slice name → reason), which it
// updates.
func (k *Kubernetes) endpoints(ss []*discoveryv1.EndpointSlice, logged map[string]string) []discovery.Endpoint {
	states := map[string]discovery.EndpointState{}
	skipped := map[string]string{}
	for _, s := range ss {
		if len(s.Endpoints) == 0 {
			// The placeholder slice of a Service without endpoints has
			// no ports either: nothing to warn about.
			continue
		}
		port, err := k.slicePort(s)
		if err != nil {
			skipped[s.Name] = err.Error()
			if logged[s.Name] != err.Error() {
				k.log.Warn("skipping the endpoints of an EndpointSlice", "slice", s.Name, "err", err)
			}
			continue
		}
		p := strconv.Itoa(int(port))
		for _, e := range s.Endpoints {
			state, ok := endpointState(e.Conditions)
			if !ok || len(e.Addresses) == 0 {
				continue
			}
			addr := net.JoinHostPort(e.Addresses[0], p)
			if old, seen := states[addr]; !seen || state < old {
				states[addr] = state
			}
		}
	}
	clear(logged)
	maps.Copy(logged, skipped)
	eps := make([]discovery.Endpoint, 0, len(states))
	for addr, state := range states {
		eps = append(eps, discovery.Endpoint{Address: addr, State: state})
	}
	slices.SortFunc(eps, func(a, b discovery.Endpoint) int { return cmp.Compare(a.Address, b.Address) })
	return eps
}

// slicePort returns the port of s that the configuration names: by name,
// or by number (the endpoints' port, which is the Service's target port),
// or the only one if none is named.
func (k *Kubernetes) slicePort(s *discoveryv1.EndpointSlice) (int32, error) {
	if k.port == "" {
		if len(s.Ports) != 1 || s.Ports[0].Port == nil {
			return 0, fmt.Errorf("the slice has %d ports and the configuration names none (discovery.kubernetes.port)", len(s.Ports))
		}
		return *s.Ports[0].Port, nil
	}
	for _, p := range s.Ports {
		switch {
		case p.Port == nil:
		case k.portNum > 0 && *p.Port == k.portNum:
			return *p.Port, nil
		case k.portNum == 0 && p.Name != nil && *p.Name == k.port:
			return *p.Port, nil
		}
	}
	return 0, fmt.Errorf("the slice has no port %s", k.port)
}

// endpointState maps an endpoint's conditions to a state; ok is false for
// an endpoint that must get no traffic. A not-ready endpoint that is not
// terminating is a pod that is not (or no longer) ready: it gets nothing,
// even if serving is unset (which the API says to read as true).
func endpointState(c discoveryv1.EndpointConditions) (state discovery.EndpointState, ok bool) {
	switch {
	case c.Ready == nil || *c.Ready:
		return discovery.Ready, true
	case c.Serving != nil && *c.Serving && c.Terminating != nil && *c.Terminating:
		return discovery.Serving, true
	}
	return 0, false
}

// sliceScheme knows the EndpointSlice types and nothing else: client-go's
// generated clients register every API group, which would more than double
// the size of the ebb binary. It is built on first use: a process without
// a kubernetes source does not pay for it.
var sliceScheme = sync.OnceValue(func() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := discoveryv1.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
})

// sliceClient lists and watches the EndpointSlices of one namespace, as
// client-go's generated client does, over JSON.
type sliceClient struct {
	rest      *rest.RESTClient
	namespace string
}

func newSliceClient(cfg *rest.Config, namespace string) (sliceClient, error) {
	c := *cfg
	c.UserAgent = "ebb"
	c.APIPath = "/apis"
	c.GroupVersion = &discoveryv1.SchemeGroupVersion
	c.NegotiatedSerializer = serializer.NewCodecFactory(sliceScheme()).WithoutConversion()
	rc, err := rest.RESTClientFor(&c)
	return sliceClient{rest: rc, namespace: namespace}, err
}

func (c sliceClient) List(ctx context.Context, o metav1.ListOptions) (*discoveryv1.EndpointSliceList, error) {
	var list discoveryv1.EndpointSliceList
	err := c.request(o).Do(ctx).Into(&list)
	return &list, err
}

func (c sliceClient) Watch(ctx context.Context, o metav1.ListOptions) (apiwatch.Interface, error) {
	o.Watch = true
	return c.request(o).Watch(ctx)
}

func (c sliceClient) request(o metav1.ListOptions) *rest.Request {
	var timeout time.Duration
	if o.TimeoutSeconds != nil {
		timeout = time.Duration(*o.TimeoutSeconds) * time.Second
	}
	return c.rest.Get().Namespace(c.namespace).Resource("endpointslices").
		VersionedParams(&o, metav1.ParameterCodec).Timeout(timeout)
}

// apiHealth logs failures to reach the Kubernetes API at most once per
// apiLogInterval, and the recovery after a logged failure.
type apiHealth struct {
	log *slog.Logger // read-only

	mu       sync.Mutex
	lastErr  error     // the last failure
	failures int       // since the last success
	lastLog  time.Time // of a failure
	logged   bool      // a failure since the last success was logged
	unlogged int       // failures since lastLog, not logged
}

func (h *apiHealth) failed(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lastErr = err
	h.failures++
	if !h.lastLog.IsZero() && time.Since(h.lastLog) < apiLogInterval {
		h.unlogged++
		return
	}
	h.log.Warn("cannot reach the Kubernetes API; keeping the last good set", "err", err, "failures", h.failures, "not_logged", h.unlogged)
	h.lastLog, h.logged, h.unlogged = time.Now(), true, 0
}

func (h *apiHealth) ok() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.logged {
		h.log.Info("the Kubernetes API answers again", "failures", h.failures)
	}
	h.failures, h.logged, h.lastErr = 0, false, nil
}

// seen reports whether err wraps the last failure counted.
func (h *apiHealth) seen(err error) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lastErr != nil && errors.Is(err, h.lastErr)
}
