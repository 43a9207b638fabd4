// Package testsrc ties a test's cached result to the repository's sources.
//
// Tests that build and run other programs of the repository (the rover
// binary, test workers, Python scripts) do not import what they exercise,
// so `go test` would reuse a cached pass after those sources changed. A file
// that a running test stats is part of the cache key (a stat before the
// tests start, in TestMain, is not recorded): such tests call Track.
package testsrc

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
)

var once sync.Once

// Track stats every source file under the module root that contains the
// working directory, once per test process. Call it from a test (or a
// helper every test uses), not from TestMain.
func Track() {
	once.Do(func() {
		if root, ok := moduleRoot(); ok {
			statSources(root)
		}
	})
}

func moduleRoot() (string, bool) {
	dir, err := os.Getwd()
	if err != nil {
		return "", false
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, true
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", false
		}
		dir = parent
	}
}

func statSources(root string) {
	_ = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "bin") {
				return filepath.SkipDir
			}
			return nil
		}
		switch filepath.Ext(path) {
		case ".go", ".py", ".proto", ".sh", ".mod", ".sum":
			_, _ = os.Stat(path)
		}
		return nil
	})
}
