package deptest

import "testing"

// TestPackageComments checks that every package of the module, programs
// and test-only packages included, has a package comment in one of its
// files.
func TestPackageComments(t *testing.T) {
	pkgs := Load(t)
	for _, path := range Sorted(pkgs) {
		if !HasPackageComment(t, pkgs[path]) {
			t.Errorf("package %s has no package comment: write one, saying what it owns, in one of its files", path)
		}
	}
}
