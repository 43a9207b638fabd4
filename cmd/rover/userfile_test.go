package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/roverml/rover/internal/jobspec"
	"github.com/roverml/rover/internal/userfile"
)

// TestUserFilesAreBounded names /dev/zero, a file without end, for every
// file a command reads (the token, the CA bundle, the master's certificate
// and key, a job spec): each command refuses it with exit 2, naming the flag's
// file and the limit, and its process never holds more than a small multiple
// of the limit (before, `rover status` grew past 20 GB).
func TestUserFilesAreBounded(t *testing.T) {
	const z = "/dev/zero"
	rover, _ := binaries(t)
	tests := []struct {
		name string
		args []string
		env  []string
	}{
		{"status --token-file", []string{"status", "--master", "127.0.0.1:1", "--token-file", z}, nil},
		{"status --tls-ca", []string{"status", "--master", "127.0.0.1:1", "--tls-ca", z}, []string{"ROVER_TOKEN=0123456789abcdef0123"}},
		{"run --token-file", []string{"run", "--nnodes", "2", "--rdzv-endpoint", "127.0.0.1:1", "--token-file", z, "--no-python", "true"}, nil},
		{"run --tls-ca", []string{"run", "--nnodes", "2", "--rdzv-endpoint", "127.0.0.1:1", "--tls-ca", z, "--no-python", "true"},
			[]string{"ROVER_TOKEN=0123456789abcdef0123"}},
		{"master --token-file", []string{"master", "--listen", "127.0.0.1:0", "--token-file", z}, nil},
		{"master --tls-cert", []string{"master", "--listen", "127.0.0.1:0", "--token-file", "job.token", "--tls-cert", z, "--tls-key", z}, nil},
		{"submit", []string{"submit", "job.yaml"}, nil}, // a link to /dev/zero
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command(rover, tt.args...)
			cmd.Dir = t.TempDir()
			if err := os.Symlink(z, filepath.Join(cmd.Dir, "job.yaml")); err != nil {
				t.Fatal(err)
			}
			cmd.Env = append(os.Environ(), "ROVER_TOKEN=", "ROVER_TOKEN_FILE=", "ROVER_TLS_CA=", "ROVER_MASTER_ADDR=")
			cmd.Env = append(cmd.Env, tt.env...)
			var stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stderr, &stderr
			err := cmd.Run()
			if code := cmd.ProcessState.ExitCode(); code != 2 {
				t.Fatalf("exit %d (%v), want 2 (usage); output:\n%s", code, err, stderr.String())
			}
			limit := fmt.Sprintf("%d bytes", userfile.MaxSize)
			named := z
			if tt.args[0] == "submit" {
				// A job spec has a bound of its own, below every file's.
				named, limit = "job.yaml", fmt.Sprintf("%d bytes", jobspec.MaxDocumentBytes)
			}
			if out := stderr.String(); !strings.Contains(out, named) || !strings.Contains(out, limit) {
				t.Errorf("output does not name %s and the limit (%s):\n%s", named, limit, out)
			}
			ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage)
			if !ok {
				t.Fatal("no resource usage of the process")
			}
			// Maxrss is in KiB: the whole process, Go runtime included (a
			// race-detector build starts near 155 MiB). An unbounded read
			// grew past 20 GB; 32 times the bound tells the two apart.
			if rss := ru.Maxrss << 10; rss > 32*userfile.MaxSize {
				t.Errorf("the process held %d MiB at most, want under %d MiB", rss>>20, 32*userfile.MaxSize>>20)
			}
		})
	}
}
