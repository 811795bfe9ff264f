package e2e

import (
	"bufio"
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/ebb-proxy/ebb/config"
)

// The Kubernetes manifests in deploy/kubernetes are examples that
// operators copy: these tests decode them strictly with the API's own
// types (an unknown or misspelt field fails, as kubectl apply --validate
// would) and check the invariants the drain depends on. No API server
// runs here: what the kubelet does with them is described in the
// manifests and docs/DEPLOYMENT.md, and the behaviour they rely on (drain.app,
// ebb run -- app, ebb drain -wait, the probe port) is exercised for real
// by the other e2e tests.

// manifest is one file of deploy/kubernetes, decoded.
type manifest struct {
	name        string
	configMaps  map[string]*corev1.ConfigMap // by namespace/name
	deployments []*appsv1.Deployment
	services    []*corev1.Service
	pdbs        []*policyv1.PodDisruptionBudget
	accounts    map[string]bool // namespace/name
	roles       map[string]*rbacv1.Role
	bindings    []*rbacv1.RoleBinding
}

// newObject returns the typed object for a document's apiVersion and
// kind, and where to keep it once decoded.
func (m *manifest) newObject(tm metav1.TypeMeta) (any, func(), error) {
	switch tm.APIVersion + " " + tm.Kind {
	case "v1 Namespace":
		return &corev1.Namespace{}, func() {}, nil
	case "v1 ConfigMap":
		o := &corev1.ConfigMap{}
		return o, func() { m.configMaps[nsName(o.Namespace, o.Name)] = o }, nil
	case "v1 Service":
		o := &corev1.Service{}
		return o, func() { m.services = append(m.services, o) }, nil
	case "v1 ServiceAccount":
		o := &corev1.ServiceAccount{}
		return o, func() { m.accounts[nsName(o.Namespace, o.Name)] = true }, nil
	case "apps/v1 Deployment":
		o := &appsv1.Deployment{}
		return o, func() { m.deployments = append(m.deployments, o) }, nil
	case "policy/v1 PodDisruptionBudget":
		o := &policyv1.PodDisruptionBudget{}
		return o, func() { m.pdbs = append(m.pdbs, o) }, nil
	case "rbac.authorization.k8s.io/v1 Role":
		o := &rbacv1.Role{}
		return o, func() { m.roles[nsName(o.Namespace, o.Name)] = o }, nil
	case "rbac.authorization.k8s.io/v1 RoleBinding":
		o := &rbacv1.RoleBinding{}
		return o, func() { m.bindings = append(m.bindings, o) }, nil
	}
	return nil, nil, fmt.Errorf("apiVersion %q kind %q: not a kind these examples use", tm.APIVersion, tm.Kind)
}

// nsName is namespace/name, with the default namespace for an empty one.
func nsName(ns, name string) string { return cmp.Or(ns, "default") + "/" + name }

// loadManifest decodes every document of deploy/kubernetes/name strictly.
func loadManifest(t *testing.T, name string) *manifest {
	t.Helper()
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.ReadFile(filepath.Join(root, "deploy", "kubernetes", name))
	if err != nil {
		t.Fatal(err)
	}
	m := &manifest{name: "deploy/kubernetes/" + name, configMaps: map[string]*corev1.ConfigMap{},
		accounts: map[string]bool{}, roles: map[string]*rbacv1.Role{}}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(f)))
	for i := 1; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("%s: document %d: %v", m.name, i, err)
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			t.Fatalf("%s: document %d: %v", m.name, i, err)
		}
		if tm.Kind == "" {
			continue // only comments
		}
		obj, keep, err := m.newObject(tm)
		if err != nil {
			t.Fatalf("%s: document %d: %v", m.name, i, err)
		}
		if err := yaml.UnmarshalStrict(doc, obj); err != nil {
			t.Fatalf("%s: document %d (%s): %v", m.name, i, tm.Kind, err)
		}
		keep()
	}
	return m
}

// ebbPod is what the checks learn of one Deployment's ebb.
type ebbPod struct {
	d   *appsv1.Deployment
	c   *corev1.Container // ebb's container
	cfg *config.Config    // its configuration, loaded and validated as ebb does
	// adminPort and probePort are the ports of admin.address and
	// admin.probe_address.
	adminPort, probePort string
}

// checkEbbPod finds ebb in d's pod (the container that runs `ebb run
// -config F`, or `run -config F` on the ebb image), and checks what every
// example must hold: its configuration comes from a ConfigMap of the
// manifest mounted as a directory (so that updates reload), passes ebb
// check, keeps the admin on loopback and has a probe port; the
// readiness probe asks /ready and the liveness probe /live, both on the
// probe port; no port of the pod or Service reaches the admin; the grace
// period is longer than drain.timeout.
func checkEbbPod(t *testing.T, m *manifest, d *appsv1.Deployment) *ebbPod {
	t.Helper()
	spec := &d.Spec.Template.Spec
	p := &ebbPod{d: d}
	var cfgPath string
	for _, list := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for i := range list {
			argv := append(slices.Clone(list[i].Command), list[i].Args...)
			if j := slices.Index(argv, "-config"); j > 0 && j+1 < len(argv) && slices.Contains(argv[:j], "run") {
				p.c, cfgPath = &list[i], argv[j+1]
			}
		}
	}
	if p.c == nil {
		t.Fatalf("%s: Deployment %s runs no `ebb run -config F`", m.name, d.Name)
	}

	// The configuration: a ConfigMap key in a directory mount.
	var data string
	for _, vm := range p.c.VolumeMounts {
		if vm.MountPath != path.Dir(cfgPath) {
			continue
		}
		if vm.SubPath != "" {
			t.Errorf("%s: %s is mounted with subPath, which the kubelet never updates: ConfigMap changes would not reload", m.name, vm.MountPath)
		}
		for _, v := range spec.Volumes {
			if v.Name == vm.Name && v.ConfigMap != nil {
				cm := m.configMaps[nsName(d.Namespace, v.ConfigMap.Name)]
				if cm == nil {
					t.Fatalf("%s: volume %s names ConfigMap %s, which the file does not define", m.name, v.Name, v.ConfigMap.Name)
				}
				data = cm.Data[path.Base(cfgPath)]
			}
		}
	}
	if data == "" {
		t.Fatalf("%s: -config %s is not a key of a ConfigMap mounted at %s", m.name, cfgPath, path.Dir(cfgPath))
	}
	file := writeConfig(t, data)
	if code, stdout, stderr := runOnce(t, nil, "check", "-config", file); code != 0 {
		t.Fatalf("%s: ebb check of the ebb.yaml: status %d\n%s%s", m.name, code, stdout, stderr)
	}
	cfg, err := config.Load(file, config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p.cfg = cfg

	// The admin on loopback, the probes on the probe port.
	host, port, err := net.SplitHostPort(cfg.Admin.Address)
	if err != nil || !net.ParseIP(host).IsLoopback() {
		t.Errorf("%s: admin.address %q is not on loopback: the pod network could drain, reload and read ebb", m.name, cfg.Admin.Address)
	}
	p.adminPort = port
	if _, p.probePort, err = net.SplitHostPort(cfg.Admin.ProbeAddress); err != nil {
		t.Fatalf("%s: admin.probe_address %q: %v", m.name, cfg.Admin.ProbeAddress, err)
	}
	for _, pr := range []struct {
		kind, path string
		probe      *corev1.Probe
		required   bool
	}{
		{"readiness", "/ready", p.c.ReadinessProbe, true},
		{"liveness", "/live", p.c.LivenessProbe, true},
		{"startup", "", p.c.StartupProbe, false},
	} {
		if pr.probe == nil {
			if pr.required {
				t.Errorf("%s: ebb's container has no %s probe", m.name, pr.kind)
			}
			continue
		}
		g := pr.probe.HTTPGet
		if g == nil {
			t.Errorf("%s: ebb's %s probe is not an httpGet", m.name, pr.kind)
			continue
		}
		if pr.path != "" && g.Path != pr.path || g.Path != "/ready" && g.Path != "/live" {
			t.Errorf("%s: ebb's %s probe asks %s, want %s", m.name, pr.kind, g.Path, cmp.Or(pr.path, "/live or /ready"))
		}
		if got := containerPort(p.c, g.Port); got != p.probePort {
			t.Errorf("%s: ebb's %s probe goes to port %s (container port %q), want the probe port %s", m.name, pr.kind, g.Port.String(), got, p.probePort)
		}
	}
	for _, cp := range p.c.Ports {
		if strconv.Itoa(int(cp.ContainerPort)) == p.adminPort {
			t.Errorf("%s: ebb's container declares the admin port %d: it is on loopback", m.name, cp.ContainerPort)
		}
	}

	// Every Service in front of the pod reaches a listener, not the admin
	// or the probe port.
	listenerPorts := map[string]bool{}
	for _, l := range cfg.Listeners {
		if _, port, err := net.SplitHostPort(l.Address); err == nil && l.Role != config.RoleOutbound {
			listenerPorts[port] = true
		}
	}
	served := false
	for _, s := range m.services {
		if cmp.Or(s.Namespace, "default") != cmp.Or(d.Namespace, "default") ||
			!labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(d.Spec.Template.Labels)) {
			continue
		}
		served = true
		for _, sp := range s.Spec.Ports {
			if got := containerPort(p.c, sp.TargetPort); !listenerPorts[got] {
				t.Errorf("%s: Service %s port %s goes to container port %q, which is no inbound listener of ebb", m.name, s.Name, sp.Name, got)
			}
		}
	}
	if !served {
		t.Errorf("%s: no Service selects Deployment %s", m.name, d.Name)
	}

	// The grace period covers the drain.
	grace := 30 * time.Second // the API's default
	if g := spec.TerminationGracePeriodSeconds; g != nil {
		grace = time.Duration(*g) * time.Second
	}
	if cfg.Drain.Timeout >= grace {
		t.Errorf("%s: drain.timeout %s is not under terminationGracePeriodSeconds (%s): the kubelet would kill ebb mid-drain", m.name, cfg.Drain.Timeout, grace)
	}
	if hook := p.c.Lifecycle; hook != nil && hook.PreStop != nil {
		checkPreStopDrain(t, m, p, hook.PreStop, grace)
	}
	return p
}

// checkPreStopDrain: a preStop hook that drains ebb runs `ebb drain
// -admin <admin.address> -wait`, with a -timeout between drain.timeout
// (so that the hook returns when ebb has exited, not before) and the grace
// period (which counts the hook's time).
func checkPreStopDrain(t *testing.T, m *manifest, p *ebbPod, h *corev1.LifecycleHandler, grace time.Duration) {
	t.Helper()
	if h.Exec == nil {
		t.Errorf("%s: ebb's preStop hook is not an exec of ebb drain -wait", m.name)
		return
	}
	argv := h.Exec.Command
	if len(argv) < 2 || path.Base(argv[0]) != "ebb" || argv[1] != "drain" || !slices.Contains(argv, "-wait") {
		t.Errorf("%s: ebb's preStop hook runs %q, want ebb drain ... -wait", m.name, argv)
		return
	}
	if i := slices.Index(argv, "-admin"); i < 0 || i+1 >= len(argv) || argv[i+1] != p.cfg.Admin.Address {
		t.Errorf("%s: ebb's preStop hook %q does not name admin.address %s", m.name, argv, p.cfg.Admin.Address)
	}
	wait := 60 * time.Second // ebb drain's default
	if i := slices.Index(argv, "-timeout"); i > 0 && i+1 < len(argv) {
		d, err := time.ParseDuration(argv[i+1])
		if err != nil {
			t.Errorf("%s: preStop -timeout %q: %v", m.name, argv[i+1], err)
		}
		wait = d
	}
	if wait <= p.cfg.Drain.Timeout || wait >= grace {
		t.Errorf("%s: preStop waits %s; want more than drain.timeout (%s) and less than the grace period (%s)", m.name, wait, p.cfg.Drain.Timeout, grace)
	}
}

// containerPort resolves a probe's or Service's port (a number or a
// container port's name) to c's container port number.
func containerPort(c *corev1.Container, port intstr.IntOrString) string {
	if port.Type == intstr.Int {
		return strconv.Itoa(port.IntValue())
	}
	for _, cp := range c.Ports {
		if cp.Name == port.StrVal {
			return strconv.Itoa(int(cp.ContainerPort))
		}
	}
	return ""
}

// onlyDeployment returns the manifest's one Deployment.
func onlyDeployment(t *testing.T, m *manifest) *appsv1.Deployment {
	t.Helper()
	if len(m.deployments) != 1 {
		t.Fatalf("%s: %d Deployments, want 1", m.name, len(m.deployments))
	}
	return m.deployments[0]
}

// TestKubernetesChild: ebb is the pod's container and runs the
// application as its child (ebb run -- app), with the preStop drain.
func TestKubernetesChild(t *testing.T) {
	t.Parallel()
	m := loadManifest(t, "child.yaml")
	p := checkEbbPod(t, m, onlyDeployment(t, m))
	if argv := append(slices.Clone(p.c.Command), p.c.Args...); !slices.Contains(argv, "--") {
		t.Errorf("%s: ebb runs %q, with no application after --", m.name, argv)
	}
	if p.c.Lifecycle == nil || p.c.Lifecycle.PreStop == nil {
		t.Errorf("%s: ebb has no preStop drain", m.name)
	}
}

// TestKubernetesSidecar: ebb is a native sidecar (an init container that
// restarts always, started before the application and stopped after it)
// in front of the application's container, watching the application's
// port (drain.app.tcp) so that it exits when the application does; the
// inbound cluster is that port, on which the application listens.
func TestKubernetesSidecar(t *testing.T) {
	t.Parallel()
	m := loadManifest(t, "sidecar.yaml")
	d := onlyDeployment(t, m)
	p := checkEbbPod(t, m, d)
	spec := &d.Spec.Template.Spec
	if !slices.ContainsFunc(spec.InitContainers, func(c corev1.Container) bool { return c.Name == p.c.Name }) {
		t.Fatalf("%s: ebb is not an init container", m.name)
	}
	if rp := p.c.RestartPolicy; rp == nil || *rp != corev1.ContainerRestartPolicyAlways {
		got := "unset"
		if rp != nil {
			got = string(*rp)
		}
		t.Errorf("%s: ebb's init container has restartPolicy %s, want Always (a native sidecar)", m.name, got)
	}
	if p.c.StartupProbe == nil {
		t.Errorf("%s: ebb has no startupProbe: the application would start before ebb listens", m.name)
	}
	// CPU as docs/DEPLOYMENT.md advises a sidecar: a request (its weight
	// against the application), no limit (which throttles), one P.
	if _, ok := p.c.Resources.Requests[corev1.ResourceCPU]; !ok {
		t.Errorf("%s: ebb has no CPU request", m.name)
	}
	if _, ok := p.c.Resources.Limits[corev1.ResourceCPU]; ok {
		t.Errorf("%s: ebb has a CPU limit", m.name)
	}
	if !slices.ContainsFunc(p.c.Env, func(e corev1.EnvVar) bool { return e.Name == "GOMAXPROCS" && e.Value == "1" }) {
		t.Errorf("%s: ebb's environment does not set GOMAXPROCS=1", m.name)
	}
	app := p.cfg.Drain.App.TCP
	if app == "" {
		t.Fatalf("%s: drain.app.tcp is not set: ebb would not exit with the application", m.name)
	}
	var inbound []string
	for _, l := range p.cfg.Listeners {
		if l.Role == config.RoleOutbound {
			continue
		}
		for _, r := range l.Routes {
			for _, c := range p.cfg.Clusters {
				if c.Name == r.Cluster {
					inbound = append(inbound, c.Discovery.Static...)
				}
			}
		}
	}
	if !slices.Equal(inbound, []string{app}) {
		t.Errorf("%s: the inbound listeners route to %v; want the watched application %s alone", m.name, inbound, app)
	}
	if len(spec.Containers) != 1 {
		t.Fatalf("%s: %d application containers, want 1", m.name, len(spec.Containers))
	}
	if argv := append(slices.Clone(spec.Containers[0].Command), spec.Containers[0].Args...); !slices.Contains(argv, app) {
		t.Errorf("%s: the application runs %q, not listening on drain.app.tcp %s", m.name, argv, app)
	}
}

// TestKubernetesIngress: ebb as an edge Deployment: the preStop drain,
// readiness on /ready, a PodDisruptionBudget that always leaves a
// replica serving, a rollout that never goes below the replica count, and
// a ServiceAccount allowed to list and watch the EndpointSlices of each
// namespace it discovers in, and nothing else.
func TestKubernetesIngress(t *testing.T) {
	t.Parallel()
	m := loadManifest(t, "ingress.yaml")
	d := onlyDeployment(t, m)
	p := checkEbbPod(t, m, d)
	if p.c.Lifecycle == nil || p.c.Lifecycle.PreStop == nil {
		t.Errorf("%s: ebb has no preStop drain", m.name)
	}
	replicas := int32(1)
	if d.Spec.Replicas != nil {
		replicas = *d.Spec.Replicas
	}
	if replicas < 2 {
		t.Errorf("%s: %d replicas: a drain would leave none serving", m.name, replicas)
	}
	if ru := d.Spec.Strategy.RollingUpdate; ru == nil || ru.MaxUnavailable == nil || ru.MaxUnavailable.IntValue() != 0 {
		t.Errorf("%s: the rollout may take replicas away before their successors are ready (want maxUnavailable: 0)", m.name)
	}

	covered := false
	for _, pdb := range m.pdbs {
		sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err != nil || cmp.Or(pdb.Namespace, "default") != cmp.Or(d.Namespace, "default") || !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
			continue
		}
		covered = true
		var disruptable int32
		switch {
		case pdb.Spec.MaxUnavailable != nil:
			disruptable = int32(pdb.Spec.MaxUnavailable.IntValue())
		case pdb.Spec.MinAvailable != nil:
			disruptable = replicas - int32(pdb.Spec.MinAvailable.IntValue())
		}
		if disruptable < 1 || disruptable >= replicas {
			t.Errorf("%s: PodDisruptionBudget %s lets %d of %d replicas go at once; want at least 1 (nodes can drain) and fewer than all", m.name, pdb.Name, disruptable, replicas)
		}
	}
	if !covered {
		t.Errorf("%s: no PodDisruptionBudget selects Deployment %s", m.name, d.Name)
	}

	// RBAC: the pod's ServiceAccount, bound in each namespace ebb
	// discovers in to a Role that grants list and watch on EndpointSlices
	// and no more.
	sa := d.Spec.Template.Spec.ServiceAccountName
	if sa == "" || !m.accounts[nsName(d.Namespace, sa)] {
		t.Fatalf("%s: the pod's serviceAccountName %q is not a ServiceAccount of the file", m.name, sa)
	}
	namespaces := map[string]bool{}
	for _, c := range p.cfg.Clusters {
		if k := c.Discovery.Kubernetes; k != nil {
			namespaces[k.Namespace] = true
		}
	}
	if len(namespaces) == 0 {
		t.Fatalf("%s: no cluster uses Kubernetes discovery", m.name)
	}
	for ns := range namespaces {
		var granted []string
		for _, b := range m.bindings {
			if b.Namespace != ns || b.RoleRef.Kind != "Role" ||
				!slices.ContainsFunc(b.Subjects, func(s rbacv1.Subject) bool {
					return s.Kind == "ServiceAccount" && s.Name == sa && s.Namespace == d.Namespace
				}) {
				continue
			}
			role := m.roles[nsName(ns, b.RoleRef.Name)]
			if role == nil {
				t.Errorf("%s: RoleBinding %s/%s names Role %s, which the file does not define", m.name, ns, b.Name, b.RoleRef.Name)
				continue
			}
			for _, r := range role.Rules {
				if !slices.Equal(r.APIGroups, []string{"discovery.k8s.io"}) || !slices.Equal(r.Resources, []string{"endpointslices"}) {
					t.Errorf("%s: Role %s/%s grants %v on %v: more than ebb needs", m.name, ns, role.Name, r.Verbs, r.Resources)
				}
				for _, v := range r.Verbs {
					if v != "get" && v != "list" && v != "watch" {
						t.Errorf("%s: Role %s/%s grants %q: ebb only reads", m.name, ns, role.Name, v)
					}
				}
				granted = append(granted, r.Verbs...)
			}
		}
		if !slices.Contains(granted, "list") || !slices.Contains(granted, "watch") {
			t.Errorf("%s: ServiceAccount %s may not list and watch EndpointSlices in namespace %s (granted %v)", m.name, sa, ns, granted)
		}
	}
}
