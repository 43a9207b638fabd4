// Package python embeds Rover's Python packages in the rover binary, so
// that `rover run` can put them on its workers' PYTHONPATH and a training
// script can `import rover` (python/rover), or import DLRover's documented
// API (python/dlrover, a layer over rover), with nothing installed. It owns
// no logic; the packages' code is the .py files beside it.
package python

import (
	"embed"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Explicit patterns, not directories: a directory pattern would leave out
// the __init__.py files (names starting with _), and must not take
// __pycache__ along.
//
//go:embed rover/*.py
//go:embed dlrover/*.py dlrover/trainer/*.py dlrover/trainer/torch/*.py
//go:embed dlrover/trainer/torch/elastic/*.py dlrover/trainer/torch/flash_checkpoint/*.py
//go:embed dlrover/python/*.py dlrover/python/common/*.py
var files embed.FS

// packages are the top-level packages Extract writes.
var packages = []string{"rover", "dlrover"}

// Extract writes the packages to dir/rover and dir/dlrover (created 0700),
// and the workers' startup hook to dir/sitecustomize.py, and returns dir,
// the directory to put on PYTHONPATH.
func Extract(dir string) (string, error) {
	for _, pkg := range packages {
		if err := extract(dir, pkg); err != nil {
			return "", err
		}
	}
	// The workers' startup hook (rover/_sitecustomize.py has why).
	hook, err := files.ReadFile("rover/_sitecustomize.py")
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, "sitecustomize.py"), hook, 0o600)
	}
	if err != nil {
		return "", fmt.Errorf("extract the workers' startup hook: %w", err)
	}
	return dir, nil
}

func extract(dir, pkg string) error {
	err := fs.WalkDir(files, pkg, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		target := filepath.Join(dir, path)
		if d.IsDir() {
			return os.MkdirAll(target, 0o700)
		}
		b, err := files.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, 0o600)
	})
	if err != nil {
		return fmt.Errorf("extract the %s Python package: %w", pkg, err)
	}
	return nil
}
