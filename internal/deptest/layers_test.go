package deptest

import (
	"slices"
	"testing"
)

// The rules of the module's shape, in one place. Each package of the module
// is in one layer; a package imports only packages of its own layer or of
// layers below it. Add a new package to the layer it belongs in; the test
// fails for a package in none.
var layers = []struct {
	name string
	pkgs []string
}{
	{"API types, embedded files and helpers that know no job", []string{
		"", "/api/...", "/deploy", "/python",
		"/internal/userfile", "/internal/retry", "/internal/retry/retrytest",
		"/internal/linkprobe", "/internal/tcpinfo", "/internal/testsrc", "/internal/testbuf", "/internal/tlstest", "/internal/k8stest",
		"/internal/deptest",
	}},
	{"pure state machines (see pure below)", []string{
		"/internal/rendezvous", "/internal/shard", "/internal/liveness", "/internal/nodecheck",
		"/internal/stall", "/internal/diagnosis", "/internal/platform", "/internal/nodemanager",
		"/internal/deadline", "/internal/goodput", "/internal/jobconfig", "/internal/master/jobstate",
		"/internal/autoscale",
	}},
	{"libraries and adapters: processes, checkpoints, stores, platforms, the client", []string{
		"/internal/runconfig", "/internal/proc", "/internal/ckpt/...", "/internal/store/...", "/internal/shardbatch",
		"/internal/jobview", "/internal/jobspec", "/internal/platform/local", "/internal/platform/kubernetes",
		"/internal/platform/platformtest", "/internal/client", "/internal/kubenames", "/internal/jobconfig/configwire",
		"/internal/runconfig/runconfigtest", "/internal/eventlog", "/internal/metrics",
		"/internal/dashboard", "/internal/dashboard/browsertest", "/internal/metrics/metricstest", "/internal/tfconfig",
		"/internal/psnodes",
	}},
	{"the node agent's parts: the checkpoint saver, the node-check runner, stacks, the hosted master", []string{
		"/internal/agent/ckptsaver", "/internal/agent/nodecheckrun", "/internal/agent/stacks",
		"/internal/agent/hostmaster", "/internal/agent/privdir",
	}},
	{"the job master, the node agent and the worker SDK", []string{
		"/internal/master", "/internal/agent", "/sdk/go/rover",
	}},
	{"what composes a master or an agent", []string{
		"/internal/agent/standalone", "/internal/jobplan", "/internal/nvml", "/internal/bench",
	}},
	{"running whole jobs on a platform, and the operator that checks them with jobplan", []string{
		"/internal/kubemaster", "/internal/submit", "/internal/operator", "/internal/soak",
	}},
	{"programs and end-to-end tests", []string{
		"/cmd/...", "/test/...",
	}},
}

// pure lists the pure packages: state machines that take events and return
// state and actions, driven by one loop elsewhere. They read no clock (they
// may use package time for durations), start no goroutine, lock nothing, do
// no I/O and know nothing of the wire: whatever they import from the module
// is pure too.
var pure = []string{
	"/internal/rendezvous", "/internal/shard", "/internal/liveness", "/internal/nodecheck",
	"/internal/stall", "/internal/diagnosis", "/internal/platform", "/internal/nodemanager",
	"/internal/deadline", "/internal/goodput", "/internal/jobconfig", "/internal/master/jobstate",
	"/internal/autoscale",
}

// impureImports are the packages a pure package must not import itself:
// they let it do I/O, lock or wait.
var impureImports = map[string]string{
	"os": "I/O", "os/exec": "processes", "os/signal": "signals", "io/fs": "files", "net": "sockets",
	"net/http": "HTTP", "sync": "locks: the driver serialises", "sync/atomic": "shared memory: the driver serialises",
	"log/slog": "logging: return what happened instead", "context": "cancellation belongs to the driver",
}

// impureDeps are the packages a pure package must not link at all.
var impureDeps = map[string]string{
	"net":                            "sockets",
	"net/http":                       "HTTP",
	Module + "/api/rover/v1/...":     "wire types: the edge converts",
	"connectrpc.com/connect":         "RPC",
	"google.golang.org/grpc/...":     "RPC",
	"k8s.io/...":                     "Kubernetes",
	"sigs.k8s.io/...":                "Kubernetes",
	"google.golang.org/protobuf/...": "wire types: the edge converts",
}

// knownImpurities are the rules that pure packages break today, each to be
// removed with its cause: package -> forbidden import or dependency -> why
// it is still there.
var knownImpurities = map[string]map[string]string{
	// platform declares the interface its drivers implement, whose calls
	// take a context; it holds no state.
	"/internal/platform": {"context": "the Platform interface's methods take one"},
}

// forbiddenEdges are rules the layers do not say: packages of one layer
// that must stay apart, or links a package must not make.
var forbiddenEdges = []struct{ from, to, why string }{
	{"/internal/agent", "/internal/master", "the agent reaches masters through package client; standalone hosts one"},
	{"/internal/client", "/internal/master", "the client is what agents link; it must not pull the server in"},
	{"/internal/kubemaster", "/internal/operator", "the names both use are package kubenames'"},
	{"/internal/jobview", "/internal/...", "jobview only formats roverv1 messages: it reaches no master, client or platform"},
}

func layerOf(t *testing.T, path string) int {
	t.Helper()
	found := -1
	for i, l := range layers {
		for _, pattern := range l.pkgs {
			if Matches(Module+pattern, path) && found != i {
				if found >= 0 {
					t.Errorf("package %s is in two layers: %q and %q", path, layers[found].name, l.name)
				}
				found = i
			}
		}
	}
	return found
}

// TestLayers checks that every package of the module is in a layer and
// imports nothing from a layer above its own.
func TestLayers(t *testing.T) {
	pkgs := Load(t)
	for _, path := range Sorted(pkgs) {
		layer := layerOf(t, path)
		if layer < 0 {
			t.Errorf("package %s is in no layer: add it to layers in internal/deptest/layers_test.go", path)
			continue
		}
		for _, imp := range pkgs[path].Imports {
			if _, ok := pkgs[imp]; !ok {
				continue
			}
			if l := layerOf(t, imp); l > layer {
				t.Errorf("package %s (%s) imports %s, of a layer above it (%s)", path, layers[layer].name, imp, layers[l].name)
			}
		}
	}
}

// TestLayersListRealPackages keeps the tables true: each pattern names a
// package that exists.
func TestLayersListRealPackages(t *testing.T) {
	pkgs := Load(t)
	var patterns []string
	for _, l := range layers {
		patterns = append(patterns, l.pkgs...)
	}
	patterns = append(patterns, pure...)
	for _, e := range forbiddenEdges {
		patterns = append(patterns, e.from, e.to)
	}
	for _, pattern := range patterns {
		if !slices.ContainsFunc(Sorted(pkgs), func(path string) bool { return Matches(Module+pattern, path) }) {
			t.Errorf("the rules name %s, which is no package of the module", Module+pattern)
		}
	}
	for pkg := range knownImpurities {
		if !slices.Contains(pure, pkg) {
			t.Errorf("knownImpurities names %s, which is not in pure", pkg)
		}
	}
}

// TestForbiddenEdges checks the rules between packages that the layers do
// not say, on what each package links.
func TestForbiddenEdges(t *testing.T) {
	pkgs := Load(t)
	for _, e := range forbiddenEdges {
		p, ok := pkgs[Module+e.from]
		if !ok {
			t.Errorf("no package %s", Module+e.from)
			continue
		}
		for _, bad := range BadDeps(p, map[string]string{Module + e.to: e.why}) {
			t.Error(bad)
		}
	}
}

// TestPurePackages checks that the pure packages stay pure.
func TestPurePackages(t *testing.T) {
	pkgs := Load(t)
	for _, short := range pure {
		p, ok := pkgs[Module+short]
		if !ok {
			t.Errorf("no package %s: remove it from pure, or fix its path", Module+short)
			continue
		}
		known := knownImpurities[short]
		for _, imp := range p.Imports {
			if allowed(known, imp) {
				continue
			}
			if why, bad := impureImports[imp]; bad {
				t.Errorf("pure package %s imports %s (%s)", p.ImportPath, imp, why)
			}
			if _, inModule := pkgs[imp]; inModule && !slices.ContainsFunc(pure, func(s string) bool { return Module+s == imp }) {
				t.Errorf("pure package %s imports %s, which is not pure", p.ImportPath, imp)
			}
		}
		forbidden := map[string]string{}
		for pattern, why := range impureDeps {
			if known[pattern] == "" {
				forbidden[pattern] = why
			}
		}
		for _, bad := range BadDeps(p, forbidden) {
			t.Errorf("pure package %s", bad)
		}
		for _, use := range slices.Concat(ClockCalls(t, p), GoStatements(t, p)) {
			t.Errorf("pure package %s: %s", p.ImportPath, use)
		}
	}
}

// allowed reports whether one of the known impurities' patterns matches path.
func allowed(known map[string]string, path string) bool {
	for pattern := range known {
		if Matches(pattern, path) {
			return true
		}
	}
	return false
}

// TestKnownImpuritiesStillHold keeps the allow-list short: an entry whose
// import or dependency is gone fails, so that it is removed with its cause.
func TestKnownImpuritiesStillHold(t *testing.T) {
	pkgs := Load(t)
	for short, rules := range knownImpurities {
		p := pkgs[Module+short]
		for pattern, why := range rules {
			still := slices.ContainsFunc(p.Deps, func(dep string) bool { return Matches(pattern, dep) })
			if !still {
				t.Errorf("%s no longer links %s (%s): remove it from knownImpurities", p.ImportPath, pattern, why)
			}
		}
	}
}
