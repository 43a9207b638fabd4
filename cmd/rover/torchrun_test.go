package main

// Tests of `rover run` as a process, against torchrun's output and error
// contract: console bytes, the launcher's error file, stop signals.

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/roverml/rover/internal/testsrc"

	"github.com/roverml/rover/internal/testbuf"
)

// deadline bounds every wait for a rover process; generous, since nothing
// waits for it unless something is broken.
const deadline = 2 * time.Minute

var (
	buildOnce          sync.Once
	binDir             string
	roverBin, fakeWork string
	buildErr           error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// binaries builds the rover binary and the fake worker once per test run.
func binaries(t *testing.T) (rover, fakeworker string) {
	t.Helper()
	testsrc.Track() // the binaries are built from other packages' sources
	buildOnce.Do(func() {
		if binDir, buildErr = os.MkdirTemp("", "rover-cmd-test-"); buildErr != nil {
			return
		}
		roverBin, fakeWork = filepath.Join(binDir, "rover"), filepath.Join(binDir, "fakeworker")
		for bin, pkg := range map[string]string{roverBin: "github.com/roverml/rover/cmd/rover", fakeWork: "github.com/roverml/rover/test/fakeworker"} {
			if out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput(); err != nil {
				buildErr = fmt.Errorf("build %s: %v\n%s", pkg, err, out)
				return
			}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return roverBin, fakeWork
}

// roverRun is a `rover run` process.
type roverRun struct {
	cmd            *exec.Cmd
	stdout, stderr *testbuf.Buffer
	done           chan struct{} // closed when the process has exited
	err            error         // Wait's, once done is closed
}

// startRun starts `rover run args...` with env added to this process's
// environment.
func startRun(t *testing.T, env []string, args ...string) *roverRun {
	t.Helper()
	rover, _ := binaries(t)
	r := &roverRun{stdout: &testbuf.Buffer{}, stderr: &testbuf.Buffer{}, done: make(chan struct{})}
	r.cmd = exec.Command(rover, append([]string{"run"}, args...)...)
	r.cmd.Env = append(os.Environ(), env...)
	r.cmd.Stdout, r.cmd.Stderr = r.stdout, r.stderr
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		r.err = r.cmd.Wait()
		close(r.done)
	}()
	t.Cleanup(func() {
		select {
		case <-r.done:
		default:
			_ = r.cmd.Process.Kill()
			<-r.done
		}
	})
	return r
}

// wait waits for the process to exit and returns its exit code.
func (r *roverRun) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-r.done:
	case <-time.After(deadline):
		t.Fatalf("rover run did not exit within %v; stderr:\n%s", deadline, r.stderr)
	}
	var ee *exec.ExitError
	if r.err != nil && !errors.As(r.err, &ee) {
		t.Fatalf("rover run: %v", r.err)
	}
	return r.cmd.ProcessState.ExitCode()
}

// TestConsoleOutput checks the console's bytes against torchrun's: workers
// write to it straight without --tee; teed streams are prefixed with
// "[<role><local rank>]:" or TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE.
func TestConsoleOutput(t *testing.T) {
	t.Parallel()
	_, fakeworker := binaries(t)
	worker := []string{"--no-python", fakeworker, "--say", "out a\nout b", "--say-stderr", "err a\nerr b\n"}
	const started = "fakeworker rank 0 restart 0 started\n"
	tests := []struct {
		name       string
		env, args  []string
		wantStdout string
		wantStderr string // a block the console's stderr holds (the agent logs there too)
		notStderr  string
	}{
		{name: "no tee: straight to the console, as written",
			wantStdout: started + "out a\nout b", wantStderr: "err a\nerr b\n", notStderr: "]:err"},
		{name: "tee 3: prefixed", args: []string{"--tee", "3"},
			wantStdout: "[default0]:" + started + "[default0]:out a\n[default0]:out b\n",
			wantStderr: "[default0]:err a\n[default0]:err b\n"},
		{name: "tee stdout only", args: []string{"--tee", "1", "--role", "trainer"},
			wantStdout: "[trainer0]:" + started + "[trainer0]:out a\n[trainer0]:out b\n",
			wantStderr: "err a\nerr b\n", notStderr: "]:err"},
		{name: "redirects: files only", args: []string{"--redirects", "3"}, notStderr: "err a"},
		{name: "prefix template", args: []string{"--tee", "3", "--role", "trainer"},
			env:        []string{"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE=${role_name}/${rank}/$local_rank $$ "},
			wantStdout: "trainer/0/0 $ " + started + "trainer/0/0 $ out a\ntrainer/0/0 $ out b\n",
			wantStderr: "trainer/0/0 $ err a\ntrainer/0/0 $ err b\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			args := append([]string{"--standalone", "--nproc-per-node", "1", "--rdzv-id", "console"}, tt.args...)
			r := startRun(t, tt.env, append(args, worker...)...)
			if code := r.wait(t); code != 0 {
				t.Fatalf("rover run exited %d; stderr:\n%s", code, r.stderr)
			}
			if diff := cmp.Diff(tt.wantStdout, r.stdout.String()); diff != "" {
				t.Errorf("console stdout (-want +got):\n%s", diff)
			}
			stderr := r.stderr.String()
			if !strings.Contains(stderr, tt.wantStderr) {
				t.Errorf("console stderr lacks %q:\n%s", tt.wantStderr, stderr)
			}
			if tt.notStderr != "" && strings.Contains(stderr, tt.notStderr) {
				t.Errorf("console stderr holds %q:\n%s", tt.notStderr, stderr)
			}
		})
	}
}

// readErrorFile decodes a launcher error file, keeping errorCode's type.
func readErrorFile(t *testing.T, path string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("the launcher's error file: %v", err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("the launcher's error file %q: %v", b, err)
	}
	return m
}

// TestLauncherErrorFile: a `rover run` that has TORCHELASTIC_ERROR_FILE set
// itself writes the root cause there when the job fails, as torchrun does:
// the failed worker's error file with message.errorCode, or the same
// layout for a worker without one.
func TestLauncherErrorFile(t *testing.T) {
	t.Parallel()
	_, fakeworker := binaries(t)
	tests := []struct {
		name        string
		extra       []string
		wantMessage string
		wantStack   string
	}{
		{"the worker's error file", []string{"--error-message", "ValueError: launcher"},
			"ValueError: launcher", "Traceback (most recent call last):\n  File \"fake.py\", line 1\nValueError: launcher"},
		{"no error file", nil,
			"To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html", "fakeworker rank 1 failing with exit code 3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "launcher-error.json")
			args := append([]string{"--standalone", "--nproc-per-node", "2", "--no-python", fakeworker,
				"--exit-code", "3", "--fail-rank", "1"}, tt.extra...)
			r := startRun(t, []string{"TORCHELASTIC_ERROR_FILE=" + path}, args...)
			if code := r.wait(t); code != 1 {
				t.Fatalf("rover run exited %d, want 1; stderr:\n%s", code, r.stderr)
			}
			got := readErrorFile(t, path)
			msg, _ := got["message"].(map[string]any)
			extra, _ := msg["extraInfo"].(map[string]any)
			if msg["message"] != tt.wantMessage || msg["errorCode"] != 3.0 || extra["py_callstack"] != tt.wantStack {
				t.Errorf("error file = %v; want message %q, errorCode 3, py_callstack %q", got, tt.wantMessage, tt.wantStack)
			}
			if ts, _ := extra["timestamp"].(string); ts == "" {
				t.Errorf("error file = %v; want a timestamp", got)
			}
		})
	}
}

// TestStopSignals: SIGHUP, SIGINT, SIGQUIT and SIGTERM stop `rover run`
// gracefully, as torchrun's agent: the signal is forwarded to every worker,
// the agent exits 128+N, and its error file (when it has one) records
// torchrun's SignalException.
func TestStopSignals(t *testing.T) {
	t.Parallel()
	_, fakeworker := binaries(t)
	for _, sig := range []syscall.Signal{syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			t.Parallel()
			sigDir, errFile := t.TempDir(), filepath.Join(t.TempDir(), "launcher-error.json")
			r := startRun(t, []string{"TORCHELASTIC_ERROR_FILE=" + errFile},
				"--standalone", "--nproc-per-node", "2", "--stop-grace-period", "60s",
				"--no-python", fakeworker, "--hang", "--signal-dir", sigDir)
			if err := r.stdout.WaitFor(deadline, nil, "fakeworker rank 0 restart 0 started\n", "fakeworker rank 1 restart 0 started\n"); err != nil {
				t.Fatal(err)
			}
			if err := r.cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			if code := r.wait(t); code != 128+int(sig) {
				t.Errorf("rover run exited %d, want %d; stderr:\n%s", code, 128+int(sig), r.stderr)
			}
			for _, rank := range []string{"0", "1"} {
				b, err := os.ReadFile(filepath.Join(sigDir, "signal-rank"+rank))
				if err != nil || string(b) != sig.String() {
					t.Errorf("rank %s received %q (%v), want %q forwarded", rank, b, err, sig.String())
				}
			}
			if want := "rover: stopped: received " + sig.String(); !strings.Contains(r.stderr.String(), want) {
				t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
			}
			msg, _ := readErrorFile(t, errFile)["message"].(map[string]any)
			want := fmt.Sprintf("SignalException: Process %d got signal: %d", r.cmd.Process.Pid, int(sig))
			if msg["message"] != want {
				t.Errorf("error file message %q, want %q", msg["message"], want)
			}
		})
	}
}
