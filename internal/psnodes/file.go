package psnodes

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
)

// FileVersion keeps the cluster version in a file: a decimal number and a
// newline, replaced atomically (written aside, then renamed), so that a
// reader never sees a torn number. The local platform's processes read
// the file itself.
type FileVersion struct {
	Path string
}

var _ Version = FileVersion{}

// Load reads the file; a missing file is version 0.
func (f FileVersion) Load(context.Context) (int, error) {
	b, err := os.ReadFile(f.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read the cluster version: %w", err)
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || v < 0 {
		return 0, fmt.Errorf("read the cluster version: %s holds %q, not a version: remove it to start from 0", f.Path, b)
	}
	return v, nil
}

// Store replaces the file with v.
func (f FileVersion) Store(_ context.Context, v int) error {
	tmp := f.Path + ".tmp"
	if err := os.WriteFile(tmp, []byte(strconv.Itoa(v)+"\n"), 0o600); err != nil {
		return fmt.Errorf("write the cluster version: %w", err)
	}
	if err := os.Rename(tmp, f.Path); err != nil {
		return fmt.Errorf("write the cluster version: %w", err)
	}
	return nil
}
