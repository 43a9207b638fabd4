// Package python embeds Rover's Python package (python/rover) in the rover
// binary, so that `rover run` can put it on its workers' PYTHONPATH and a
// training script can `import rover` with nothing installed. It owns no
// logic; the package's code is the .py files beside it.
package python

import (
	"embed"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

//go:embed rover/*.py
var files embed.FS

// Extract writes the package to dir/rover (created 0700) and returns dir, the
// directory to put on PYTHONPATH.
func Extract(dir string) (string, error) {
	err := fs.WalkDir(files, "rover", func(path string, d fs.DirEntry, err error) error {
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
		return "", fmt.Errorf("extract the rover Python package: %w", err)
	}
	return dir, nil
}
