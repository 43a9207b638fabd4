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

// FileVersion keeps a parameter-server job's State in two files: the
// version at Path (a decimal number and a newline) and the cluster at
// ClusterPath (TF_CONFIG's "cluster" object), each replaced atomically
// (written aside, then renamed), the cluster first, so that a reader never
// sees a torn file, nor a version whose cluster is not there yet. The
// local platform's processes read the files themselves.
type FileVersion struct {
	Path, ClusterPath string
}

var _ Version = FileVersion{}

// Load reads the files; a missing file is version 0, or no cluster.
func (f FileVersion) Load(context.Context) (State, error) {
	var st State
	b, err := os.ReadFile(f.Path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return State{}, fmt.Errorf("read the cluster version: %w", err)
	default:
		v, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || v < 0 {
			return State{}, fmt.Errorf("read the cluster version: %s holds %q, not a version: remove it to start from 0", f.Path, b)
		}
		st.Version = v
	}
	if f.ClusterPath != "" {
		b, err := os.ReadFile(f.ClusterPath)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return State{}, fmt.Errorf("read the cluster: %w", err)
		default:
			st.Cluster = strings.TrimSpace(string(b))
		}
	}
	return st, nil
}

// Store replaces the cluster file (when s has a cluster), then the version
// file.
func (f FileVersion) Store(_ context.Context, s State) error {
	if f.ClusterPath != "" && s.Cluster != "" {
		if err := replace(f.ClusterPath, s.Cluster+"\n"); err != nil {
			return fmt.Errorf("write the cluster: %w", err)
		}
	}
	if err := replace(f.Path, strconv.Itoa(s.Version)+"\n"); err != nil {
		return fmt.Errorf("write the cluster version: %w", err)
	}
	return nil
}

// replace writes text to path atomically.
func replace(path, text string) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(text), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
