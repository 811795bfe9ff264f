package e2e

import (
	"bytes"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// The compose topology (docker-compose.yml, deploy/compose/): nginx as
// the WAF → ebb-1, ebb-2 → app-1, app-2, and a load client. This file
// checks that its pieces agree with each other; compose_docker_test.go
// runs it in Docker.

// composeFile is the part of a compose file the tests read. Decoding is
// strict: a key the tests do not know is an error, so that a typo in
// docker-compose.yml fails here rather than being ignored by Docker.
type composeFile struct {
	Services   map[string]composeService `yaml:"services"`
	Networks   map[string]composeNetwork `yaml:"networks"`
	Extensions map[string]any            `yaml:",inline"` // x-... keys: anchors
}

type composeService struct {
	Image           string                        `yaml:"image"`
	Build           *composeBuild                 `yaml:"build"`
	Entrypoint      []string                      `yaml:"entrypoint"`
	Command         []string                      `yaml:"command"`
	Volumes         []string                      `yaml:"volumes"`
	Ports           []string                      `yaml:"ports"`
	Environment     map[string]string             `yaml:"environment"`
	Healthcheck     *composeHealthcheck           `yaml:"healthcheck"`
	DependsOn       map[string]composeDependency  `yaml:"depends_on"`
	StopGracePeriod string                        `yaml:"stop_grace_period"`
	Profiles        []string                      `yaml:"profiles"`
	Networks        map[string]composeServiceLink `yaml:"networks"`
}

type composeBuild struct {
	Context    string            `yaml:"context"`
	Dockerfile string            `yaml:"dockerfile"`
	Args       map[string]string `yaml:"args"`
}

type composeHealthcheck struct {
	Test     []string `yaml:"test"`
	Interval string   `yaml:"interval"`
	Timeout  string   `yaml:"timeout"`
	Retries  int      `yaml:"retries"`
}

type composeDependency struct {
	Condition string `yaml:"condition"`
}

type composeServiceLink struct {
	IPv4Address string `yaml:"ipv4_address"`
}

type composeNetwork struct {
	IPAM struct {
		Config []struct {
			Subnet string `yaml:"subnet"`
		} `yaml:"config"`
	} `yaml:"ipam"`
}

// composeEbbConfig is the part of deploy/compose/ebb.yaml the checks read.
type composeEbbConfig struct {
	Admin struct {
		Address      string `yaml:"address"`
		ProbeAddress string `yaml:"probe_address"`
	} `yaml:"admin"`
	Listeners []struct {
		Address string `yaml:"address"`
		Headers struct {
			TrustedProxies []string `yaml:"trusted_proxies"`
		} `yaml:"headers"`
	} `yaml:"listeners"`
	Clusters []struct {
		Discovery struct {
			Static []string `yaml:"static"`
		} `yaml:"discovery"`
	} `yaml:"clusters"`
	Drain struct {
		Timeout     string `yaml:"timeout"`
		AcceptUntil string `yaml:"accept_until"`
	} `yaml:"drain"`
}

// readCompose decodes the repository's docker-compose.yml strictly.
func readCompose(t *testing.T, root string) composeFile {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var f composeFile
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	for k := range f.Extensions {
		if !strings.HasPrefix(k, "x-") {
			t.Errorf("docker-compose.yml: unknown top-level key %q", k)
		}
	}
	return f
}

// mounted returns the file of the repository that svc mounts at path in
// the container, relative to the repository.
func mounted(t *testing.T, name string, svc composeService, path string) string {
	t.Helper()
	for _, v := range svc.Volumes {
		parts := strings.Split(v, ":")
		if len(parts) >= 2 && parts[1] == path {
			if len(parts) < 3 || parts[2] != "ro" {
				t.Errorf("%s mounts %s writable, want :ro", name, parts[0])
			}
			return filepath.Clean(parts[0])
		}
	}
	t.Fatalf("%s mounts nothing at %s (volumes %q)", name, path, svc.Volumes)
	return ""
}

// flagValue returns the value following flag in args.
func flagValue(args []string, flag string) (string, bool) {
	i := slices.Index(args, flag)
	if i < 0 || i+1 >= len(args) {
		return "", false
	}
	return args[i+1], true
}

// TestComposeFile checks that the compose topology's files agree: the
// commands and healthchecks of docker-compose.yml with the images
// (deploy/Dockerfile, deploy/compose/nginx.Dockerfile), with ebb's
// configuration (deploy/compose/ebb.yaml, which ebb check must accept)
// and with nginx's (deploy/compose/nginx.conf); ports, addresses and
// timeouts with each other; and the admin on loopback.
func TestComposeFile(t *testing.T) {
	t.Parallel()
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	f := readCompose(t, root)
	svc := func(name string) composeService {
		t.Helper()
		s, ok := f.Services[name]
		if !ok {
			t.Fatalf("docker-compose.yml has no service %s", name)
		}
		return s
	}
	// Every service builds its image from a Dockerfile of the repository;
	// those of ebb's image share one.
	for name, s := range f.Services {
		if s.Build == nil || s.Image == "" {
			t.Errorf("%s: want both image and build (the image the build tags)", name)
			continue
		}
		if _, err := os.Stat(filepath.Join(root, s.Build.Context, s.Build.Dockerfile)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	ebbImage := svc("ebb-1").Image
	for _, name := range []string{"app-1", "app-2", "ebb-2", "load"} {
		if s := svc(name); s.Image != ebbImage || s.Build.Dockerfile != "deploy/Dockerfile" {
			t.Errorf("%s: image %s from %s, want ebb's (%s from deploy/Dockerfile)", name, s.Image, s.Build.Dockerfile, ebbImage)
		}
	}
	dockerfile, err := os.ReadFile(filepath.Join(root, "deploy", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`ENTRYPOINT ["/usr/local/bin/ebb"]`, "/out/ebb /out/origin /out/load /usr/local/bin/", "USER 65532:65532"} {
		if !strings.Contains(string(dockerfile), want) {
			t.Errorf("deploy/Dockerfile does not have %q", want)
		}
	}
	// The build arguments the compose file passes are those the
	// Dockerfiles declare.
	for name, s := range f.Services {
		df, err := os.ReadFile(filepath.Join(root, s.Build.Context, s.Build.Dockerfile))
		if err != nil {
			continue
		}
		for arg := range s.Build.Args {
			if !regexp.MustCompile(`(?m)^ARG ` + arg + `(=|$)`).Match(df) {
				t.Errorf("%s passes build argument %s, which %s does not declare", name, arg, s.Build.Dockerfile)
			}
		}
	}

	// The apps: origin on the port the healthcheck asks.
	apps := map[string]string{} // service -> port
	for _, name := range []string{"app-1", "app-2"} {
		s := svc(name)
		addr, ok := flagValue(s.Entrypoint, "-addr")
		if !ok || s.Entrypoint[0] != "/usr/local/bin/origin" {
			t.Fatalf("%s: entrypoint %q, want /usr/local/bin/origin -addr", name, s.Entrypoint)
		}
		_, port, _ := net.SplitHostPort(addr)
		apps[name] = port
		url, _ := flagValue(s.Healthcheck.Test, "-url")
		if want := "http://127.0.0.1:" + port + "/"; url != want {
			t.Errorf("%s: healthcheck asks %q, want %q", name, url, want)
		}
	}

	// The ebb replicas: run the mounted configuration, which ebb check
	// accepts; healthcheck on the same file; fixed addresses.
	subnet, err := netip.ParsePrefix(f.Networks["default"].IPAM.Config[0].Subnet)
	if err != nil {
		t.Fatalf("docker-compose.yml: the default network's subnet: %v", err)
	}
	var cfgFile string
	var cfg composeEbbConfig
	replicas := map[string]netip.Addr{}
	for _, name := range []string{"ebb-1", "ebb-2"} {
		s := svc(name)
		path, ok := flagValue(s.Command, "-config")
		if !ok || s.Command[0] != "run" || s.Entrypoint != nil {
			t.Fatalf("%s: command %q, want run -config FILE on the image's entrypoint", name, s.Command)
		}
		file := mounted(t, name, s, path)
		if want := []string{"CMD", "/usr/local/bin/ebb", "health", "-config", path}; !slices.Equal(s.Healthcheck.Test, want) {
			t.Errorf("%s: healthcheck %q, want %q", name, s.Healthcheck.Test, want)
		}
		if cfgFile != "" && file != cfgFile {
			t.Errorf("%s runs %s, ebb-1 %s: want the same", name, file, cfgFile)
		}
		cfgFile = file
		ip, err := netip.ParseAddr(s.Networks["default"].IPv4Address)
		if err != nil || !subnet.Contains(ip) {
			t.Errorf("%s: address %q, want a fixed one in %s (nginx resolves it once)", name, s.Networks["default"].IPv4Address, subnet)
		}
		replicas[name] = ip
		for app := range apps {
			if d, ok := s.DependsOn[app]; !ok || d.Condition != "service_healthy" {
				t.Errorf("%s: want depends_on %s: service_healthy", name, app)
			}
		}
	}
	if out, err := exec.Command(ebbBin, "check", "-config", filepath.Join(root, cfgFile)).CombinedOutput(); err != nil {
		t.Fatalf("ebb check %s: %v\n%s", cfgFile, err, out)
	}
	b, err := os.ReadFile(filepath.Join(root, cfgFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		t.Fatalf("%s: %v", cfgFile, err)
	}
	if host, _, err := net.SplitHostPort(cfg.Admin.Address); err != nil || !net.ParseIP(host).IsLoopback() {
		t.Errorf("%s: admin.address %q, want loopback (its POST endpoints drain ebb)", cfgFile, cfg.Admin.Address)
	}
	if cfg.Admin.ProbeAddress == "" {
		t.Errorf("%s: no admin.probe_address; ebb health -config would ask the admin address", cfgFile)
	}
	if cfg.Drain.AcceptUntil != "after_delay" {
		t.Errorf("%s: drain.accept_until %q, want after_delay (nginx is never told: a refused connection is its cue)", cfgFile, cfg.Drain.AcceptUntil)
	}
	for _, ep := range cfg.Clusters[0].Discovery.Static {
		host, port, _ := net.SplitHostPort(ep)
		if p, ok := apps[host]; !ok || p != port {
			t.Errorf("%s: endpoint %s is not an app service on its port (%v)", cfgFile, ep, apps)
		}
	}
	_, ebbPort, _ := net.SplitHostPort(cfg.Listeners[0].Address)
	timeout, err1 := time.ParseDuration(cfg.Drain.Timeout)
	grace, err2 := time.ParseDuration(svc("ebb-1").StopGracePeriod)
	if err1 != nil || err2 != nil || grace <= timeout {
		t.Errorf("stop_grace_period %q must exceed drain.timeout %q (Docker's SIGKILL after it)", svc("ebb-1").StopGracePeriod, cfg.Drain.Timeout)
	}

	// The WAF: nginx's upstreams are the replicas on their listener's
	// port; its listen port is the one published, on loopback only; the
	// healthcheck asks a location nginx serves; ebb trusts its address.
	waf := svc("waf")
	conf := mounted(t, "waf", waf, "/etc/nginx/nginx.conf")
	nb, err := os.ReadFile(filepath.Join(root, conf))
	if err != nil {
		t.Fatal(err)
	}
	var upstreams []string
	for _, m := range regexp.MustCompile(`(?m)^\s*server\s+([^\s;{]+)[^;{]*;`).FindAllStringSubmatch(string(nb), -1) {
		upstreams = append(upstreams, m[1])
	}
	if want := []string{"ebb-1:" + ebbPort, "ebb-2:" + ebbPort}; !slices.Equal(upstreams, want) {
		t.Errorf("%s: upstream servers %q, want %q", conf, upstreams, want)
	}
	m := regexp.MustCompile(`(?m)^\s*listen\s+(\d+);`).FindStringSubmatch(string(nb))
	if m == nil {
		t.Fatalf("%s: no listen directive", conf)
	}
	if len(waf.Ports) != 1 || !strings.HasPrefix(waf.Ports[0], "127.0.0.1:") || !strings.HasSuffix(waf.Ports[0], ":"+m[1]) {
		t.Errorf("waf publishes %q, want 127.0.0.1:PORT:%s (nginx's listen port, on the host's loopback)", waf.Ports, m[1])
	}
	if len(waf.Healthcheck.Test) == 0 {
		t.Fatal("waf has no healthcheck")
	}
	probe := waf.Healthcheck.Test[len(waf.Healthcheck.Test)-1]
	if !strings.HasPrefix(probe, "http://127.0.0.1/") || !strings.Contains(string(nb), "location = "+strings.TrimPrefix(probe, "http://127.0.0.1")+" ") {
		t.Errorf("waf's healthcheck asks %q, which is not a location of %s", probe, conf)
	}
	wafIP := waf.Networks["default"].IPv4Address
	if !slices.Contains(cfg.Listeners[0].Headers.TrustedProxies, wafIP) {
		t.Errorf("%s: trusted_proxies %q does not hold waf's address %s", cfgFile, cfg.Listeners[0].Headers.TrustedProxies, wafIP)
	}
	for name := range replicas {
		if d, ok := waf.DependsOn[name]; !ok || d.Condition != "service_healthy" {
			t.Errorf("waf: want depends_on %s: service_healthy", name)
		}
	}

	// The load client sends to nginx once it is healthy, and only when
	// asked for (a profile).
	load := svc("load")
	if u, _ := flagValue(load.Entrypoint, "-url"); u != "http://waf" || load.Entrypoint[0] != "/usr/local/bin/load" {
		t.Errorf("load: entrypoint %q, want /usr/local/bin/load -url http://waf", load.Entrypoint)
	}
	if d := load.DependsOn["waf"]; d.Condition != "service_healthy" || !slices.Equal(load.Profiles, []string{"load"}) {
		t.Errorf("load: want depends_on waf: service_healthy and profiles [load]")
	}

	// The restart script's default replica exists.
	script, err := os.ReadFile(filepath.Join(root, "deploy", "compose", "restart.sh"))
	if err != nil {
		t.Fatal(err)
	}
	if m := regexp.MustCompile(`replica=\$\{1:-([a-z0-9-]+)\}`).FindSubmatch(script); m == nil {
		t.Error("deploy/compose/restart.sh: no default replica")
	} else if _, ok := replicas[string(m[1])]; !ok {
		t.Errorf("deploy/compose/restart.sh restarts %s by default, not an ebb replica", m[1])
	}
	if out, err := exec.Command("bash", "-n", filepath.Join(root, "deploy", "compose", "restart.sh")).CombinedOutput(); err != nil {
		t.Errorf("bash -n deploy/compose/restart.sh: %v\n%s", err, out)
	}
}
