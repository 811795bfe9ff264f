package proxy_test

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The layout of the module, enforced (in the manner of Tailscale's
// deptest): the one direction imports run in, which packages may use the
// libraries an engine is built on, and what the data path must not
// depend on.

const module = "github.com/ebb-proxy/ebb/"

// layers ranks every package of the module: a package imports only
// packages of a lower rank, so that imports run one way, and two packages
// of one rank (the two engines, say) never import each other. A package
// that is not ranked fails the test: a new one takes its place here.
var layers = map[string]int{
	// Leaves: the configuration's schema, the data path's smallest parts,
	// what the data path needs of telemetry, programs of their own.
	"config":              0,
	"telemetry/collect":   0,
	"proxy/access":        0,
	"proxy/events":        0,
	"proxy/pace":          0,
	"proxy/paths":         0,
	"proxy/h2/wire":       0,
	"proxy/sock":          0,
	"examples/echo":       0,
	"examples/vip":        0,
	"examples/loadgen":    0,
	"examples/grpcecho":   0,
	"bench/fasthttp-bare": 0,
	"bench/idle-h2":       0,
	"bench/latseries":     0,
	"bench/otlp-sink":     0,
	"bench/peers":         0,
	"bench/slowloris":     0,
	"e2e":                 0, // tests only
	"docs":                0, // tests only: the links of the guide
	// The downstream connections, discovery and the telemetry pipeline,
	// on the schema.
	"proxy/downstream":         1,
	"config/internal/refgen":   1, // writes docs/CONFIGURATION.md from config
	"discovery":                1,
	"telemetry":                1,
	"proxy/headers":            1,
	"proxy/tracing":            1,
	"examples/load":            1,
	"examples/origin":          1,
	"bench/grpc-bench":         1,
	"examples/rolling-restart": 1,
	"bench/harness":            1,
	// What stands on them: the drain, on the connections it drains.
	"drain":                2,
	"drain/takeover":       2,
	"discovery/kubernetes": 2,
	"proxy/upstream":       2,
	"admin":                3,
	"proxy/proxytest":      3,
	// The data path, upwards.
	"proxy/metrics":             3,
	"proxy/h2client":            3,
	"proxy/cluster":             4,
	"proxy/route":               5,
	"proxy/forward":             6,
	"proxy/h1":                  7,
	"proxy/h2":                  7,
	"proxy/internal/enginetest": 8,
	"proxy":                     8,
	// Where everything is wired together.
	"cmd/ebb": 9,
}

// allowed lists, for each library an engine stands on, the packages whose
// non-test code may import it. The fixtures (proxy/proxytest and
// proxy/internal/enginetest) serve tests only; bench/fasthttp-bare is the bare fasthttp proxy the
// benchmark measures ebb against, bench/idle-h2 a load client of its.
var allowed = map[string][]string{
	"github.com/valyala/fasthttp": {"proxy/headers", "proxy/upstream", "proxy/cluster", "proxy/h1", "proxy/h2",
		"proxy/internal/enginetest", "proxy/proxytest", "bench/fasthttp-bare"},
	"golang.org/x/net/http2": {"proxy/h2", "proxy/h2/wire", "proxy/h2client", "proxy/proxytest", "bench/idle-h2"},
}

// serverSide are net/http's server-side names: only the admin server,
// telemetry's metrics handler and test fixtures, the example origin and
// the benchmark helpers serve HTTP with net/http; no engine does.
var serverSide = []string{"Server", "ResponseWriter", "Handler", "HandlerFunc", "ServeMux", "NewServeMux",
	"ListenAndServe", "ListenAndServeTLS", "Serve", "ServeTLS", "NewResponseController", "ResponseController"}

var serverSideAllowed = []string{"admin", "telemetry", "proxy/proxytest", "examples/origin", "examples/echo", "examples/rolling-restart", "bench/fasthttp-bare", "bench/grpc-bench"}

type listedPackage struct {
	ImportPath string
	Dir        string
	GoFiles    []string
	Imports    []string
	Deps       []string
}

func listPackages(t *testing.T) []listedPackage {
	t.Helper()
	cmd := exec.Command("go", "list", "-json", module+"...")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var pkgs []listedPackage
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p listedPackage
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) < len(layers) {
		t.Fatalf("go list found %d packages", len(pkgs))
	}
	return pkgs
}

func TestImportLayers(t *testing.T) {
	for _, p := range listPackages(t) {
		name := strings.TrimPrefix(p.ImportPath, module)
		rank, ranked := layers[name]
		if !ranked {
			t.Errorf("%s has no rank in layers: give it one", name)
		}
		for _, imp := range p.Imports {
			dep, ours := strings.CutPrefix(imp, module)
			if !ours {
				if ok, listed := allowed[imp]; listed && !slices.Contains(ok, name) {
					t.Errorf("%s imports %s; only %v may", name, imp, ok)
				}
				continue
			}
			if (strings.HasPrefix(dep, "proxy/internal/") || dep == "proxy/proxytest") && !strings.HasPrefix(name, "proxy/internal/") {
				t.Errorf("%s imports the test fixtures %s", name, dep)
			}
			depRank, depRanked := layers[dep]
			if ranked && depRanked && depRank >= rank {
				t.Errorf("%s (layer %d) imports %s (layer %d): imports run from higher layers to lower ones only", name, rank, dep, depRank)
			}
		}
	}
}

// heavy are the dependencies the data path (proxy/..., the fixtures
// aside) must not have, even indirectly: Kubernetes' client, gRPC,
// OpenTelemetry's SDK and exporters, the Prometheus client. They come
// with the discovery sources and the telemetry pipeline, which cmd/ebb
// wires to the data path: proxy/metrics hands its series over in
// telemetry/collect's plain form, and package discovery builds Kubernetes
// sources with what discovery/kubernetes gives it (UseKubernetes).
var heavy = []string{
	"k8s.io/",
	"google.golang.org/grpc",
	"go.opentelemetry.io/otel/sdk",
	"go.opentelemetry.io/otel/exporters",
	"github.com/prometheus/",
}

func TestDataPathDependencies(t *testing.T) {
	for _, p := range listPackages(t) {
		name := strings.TrimPrefix(p.ImportPath, module)
		if !strings.HasPrefix(name, "proxy") || name == "proxy/proxytest" || strings.HasPrefix(name, "proxy/internal/") {
			continue
		}
		for _, dep := range p.Deps {
			for _, h := range heavy {
				if strings.HasPrefix(dep, h) {
					t.Errorf("%s depends on %s: the data path takes no Kubernetes client, gRPC, OpenTelemetry SDK or exporter, or Prometheus client", name, dep)
				}
			}
		}
	}
}

func TestServerSideOfNetHTTP(t *testing.T) {
	for _, p := range listPackages(t) {
		name := strings.TrimPrefix(p.ImportPath, module)
		if slices.Contains(serverSideAllowed, name) || !slices.Contains(p.Imports, "net/http") {
			continue
		}
		fset := token.NewFileSet()
		for _, f := range p.GoFiles {
			file, err := parser.ParseFile(fset, filepath.Join(p.Dir, f), nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			local := "http"
			for _, im := range file.Imports {
				if path, _ := strconv.Unquote(im.Path.Value); path == "net/http" && im.Name != nil {
					local = im.Name.Name
				}
			}
			ast.Inspect(file, func(n ast.Node) bool {
				sel, ok := n.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				if id, ok := sel.X.(*ast.Ident); ok && id.Name == local && slices.Contains(serverSide, sel.Sel.Name) {
					t.Errorf("%s: %s uses net/http's server side (http.%s); only %v may", fset.Position(sel.Pos()), name, sel.Sel.Name, serverSideAllowed)
				}
				return true
			})
		}
	}
}
