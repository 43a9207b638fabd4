package agent

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDependencies keeps the agent's edge to the master the protocol: the
// agent reaches masters through package client only and links none of the
// master's server side. The embedded master of `rover run --standalone` is
// package standalone's, which programs wire in through Options.StartMaster.
// (Tests may run real masters: only the package itself is checked.)
func TestDependencies(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("no go command on PATH to list the dependencies with: %v", err)
	}
	out, err := exec.Command(gobin, "list", "-deps", "-f", "{{.ImportPath}}", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	const forbidden = "github.com/roverml/rover/internal/master"
	deps := strings.Fields(string(out))
	if len(deps) == 0 {
		t.Fatal("go list listed no dependencies")
	}
	for _, pkg := range deps {
		if pkg == forbidden {
			t.Errorf("package agent depends on %s: reach the master through package client", pkg)
		}
	}
}
