package kubernetes

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ebb-proxy/ebb/config"
	"github.com/ebb-proxy/ebb/discovery"
)

// apiServer is a Kubernetes API server that knows one thing: the
// EndpointSlices of the Service app in the namespace shop, listed and
// watched as client-go's informer asks for them. The test changes slices
// with apply; every change gets the next resource version and goes to the
// open watches, which also replay the changes after the version they start
// from.
type apiServer struct {
	t         *testing.T
	url       string
	ca        []byte        // PEM of the server's certificate
	watchList bool          // answers streaming lists (sendInitialEvents, the WatchList feature)
	requests  chan string   // one word per request: list, watch, watch-list, rejected, down
	stop      chan struct{} // closed at cleanup: ends the open watches

	mu      sync.Mutex
	slices  map[string]*discoveryv1.EndpointSlice
	events  []apiEvent    // every change, in resource version order
	rv      int           // of the last change
	changed chan struct{} // closed and replaced at each change
	down    bool          // every request fails with a 500
	broken  chan struct{} // closed when the server goes down: open watches end with an error
}

type apiEvent struct {
	Type   string `json:"type"`
	Object any    `json:"object"`
	rv     int
}

const slicesPath = "/apis/discovery.k8s.io/v1/namespaces/shop/endpointslices"

func startAPI(t *testing.T, watchList bool) *apiServer {
	t.Helper()
	s := &apiServer{t: t, watchList: watchList, requests: make(chan string, 256), stop: make(chan struct{}),
		slices: map[string]*discoveryv1.EndpointSlice{}, changed: make(chan struct{}), broken: make(chan struct{}), rv: 100}
	srv := httptest.NewTLSServer(s)
	s.url = srv.URL
	s.ca = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	t.Cleanup(func() { close(s.stop); srv.Close() })
	return s
}

func (s *apiServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	switch {
	case r.Method != http.MethodGet || r.URL.Path != slicesPath:
		s.t.Errorf("unexpected request %s %s", r.Method, r.URL)
		writeStatus(w, http.StatusNotFound, metav1.StatusReasonNotFound, "not here")
		return
	case q.Get("labelSelector") != "kubernetes.io/service-name=app":
		s.t.Errorf("request without the Service's label selector: %s", r.URL)
		writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, "bad selector")
		return
	case r.Header.Get("Authorization") != "Bearer test-token":
		writeStatus(w, http.StatusUnauthorized, metav1.StatusReasonUnauthorized, "no token from the kubeconfig")
		return
	}
	watching, streamList := q.Get("watch") == "true", q.Get("sendInitialEvents") == "true"
	s.mu.Lock()
	switch {
	case s.down:
		s.mu.Unlock()
		s.record("down")
		writeStatus(w, http.StatusInternalServerError, metav1.StatusReasonInternalError, "etcdserver: request timed out")
	case watching && streamList && !s.watchList:
		// What an API server without the WatchList feature answers.
		s.mu.Unlock()
		s.record("rejected")
		writeStatus(w, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, "sendInitialEvents: Forbidden: sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled")
	case watching:
		s.watch(w, r, streamList) // unlocks
	default:
		list := discoveryv1.EndpointSliceList{
			TypeMeta: metav1.TypeMeta{Kind: "EndpointSliceList", APIVersion: "discovery.k8s.io/v1"},
			ListMeta: metav1.ListMeta{ResourceVersion: strconv.Itoa(s.rv)},
		}
		for _, sl := range s.sorted() {
			list.Items = append(list.Items, *sl)
		}
		s.mu.Unlock()
		s.record("list")
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(list)
	}
}

// watch streams events; s.mu is held on entry. Without a resource version,
// or for a streaming list, it starts with the current slices (and for the
// latter, the bookmark that ends them); with one, it replays the changes
// after it.
func (s *apiServer) watch(w http.ResponseWriter, r *http.Request, streamList bool) {
	from, _ := strconv.Atoi(r.URL.Query().Get("resourceVersion"))
	var pending []apiEvent
	if streamList || from == 0 {
		for _, sl := range s.sorted() {
			pending = append(pending, apiEvent{Type: "ADDED", Object: sl})
		}
		from = s.rv
		if streamList {
			pending = append(pending, apiEvent{Type: "BOOKMARK", Object: &discoveryv1.EndpointSlice{
				TypeMeta: metav1.TypeMeta{Kind: "EndpointSlice", APIVersion: "discovery.k8s.io/v1"},
				ObjectMeta: metav1.ObjectMeta{ResourceVersion: strconv.Itoa(s.rv),
					Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}},
			}})
		}
	}
	next := len(s.events)
	for i, e := range s.events {
		if e.rv > from {
			next = i
			break
		}
	}
	broken := s.broken
	s.mu.Unlock()
	if streamList {
		s.record("watch-list")
	} else {
		s.record("watch")
	}

	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	enc := json.NewEncoder(w) // one event a line
	for {
		for _, e := range pending {
			enc.Encode(e)
		}
		w.(http.Flusher).Flush()
		s.mu.Lock()
		pending = slices.Clone(s.events[next:])
		next = len(s.events)
		changed := s.changed
		s.mu.Unlock()
		if len(pending) > 0 {
			continue
		}
		select {
		case <-changed:
		case <-broken:
			enc.Encode(apiEvent{Type: "ERROR", Object: status(http.StatusInternalServerError, metav1.StatusReasonInternalError, "etcdserver: leader changed")})
			return
		case <-r.Context().Done():
			return
		case <-s.stop:
			return
		}
	}
}

func (s *apiServer) record(what string) {
	select {
	case s.requests <- what:
	default:
	}
}

// sorted returns the slices by name; s.mu must be held.
func (s *apiServer) sorted() []*discoveryv1.EndpointSlice {
	out := make([]*discoveryv1.EndpointSlice, 0, len(s.slices))
	for _, sl := range s.slices {
		out = append(out, sl)
	}
	slices.SortFunc(out, func(a, b *discoveryv1.EndpointSlice) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// apply makes a change (ADDED, MODIFIED or DELETED) and sends it to the
// watches.
func (s *apiServer) apply(typ string, sl *discoveryv1.EndpointSlice) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rv++
	sl = sl.DeepCopy()
	sl.ResourceVersion = strconv.Itoa(s.rv)
	if typ == "DELETED" {
		delete(s.slices, sl.Name)
	} else {
		s.slices[sl.Name] = sl
	}
	s.events = append(s.events, apiEvent{Type: typ, Object: sl, rv: s.rv})
	close(s.changed)
	s.changed = make(chan struct{})
}

// setDown makes the server fail every request with a 500 and end its open
// watches with an error event, or work again.
func (s *apiServer) setDown(down bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down = down
	if down {
		close(s.broken)
	} else {
		s.broken = make(chan struct{})
	}
}

// waitRequest waits for a request of the given kind.
func (s *apiServer) waitRequest(t *testing.T, what string) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case got := <-s.requests:
			if got == what {
				return
			}
		case <-timeout:
			t.Fatalf("no %s request", what)
		}
	}
}

func status(code int, reason metav1.StatusReason, msg string) *metav1.Status {
	return &metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status: metav1.StatusFailure, Code: int32(code), Reason: reason, Message: msg}
}

func writeStatus(w http.ResponseWriter, code int, reason metav1.StatusReason, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(status(code, reason, msg))
}

// kubeconfig writes a kubeconfig file that points client-go at the server.
// client-go sends the token only over TLS.
func (s *apiServer) kubeconfig(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	body := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: test, cluster: {server: %q, certificate-authority-data: %s}}]
users: [{name: test, user: {token: test-token}}]
contexts: [{name: test, context: {cluster: test, user: test, namespace: elsewhere}}]
current-context: test
`, s.url, base64.StdEncoding.EncodeToString(s.ca))
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func (s *apiServer) source(t *testing.T, port string, log *slog.Logger) discovery.Source {
	t.Helper()
	src, err := discovery.New(config.Discovery{Kubernetes: &config.KubernetesSrc{
		Namespace: "shop", Service: "app", Port: port, Kubeconfig: s.kubeconfig(t)}}, log)
	if err != nil {
		t.Fatal(err)
	}
	return src
}

// Slices and endpoints.

func slice(name, addressType string, ports []discoveryv1.EndpointPort, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		TypeMeta: metav1.TypeMeta{Kind: "EndpointSlice", APIVersion: "discovery.k8s.io/v1"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop",
			Labels: map[string]string{discoveryv1.LabelServiceName: "app"}},
		AddressType: discoveryv1.AddressType(addressType),
		Ports:       ports,
		Endpoints:   eps,
	}
}

func port(name string, n int32) discoveryv1.EndpointPort {
	return discoveryv1.EndpointPort{Name: new(name), Port: new(n)}
}

var httpPorts = []discoveryv1.EndpointPort{port("http", 8080), port("metrics", 9090)}

func ep(addr string, ready, serving, terminating *bool) discoveryv1.Endpoint {
	return discoveryv1.Endpoint{Addresses: []string{addr},
		Conditions: discoveryv1.EndpointConditions{Ready: ready, Serving: serving, Terminating: terminating}}
}

var yes, no = new(true), new(false)

func ready(addr string) discoveryv1.Endpoint    { return ep(addr, yes, yes, no) }
func serving(addr string) discoveryv1.Endpoint  { return ep(addr, no, yes, yes) } // terminating, still serving
func stopping(addr string) discoveryv1.Endpoint { return ep(addr, no, no, yes) }  // terminating, not serving
func notReady(addr string) discoveryv1.Endpoint { return ep(addr, no, no, no) }

// show renders a set's endpoints as "address state".
func show(s discovery.Set) []string {
	out := make([]string, len(s.Endpoints))
	for i, e := range s.Endpoints {
		out[i] = e.Address + " " + e.State.String()
	}
	return out
}

// logBuffer collects log lines and says when one arrives.
type logBuffer struct {
	mu    sync.Mutex
	lines []string
	grew  chan struct{}
}

func newLog() (*logBuffer, *slog.Logger) {
	b := &logBuffer{grew: make(chan struct{}, 1)}
	return b, slog.New(slog.NewTextHandler(b, nil))
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	b.lines = append(b.lines, string(p))
	b.mu.Unlock()
	select {
	case b.grew <- struct{}{}:
	default:
	}
	return len(p), nil
}

func (b *logBuffer) count(substr string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, l := range b.lines {
		if strings.Contains(l, substr) {
			n++
		}
	}
	return n
}

func (b *logBuffer) wait(t *testing.T, substr string) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for b.count(substr) == 0 {
		select {
		case <-b.grew:
		case <-timeout:
			t.Fatalf("no log line with %q; have:\n%s", substr, strings.Join(b.lines, ""))
		}
	}
}

// runSource runs src until the test ends, and checks that Run returns
// when its context ends.
func runSource(t *testing.T, src discovery.Source) (sets chan discovery.Set, stop func()) {
	ctx, cancel := context.WithCancel(t.Context())
	sets = make(chan discovery.Set, 16)
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx, func(s discovery.Set) { sets <- s }) }()
	stop = sync.OnceFunc(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("Run did not return after its context ended")
		}
	})
	t.Cleanup(stop)
	return sets, stop
}

func nextSet(t *testing.T, sets chan discovery.Set) discovery.Set {
	t.Helper()
	select {
	case s := <-sets:
		return s
	case <-time.After(10 * time.Second):
		t.Fatal("no set delivered")
		return discovery.Set{}
	}
}

func noSet(t *testing.T, sets chan discovery.Set) {
	t.Helper()
	select {
	case s := <-sets:
		t.Fatalf("unexpected set %v", show(s))
	default:
	}
}

func TestKubernetesSource(t *testing.T) {
	for _, mode := range []struct {
		name      string
		watchList bool
	}{{"streaming list", true}, {"list then watch", false}} {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			testKubernetesSource(t, mode.watchList)
		})
	}
}

func testKubernetesSource(t *testing.T, watchList bool) {
	api := startAPI(t, watchList)
	logs, log := newLog()
	api.apply("ADDED", slice("app-a", "IPv4", httpPorts, ready("10.0.0.1"), ready("10.0.0.2"), notReady("10.0.0.3")))
	src := api.source(t, "http", log)

	step := func(name string, got discovery.Set, want ...string) {
		t.Helper()
		if !slices.Equal(show(got), want) {
			t.Fatalf("%s: set %q, want %q", name, show(got), want)
		}
		if got.Source != "kubernetes shop/app" || time.Since(got.Updated) > time.Minute {
			t.Fatalf("%s: set from %q at %v", name, got.Source, got.Updated)
		}
	}
	set, err := src.Load()
	if err != nil {
		t.Fatal(err)
	}
	step("Load", set, "10.0.0.1:8080 ready", "10.0.0.2:8080 ready")

	sets, stop := runSource(t, src)
	step("initial list", nextSet(t, sets), "10.0.0.1:8080 ready", "10.0.0.2:8080 ready")
	if watchList {
		api.waitRequest(t, "watch-list")
	} else {
		// client-go tries a streaming list, then falls back.
		api.waitRequest(t, "rejected")
		api.waitRequest(t, "list")
		api.waitRequest(t, "watch")
	}

	api.apply("MODIFIED", slice("app-a", "IPv4", httpPorts, serving("10.0.0.1"), stopping("10.0.0.2"), notReady("10.0.0.3"), ready("10.0.0.4")))
	step("conditions changed", nextSet(t, sets), "10.0.0.1:8080 serving", "10.0.0.4:8080 ready")

	// A second slice of the same Service: merged, and an address in both
	// is ready if either says so.
	api.apply("ADDED", slice("app-b", "IPv4", httpPorts, ready("10.0.0.1"), ready("10.0.0.5")))
	step("second slice", nextSet(t, sets), "10.0.0.1:8080 ready", "10.0.0.4:8080 ready", "10.0.0.5:8080 ready")
	api.apply("ADDED", slice("app-v6", "IPv6", []discoveryv1.EndpointPort{port("http", 8080)}, ready("fd00::1")))
	step("IPv6 slice", nextSet(t, sets), "10.0.0.1:8080 ready", "10.0.0.4:8080 ready", "10.0.0.5:8080 ready", "[fd00::1]:8080 ready")

	// A slice without the named port contributes nothing, and says why.
	api.apply("ADDED", slice("app-grpc", "IPv4", []discoveryv1.EndpointPort{port("grpc", 9000)}, ready("10.0.0.9")))
	logs.wait(t, "slice=app-grpc err=\"the slice has no port http\"")
	noSet(t, sets)

	api.apply("DELETED", slice("app-b", "IPv4", httpPorts))
	step("slice deleted", nextSet(t, sets), "10.0.0.1:8080 serving", "10.0.0.4:8080 ready", "[fd00::1]:8080 ready")
	if n := logs.count("Kubernetes API"); n != 0 {
		t.Fatalf("%d log lines about the API while it answered", n)
	}

	// The API goes away: the last good set stays, the failures are logged
	// once, and what changed meanwhile arrives when the API is back.
	api.setDown(true)
	api.waitRequest(t, "down")
	api.waitRequest(t, "down")
	logs.wait(t, "cannot reach the Kubernetes API; keeping the last good set")
	api.apply("MODIFIED", slice("app-a", "IPv4", httpPorts, ready("10.0.0.1"), ready("10.0.0.4")))
	noSet(t, sets)
	if n := logs.count("cannot reach the Kubernetes API"); n != 1 {
		t.Fatalf("%d log lines for the failed requests, want 1", n)
	}
	api.setDown(false)
	step("API back", nextSet(t, sets), "10.0.0.1:8080 ready", "10.0.0.4:8080 ready", "[fd00::1]:8080 ready")
	logs.wait(t, "the Kubernetes API answers again")

	// All slices gone: the empty set is delivered (the cluster decides
	// what to make of it). The deletions may come as one set or several.
	for _, name := range []string{"app-a", "app-v6", "app-grpc"} {
		api.apply("DELETED", slice(name, "IPv4", nil))
	}
	for s := nextSet(t, sets); len(s.Endpoints) > 0; s = nextSet(t, sets) {
	}

	stop()
}

func TestKubernetesUnreachableAtStart(t *testing.T) {
	api := startAPI(t, true)
	api.setDown(true)
	logs, log := newLog()
	src := api.source(t, "http", log)
	if _, err := src.Load(); err == nil || !strings.Contains(err.Error(), "etcdserver: request timed out") {
		t.Fatalf("Load = %v", err)
	}
	sets, stop := runSource(t, src)
	api.waitRequest(t, "down")
	logs.wait(t, "cannot reach the Kubernetes API")
	stop() // returns although the informer never synced
	noSet(t, sets)
}

func TestKubernetesPorts(t *testing.T) {
	api := startAPI(t, false)
	api.apply("ADDED", slice("named", "IPv4", httpPorts, ready("10.0.0.1")))
	api.apply("ADDED", slice("single", "IPv4", []discoveryv1.EndpointPort{{Port: new(int32(7000))}}, ready("10.0.1.1")))
	api.apply("ADDED", slice("empty", "IPv4", nil)) // a Service without endpoints has one like this
	tests := []struct {
		port string
		want []string
		logs []string // warnings about skipped slices
	}{
		{port: "http", want: []string{"10.0.0.1:8080 ready"}, logs: []string{"slice=single err=\"the slice has no port http\""}},
		{port: "9090", want: []string{"10.0.0.1:9090 ready"}, logs: []string{"slice=single err=\"the slice has no port 9090\""}},
		{port: "7000", want: []string{"10.0.1.1:7000 ready"}, logs: []string{"slice=named"}},
		{port: "", want: []string{"10.0.1.1:7000 ready"}, logs: []string{"slice=named err=\"the slice has 2 ports and the configuration names none"}},
	}
	for _, tt := range tests {
		t.Run("port "+tt.port, func(t *testing.T) {
			logs, log := newLog()
			set, err := api.source(t, tt.port, log).Load()
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(show(set), tt.want) {
				t.Fatalf("set %q, want %q", show(set), tt.want)
			}
			for _, l := range tt.logs {
				if logs.count(l) != 1 {
					t.Errorf("no warning %q", l)
				}
			}
			if logs.count("slice=empty") != 0 {
				t.Error("a warning about the empty slice")
			}
		})
	}
	t.Run("no such port", func(t *testing.T) {
		_, err := api.source(t, "grpc", nil).Load()
		if err == nil || !strings.Contains(err.Error(), "kubernetes shop/app has no ready or serving endpoints") {
			t.Fatalf("Load = %v", err)
		}
	})
}

func TestEndpointState(t *testing.T) {
	tests := []struct {
		name                        string
		ready, serving, terminating *bool
		want                        discovery.EndpointState
		ok                          bool
	}{
		{"ready", yes, yes, no, discovery.Ready, true},
		{"conditions unset", nil, nil, nil, discovery.Ready, true},
		{"ready while terminating (publishNotReadyAddresses)", yes, yes, yes, discovery.Ready, true},
		{"terminating, serving", no, yes, yes, discovery.Serving, true},
		{"terminating, not serving", no, no, yes, 0, false},
		{"not ready", no, no, no, 0, false},
		{"not ready, serving unset", no, nil, nil, 0, false},
		{"not ready, serving, not terminating", no, yes, no, 0, false},
	}
	for _, tt := range tests {
		got, ok := endpointState(discoveryv1.EndpointConditions{Ready: tt.ready, Serving: tt.serving, Terminating: tt.terminating})
		if got != tt.want || ok != tt.ok {
			t.Errorf("%s: %v, %v; want %v, %v", tt.name, got, ok, tt.want, tt.ok)
		}
	}
}

func TestNewConfig(t *testing.T) {
	_, err := discovery.New(config.Discovery{Kubernetes: &config.KubernetesSrc{Namespace: "shop", Service: "app",
		Kubeconfig: filepath.Join(t.TempDir(), "missing")}}, nil)
	if err == nil || !strings.Contains(err.Error(), "configuring the Kubernetes client for shop/app") {
		t.Fatalf("missing kubeconfig: %v", err)
	}
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	src, err := discovery.New(config.Discovery{Kubernetes: &config.KubernetesSrc{Namespace: "shop", Service: "app"}}, nil)
	if err == nil || src != nil {
		t.Fatalf("in-cluster config outside a cluster: %v, %v", src, err)
	}
}
