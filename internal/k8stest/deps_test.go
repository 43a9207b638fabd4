package k8stest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestRootModuleStaysLight checks that k8s.io/kubernetes stays in testbin/,
// and that no command links the test control plane.
func TestRootModuleStaysLight(t *testing.T) {
	root := RepoRoot(t)
	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(gomod)) {
		if f := strings.Fields(line); len(f) > 0 && (f[0] == "k8s.io/kubernetes" || len(f) > 1 && f[1] == "k8s.io/kubernetes") {
			t.Errorf("go.mod requires k8s.io/kubernetes (%q); it belongs in testbin/go.mod only", strings.TrimSpace(line))
		}
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("no go command on PATH to list the dependencies with: %v", err)
	}
	cmd := exec.Command(gobin, "list", "-deps", "-f", "{{.ImportPath}}", "./cmd/...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps ./cmd/...: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if pkg == "github.com/roverml/rover/internal/k8stest" || strings.HasPrefix(pkg, "sigs.k8s.io/controller-runtime/pkg/envtest") {
			t.Errorf("a command depends on %s, which is test support only", pkg)
		}
	}
}
