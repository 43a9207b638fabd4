package testsrc

import (
	"os/exec"
	"strings"
	"testing"
)

// Deps lists the import paths the package in the working directory (a test's
// own package) depends on, and its tests' dependencies too when withTests is
// set, for tests that forbid a dependency. It fails the test, never skips
// it, when there is no go command to ask.
func Deps(t testing.TB, withTests bool) []string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("no go command on PATH to list the dependencies with: %v", err)
	}
	args := []string{"list", "-deps", "-f", "{{.ImportPath}}", "."}
	if withTests {
		args = append(args[:1], append([]string{"-test"}, args[1:]...)...)
	}
	out, err := exec.Command(gobin, args...).Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) == 0 {
		t.Fatal("go list listed no dependencies")
	}
	return deps
}
