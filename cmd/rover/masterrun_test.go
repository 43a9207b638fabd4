package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/roverml/rover/internal/testbuf"
)

// TestMasterOutcome runs `rover master` and one `rover run` agent in this
// process: the master exits as its job ended, 0 saying so on stdout when
// the worker succeeded, 1 with the job's reason when it failed
// (docs/exit-codes.md).
func TestMasterOutcome(t *testing.T) {
	t.Setenv("ROVER_TOKEN", "")
	for _, tt := range []struct {
		worker     string
		code       int
		stdout     string // all of it
		stderrSays string
	}{
		{"true", 0, "rover master: job succeeded\n", ""},
		{"false", 1, "", "rover: job failed: "},
	} {
		t.Run(tt.worker, func(t *testing.T) {
			dir := t.TempDir()
			tokenFile, addrFile := filepath.Join(dir, "job.token"), filepath.Join(dir, "master.addr")
			mstdout, mstderr := &testbuf.Buffer{}, &testbuf.Buffer{}
			exited := make(chan int, 1)
			go func() {
				exited <- run([]string{"rover", "master", "--listen", "127.0.0.1:0", "--token-file", tokenFile, "--addr-file", addrFile,
					"--nnodes", "1", "--max-restarts", "0", "--linger", "0"}, mstdout, mstderr)
			}()
			if err := mstderr.WaitFor(deadline, nil, "master serving"); err != nil {
				t.Fatal(err)
			}
			addr, err := os.ReadFile(addrFile)
			if err != nil {
				t.Fatal(err)
			}
			var stdout, stderr bytes.Buffer
			agentCode := run([]string{"rover", "run", "--nnodes", "1", "--rdzv-endpoint", strings.TrimSpace(string(addr)),
				"--token-file", tokenFile, "--node-id", "n", "--max-restarts", "0", "--no-python", tt.worker}, &stdout, &stderr)
			if agentCode != tt.code {
				t.Errorf("the agent exited %d, want %d; stderr:\n%s", agentCode, tt.code, stderr.String())
			}
			select {
			case code := <-exited:
				if code != tt.code {
					t.Errorf("rover master exited %d, want %d; stderr:\n%s", code, tt.code, mstderr)
				}
			case <-time.After(deadline): // only turns a hang into a failure
				t.Fatalf("rover master did not exit after its job ended; stderr:\n%s", mstderr)
			}
			if got := mstdout.String(); got != tt.stdout {
				t.Errorf("rover master's stdout is %q, want %q", got, tt.stdout)
			}
			if !strings.Contains(mstderr.String(), tt.stderrSays) {
				t.Errorf("rover master's stderr lacks %q:\n%s", tt.stderrSays, mstderr)
			}
		})
	}
}
