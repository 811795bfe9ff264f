package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The compose topology for real: Docker builds the images from the
// repository's Dockerfiles, docker compose starts nginx, two ebb
// replicas and two apps, and deploy/compose/restart.sh restarts ebb-1
// while the load client sends through nginx.
//
// Nothing is pulled from a registry (there is none here): the three
// public base images the Dockerfiles name are stood in for by images
// made on this machine, passed as the build arguments meant for a
// mirror: Debian from Debian's packages (debootstrap), Go's image as that
// plus this machine's Go, and distroless's static image as an image with
// nothing but /etc/passwd, CA certificates and /tmp (no shell: a
// healthcheck that needs one fails here as it would on distroless). The
// build's Go module downloads come from this machine's module cache,
// served as a module proxy to the build containers.

// composeProject is the compose project the test runs under.
const composeProject = "ebb-e2e"

// The stand-ins for the public base images.
const (
	debianStandIn  = "ebb-e2e/debian:bookworm"
	staticStandIn  = "ebb-e2e/static:nonroot"
	golangStandInF = "ebb-e2e/golang:%s" // the local Go version
)

// composeTimeout bounds the whole run: image builds (about 2 minutes on
// 2 cores from nothing), the topology's start, the restart under load.
const composeTimeout = 12 * time.Minute

// docker runs the docker CLI and returns its combined output, failing the
// test on an error.
func docker(t *testing.T, ctx context.Context, stdin io.Reader, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(ctx, "docker", args...)
	cmd.Stdin = stdin
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("docker %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// ensureDockerd makes sure a Docker engine answers: the one running, or
// one the test starts (dockerd from Debian's docker.io), stopped at
// cleanup.
func ensureDockerd(t *testing.T, ctx context.Context) {
	t.Helper()
	tool(t, "docker")
	if exec.CommandContext(ctx, "docker", "info").Run() == nil {
		return
	}
	dockerd := tool(t, "dockerd")
	if os.Geteuid() != 0 {
		t.Fatal("no Docker engine runs, and starting one (dockerd) needs root")
	}
	logPath := filepath.Join(t.TempDir(), "dockerd.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	d := exec.Command(dockerd)
	d.Stdout, d.Stderr = logf, logf
	d.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := d.Start(); err != nil {
		t.Fatalf("starting dockerd: %v", err)
	}
	exited := make(chan struct{})
	go func() {
		d.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		d.Process.Signal(syscall.SIGTERM)
		timeout, stop := after(time.Minute)
		defer stop()
		select {
		case <-exited:
		case <-timeout:
			t.Errorf("dockerd did not stop within a minute of SIGTERM; killed")
			d.Process.Kill()
			<-exited
		}
	})
	deadline, stop := after(time.Minute)
	defer stop()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for exec.CommandContext(ctx, "docker", "info").Run() != nil {
		select {
		case <-tick.C:
		case <-exited:
			b, _ := os.ReadFile(logPath)
			t.Fatalf("dockerd exited; its log:\n%s", b)
		case <-deadline:
			b, _ := os.ReadFile(logPath)
			t.Fatalf("dockerd did not answer within a minute; its log:\n%s", b)
		}
	}
}

// imageExists reports whether the engine has the image tag.
func imageExists(ctx context.Context, tag string) bool {
	return exec.CommandContext(ctx, "docker", "image", "inspect", tag).Run() == nil
}

// tarOf returns a tar stream of files (path in the archive -> content;
// a path ending in / is a directory, mode 1777 for tmp/).
func tarOf(t *testing.T, files map[string]string) *bytes.Buffer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for name, content := range files {
		h := &tar.Header{Name: name, Mode: 0o644, Size: int64(len(content)), Typeflag: tar.TypeReg}
		if strings.HasSuffix(name, "/") {
			h = &tar.Header{Name: name, Mode: 0o755, Typeflag: tar.TypeDir}
			if name == "tmp/" {
				h.Mode = 0o1777
			}
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(tw, content); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return &buf
}

// baseImages makes the stand-ins for the public base images, unless the
// engine has them from an earlier run, and returns the build arguments
// naming them.
func baseImages(t *testing.T, ctx context.Context) map[string]string {
	t.Helper()
	goVersion := strings.TrimPrefix(runtime.Version(), "go")
	golang := fmt.Sprintf(golangStandInF, goVersion)

	if !imageExists(ctx, debianStandIn) {
		debootstrap := tool(t, "debootstrap")
		rootfs := filepath.Join(t.TempDir(), "rootfs")
		cmd := exec.CommandContext(ctx, debootstrap, "--variant=minbase", "bookworm", rootfs, "http://deb.debian.org/debian")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("debootstrap: %v\n%s", err, out)
		}
		// The packages it fetched are not part of the image.
		debs, _ := filepath.Glob(filepath.Join(rootfs, "var/cache/apt/archives/*.deb"))
		for _, d := range debs {
			os.Remove(d)
		}
		tarc := exec.CommandContext(ctx, "tar", "-C", rootfs, "-c", ".")
		pipe, err := tarc.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := tarc.Start(); err != nil {
			t.Fatal(err)
		}
		docker(t, ctx, pipe, "import", "-c", `CMD ["bash"]`, "-", debianStandIn)
		if err := tarc.Wait(); err != nil {
			t.Fatalf("tar of the Debian root: %v", err)
		}
	}
	if !imageExists(ctx, golang) {
		// Debian with CA certificates and this machine's Go, as golang's
		// images are; the build context is the Dockerfile and GOROOT.
		dir := t.TempDir()
		dockerfile := "FROM " + debianStandIn + `
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates && rm -rf /var/lib/apt/lists/*
COPY go /usr/local/go
ENV PATH=/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin GOTOOLCHAIN=local
WORKDIR /go
`
		if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte(dockerfile), 0o644); err != nil {
			t.Fatal(err)
		}
		goroot := runtime.GOROOT()
		if out, err := exec.Command("go", "env", "GOROOT").Output(); err == nil {
			goroot = strings.TrimSpace(string(out))
		}
		tarc := exec.CommandContext(ctx, "tar", "-c", "-C", dir, "Dockerfile", "-C", filepath.Dir(goroot), "--transform", "s,^"+filepath.Base(goroot)+",go,", filepath.Base(goroot))
		pipe, err := tarc.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := tarc.Start(); err != nil {
			t.Fatal(err)
		}
		docker(t, ctx, pipe, "build", "-q", "-t", golang, "-")
		if err := tarc.Wait(); err != nil {
			t.Fatalf("tar of the Go build context: %v", err)
		}
	}
	if !imageExists(ctx, staticStandIn) {
		certs, err := os.ReadFile("/etc/ssl/certs/ca-certificates.crt")
		if err != nil {
			t.Fatalf("CA certificates for the static image: %v", err)
		}
		docker(t, ctx, tarOf(t, map[string]string{
			"etc/":                              "",
			"etc/passwd":                        "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n",
			"etc/group":                         "root:x:0:\nnonroot:x:65532:\n",
			"etc/ssl/":                          "",
			"etc/ssl/certs/":                    "",
			"etc/ssl/certs/ca-certificates.crt": string(certs),
			"tmp/":                              "",
		}), "import", "-", staticStandIn)
	}
	return map[string]string{"DEBIAN_IMAGE": debianStandIn, "GO_IMAGE": golang, "RUNTIME_IMAGE": staticStandIn}
}

// moduleProxy serves this machine's Go module cache as a module proxy
// on the address of Docker's default bridge, which the build containers
// reach, and returns its URL.
func moduleProxy(t *testing.T, ctx context.Context) string {
	t.Helper()
	gw := bridgeGateway(t, ctx)
	out, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		t.Fatalf("go env GOMODCACHE: %v", err)
	}
	dir := filepath.Join(strings.TrimSpace(string(out)), "cache", "download")
	ln, err := net.Listen("tcp", net.JoinHostPort(gw, "0"))
	if err != nil {
		t.Fatalf("listening on Docker's bridge (%s): %v", gw, err)
	}
	srv := &http.Server{Handler: http.FileServer(http.Dir(dir)), ReadHeaderTimeout: 10 * time.Second}
	served := make(chan struct{})
	go func() {
		defer close(served)
		srv.Serve(ln)
	}()
	t.Cleanup(func() {
		srv.Close()
		<-served
	})
	// What the cache lacks comes from the public proxy.
	return "http://" + ln.Addr().String() + ",https://proxy.golang.org"
}

// bridgeGateway returns the address of Docker's default bridge on this
// host: the gateway its IPAM configuration names or, when that is empty
// (as seen on a daemon's very first start, which creates the bridge), the
// IPv4 address of the bridge's interface.
func bridgeGateway(t *testing.T, ctx context.Context) string {
	t.Helper()
	out := docker(t, ctx, nil, "network", "inspect", "bridge", "-f",
		`{{(index .IPAM.Config 0).Gateway}} {{index .Options "com.docker.network.bridge.name"}}`)
	gw, name, _ := strings.Cut(strings.TrimSpace(out), " ")
	if net.ParseIP(gw) != nil {
		return gw
	}
	if name == "" {
		name = "docker0"
	}
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		t.Fatalf("Docker's bridge network names no gateway (%q), and its interface %s: %v", gw, name, err)
	}
	addrs, err := ifi.Addrs()
	if err != nil {
		t.Fatalf("the addresses of Docker's bridge %s: %v", name, err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil {
			return n.IP.String()
		}
	}
	t.Fatalf("Docker's bridge network names no gateway (%q), and its interface %s has no IPv4 address (%v)", gw, name, addrs)
	return ""
}

// composeCommand is docker compose, or docker-compose where the plugin
// is missing.
func composeCommand(ctx context.Context) []string {
	if exec.CommandContext(ctx, "docker", "compose", "version").Run() == nil {
		return []string{"docker", "compose"}
	}
	return []string{"docker-compose"}
}

// TestComposeRestart runs the compose topology in Docker and
// deploy/compose/restart.sh on it: ebb-1 restarted while the load client
// sends GETs and POSTs through nginx. The script must exit 0, the load
// client must report its three kinds of clients with answers and no
// error, and ebb-1 must have drained under load ("drained", requests
// received during the drain) and exited by itself.
//
// Not parallel: building the images takes both cores for minutes.
func TestComposeRestart(t *testing.T) {
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), composeTimeout)
	defer cancel()
	ensureDockerd(t, ctx)
	compose := composeCommand(ctx)
	if len(compose) == 1 {
		tool(t, "docker-compose")
	}
	env := append(os.Environ(), "COMPOSE_PROJECT_NAME="+composeProject, "EBB_WAF_PORT=", "COMPOSE="+strings.Join(compose, " "))
	for k, v := range baseImages(t, ctx) {
		env = append(env, k+"="+v)
	}
	env = append(env, "GOPROXY="+moduleProxy(t, ctx))
	run := func(ctx context.Context, args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, compose[0], append(compose[1:], args...)...)
		cmd.Dir, cmd.Env = root, env
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := run(ctx, "config", "-q"); err != nil {
		t.Fatalf("%s config: the compose file does not validate: %v\n%s", strings.Join(compose, " "), err, out)
	}
	down := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if out, err := run(ctx, "--profile", "load", "down", "-v", "--remove-orphans", "-t", "5"); err != nil {
			t.Errorf("compose down: %v\n%s", err, out)
		}
	}
	down() // what a run that did not finish left
	t.Cleanup(down)

	script := exec.CommandContext(ctx, filepath.Join(root, "deploy", "compose", "restart.sh"), "ebb-1", "12s")
	script.Dir, script.Env = root, env
	outb, err := script.CombinedOutput()
	out := string(outb)
	if err != nil {
		logs, _ := run(context.Background(), "logs", "--no-color", "--tail", "60")
		t.Fatalf("deploy/compose/restart.sh: %v\n%s\nthe services' last logs:\n%s", err, out, logs)
	}
	from := func(marker string) string {
		if i := strings.LastIndex(out, marker); i >= 0 {
			return out[i:]
		}
		t.Fatalf("deploy/compose/restart.sh printed no %q:\n%s", marker, out)
		return ""
	}
	t.Logf("restart.sh, from the restart on:\n%s", from("== restarting"))
	report := from("== the load client's report")

	if !strings.Contains(report, "client errors: 0,") {
		t.Errorf("the load client saw errors:\n%s", report)
	}
	for _, kind := range []string{"HTTP/1.1 keep-alive GET", "HTTP/1.1 keep-alive POST", "HTTP/1.1 new connections"} {
		m := regexp.MustCompile(regexp.QuoteMeta(kind) + `:\s+(\d+) ok,\s+(\d+) errors`).FindStringSubmatch(report)
		if m == nil {
			t.Errorf("the load client's report has no line for %s:\n%s", kind, report)
			continue
		}
		if ok, _ := strconv.Atoi(m[1]); ok == 0 || m[2] != "0" {
			t.Errorf("%s: %s ok, %s errors; want answers and no error", kind, m[1], m[2])
		}
	}
	m := regexp.MustCompile(`ended drained after [0-9.]+s of its 25s deadline.*During the drain: (\d+) requests received`).FindStringSubmatch(out)
	switch {
	case m == nil:
		t.Errorf("ebb-1's log has no drain summary ending drained:\n%s", out)
	case m[1] == "0":
		t.Errorf("ebb-1 received no request during its drain: the restart was not under load")
	}
	if !strings.Contains(out, `"msg":"ebb exiting","reason":"drained","forced_closes":0`) {
		t.Errorf("ebb-1 did not exit drained with nothing forced:\n%s", out)
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Errorf("the run took more than %s", composeTimeout)
	}
}
