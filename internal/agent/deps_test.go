package agent

import (
	"testing"

	"github.com/roverml/rover/internal/testsrc"
)

// TestDependencies keeps the agent's edge to the master the protocol: the
// agent reaches masters through package client only and links none of the
// master's server side. The embedded master of `rover run --standalone` is
// package standalone's, which programs wire in through Options.StartMaster.
// (Tests may run real masters: only the package itself is checked.)
func TestDependencies(t *testing.T) {
	deps := testsrc.Deps(t, false)
	const forbidden = "github.com/roverml/rover/internal/master"
	for _, pkg := range deps {
		if pkg == forbidden {
			t.Errorf("package agent depends on %s: reach the master through package client", pkg)
		}
	}
}
