package privdir

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

func TestPrivateDirRemovesDeadAgentsDirs(t *testing.T) {
	base := t.TempDir()
	// A pid that surely ran and exited: a finished child's.
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	dead := filepath.Join(base, fmt.Sprintf("rover-arenas-%d-123", cmd.Process.Pid))
	alive := filepath.Join(base, fmt.Sprintf("rover-arenas-%d-456", os.Getppid()))
	other := filepath.Join(base, "unrelated-1-2")
	for _, d := range []string{dead, alive, other} {
		if err := os.MkdirAll(filepath.Join(d, "x"), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	dir, err := Create(base, "rover-arenas-")
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("new dir %s: %v, %v; want mode 0700", dir, fi, err)
	}
	if _, err := os.Stat(dead); !os.IsNotExist(err) {
		t.Errorf("the dead agent's directory is still there: %v", err)
	}
	for _, d := range []string{alive, other} {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("%s was removed: %v", d, err)
		}
	}
}
