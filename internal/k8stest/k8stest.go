// Package k8stest starts a real Kubernetes control plane for tests: etcd and
// kube-apiserver run as child processes through controller-runtime's envtest,
// with CRDs installed, a client, and a kubeconfig file for child processes
// (rover master, kubectl, kwok). It is test support only; no production code
// may import it. It owns no cluster logic and fakes nothing: there is no
// kubelet, scheduler or controller-manager unless a test starts them from the
// same testbin folder (Env.Bin).
//
// The binaries come from testbin/ (`make testbin`), found through
// KUBEBUILDER_ASSETS or in $HOME/.cache/rover/testbin-v1.37.2. When they are
// missing, Start fails the test and says how to build them; it never skips.
//
//	env := k8stest.Start(t, k8stest.Options{CRDDirs: []string{"deploy/crd"}})
//	err := env.Client.Create(ctx, &corev1.Namespace{...})
//	cmd := exec.Command(env.Bin(t, "kubectl"), "--kubeconfig", env.Kubeconfig, "get", "ns")
//
// See docs/design/k8s-testing.md.
package k8stest

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/go-logr/logr"
)

// Options says what Start sets up beyond etcd and kube-apiserver.
type Options struct {
	// CRDDirs are folders (or files) of CRD YAML or JSON to install before
	// Start returns. Relative paths are taken from the repository root
	// (RepoRoot), so "deploy/crd" works from any package's test.
	CRDDirs []string
	// AllowMissingCRDDirs makes a CRDDirs entry that does not exist a logged
	// no-op instead of a test failure.
	AllowMissingCRDDirs bool
	// CRDs are installed along with those read from CRDDirs.
	CRDs []*apiextensionsv1.CustomResourceDefinition
	// Scheme is used by Env.Client and for CRD conversion. Nil means
	// NewScheme(); one of the caller's own should start from NewScheme too.
	Scheme *runtime.Scheme
}

// Env is a running control plane. Start stops it in t.Cleanup.
type Env struct {
	// Config reaches the API server as a member of system:masters.
	Config *rest.Config
	// Client is a controller-runtime client on Config, with Scheme.
	Client client.Client
	// Scheme is Options.Scheme or NewScheme().
	Scheme *runtime.Scheme
	// Kubeconfig is the path of a kubeconfig file (mode 0600) for a user in
	// system:masters, for child processes: --kubeconfig or $KUBECONFIG.
	Kubeconfig string
	// AssetsDir is the folder the binaries came from.
	AssetsDir string
	// Environment is envtest's, for what this package does not wrap.
	Environment *envtest.Environment
}

// NewScheme returns a scheme with client-go's built-in types and
// apiextensions/v1. Add a package's own types to it for Options.Scheme.
func NewScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(apiextensionsv1.AddToScheme(s))
	return s
}

// Start starts etcd and kube-apiserver, installs the CRDs, and returns once
// the API server serves them. It fails the test on any error, with the
// control plane's last output when it did not come up.
func Start(t testing.TB, opts Options) *Env {
	t.Helper()
	setControllerLogger()
	assets, err := AssetsDir()
	if err != nil {
		t.Fatalf("k8stest: no Kubernetes binaries for the test control plane: %v", err)
	}
	crds, err := crdPaths(RepoRoot(t), opts.CRDDirs, opts.AllowMissingCRDDirs, t.Logf)
	if err != nil {
		t.Fatalf("k8stest: %v", err)
	}
	scheme := opts.Scheme
	if scheme == nil {
		scheme = NewScheme()
	}
	dir := t.TempDir() // made before the stop below is registered, so removed after it

	out := &tailBuffer{max: 64 << 10}
	te := &envtest.Environment{
		Scheme:                scheme,
		CRDs:                  opts.CRDs,
		CRDDirectoryPaths:     crds,
		ErrorIfCRDPathMissing: true,
		BinaryAssetsDirectory: assets,
	}
	te.ControlPlane.GetAPIServer().Path = filepath.Join(assets, "kube-apiserver")
	te.ControlPlane.Etcd = &envtest.Etcd{Path: filepath.Join(assets, "etcd")}
	te.ControlPlane.KubectlPath = filepath.Join(assets, "kubectl")
	if os.Getenv("KUBEBUILDER_ATTACH_CONTROL_PLANE_OUTPUT") != "true" {
		te.ControlPlane.APIServer.Out, te.ControlPlane.APIServer.Err = out, out
		te.ControlPlane.Etcd.Out, te.ControlPlane.Etcd.Err = out, out
	}

	start := time.Now()
	cfg, err := te.Start()
	if err != nil {
		stopErr := te.Stop()
		t.Fatalf("k8stest: start etcd and kube-apiserver from %s: %v (stop: %v)\nlast control plane output:\n%s",
			assets, err, stopErr, out.String())
	}
	t.Cleanup(func() {
		begin := time.Now()
		if err := te.Stop(); err != nil {
			t.Errorf("k8stest: stop the control plane: %v", err)
		}
		t.Logf("k8stest: control plane stopped in %v", time.Since(begin).Round(time.Millisecond))
	})
	t.Logf("k8stest: etcd and kube-apiserver %s up at %s in %v (%d CRDs installed)",
		KubeVersion, cfg.Host, time.Since(start).Round(time.Millisecond), len(te.CRDs))

	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatalf("k8stest: client for %s: %v", cfg.Host, err)
	}
	env := &Env{Config: cfg, Client: c, Scheme: scheme, AssetsDir: assets, Environment: te}
	env.Kubeconfig, _ = env.addUser(t, dir, "rover-test-admin", "system:masters")
	return env
}

// AddUser provisions a user with the given groups (none for a user that RBAC
// must grant everything to) and returns its REST config and the path of a
// kubeconfig file for it.
func (e *Env) AddUser(t testing.TB, name string, groups ...string) (kubeconfig string, cfg *rest.Config) {
	t.Helper()
	return e.addUser(t, t.TempDir(), name, groups...)
}

func (e *Env) addUser(t testing.TB, dir, name string, groups ...string) (string, *rest.Config) {
	t.Helper()
	u, err := e.Environment.AddUser(envtest.User{Name: name, Groups: groups}, rest.CopyConfig(e.Config))
	if err != nil {
		t.Fatalf("k8stest: add user %q: %v", name, err)
	}
	kc, err := u.KubeConfig()
	if err != nil {
		t.Fatalf("k8stest: kubeconfig for user %q: %v", name, err)
	}
	path := filepath.Join(dir, name+".kubeconfig")
	if err := os.WriteFile(path, kc, 0o600); err != nil {
		t.Fatalf("k8stest: write kubeconfig for user %q: %v", name, err)
	}
	return path, u.Config()
}

// Bin returns the path of a binary from the testbin folder, such as kubectl,
// kube-scheduler, kube-controller-manager or kwok. It fails the test, saying
// how to build it, when the folder lacks it.
func (e *Env) Bin(t testing.TB, name string) string {
	t.Helper()
	if err := checkBinaries(e.AssetsDir, name); err != nil {
		t.Fatalf("k8stest: %s: %v (TESTBIN_EXTRA names the binaries beyond kube-apiserver and etcd)", e.AssetsDir, err)
	}
	return filepath.Join(e.AssetsDir, name)
}

var ctrlLoggerOnce sync.Once

// setControllerLogger gives controller-runtime's global logger (used by
// envtest and by clients made outside a manager) a slog bridge that shows
// warnings and errors only. Unset, controller-runtime prints
// "log.SetLogger(...) was never called" and a goroutine dump into the
// test's output. It runs once per test binary; a test that wants another
// logger sets it after Start.
func setControllerLogger() {
	ctrlLoggerOnce.Do(func() {
		h := slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})
		ctrllog.SetLogger(logr.FromSlogHandler(h))
	})
}

// tailBuffer keeps the last max bytes written to it. The control plane writes
// to it from envtest's goroutines; the test reads it when start fails.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf bytes.Buffer
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.Write(p)
	if over := b.buf.Len() - b.max; over > 0 {
		b.buf.Next(over)
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.buf.Len() == 0 {
		return "(none)"
	}
	return fmt.Sprintf("...%s", b.buf.String())
}
