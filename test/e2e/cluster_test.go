// Package e2e runs Rover end to end: real `rover master` and `rover run`
// processes on this machine, real PyTorch workers (Debian's python3-torch,
// DDP with gloo on CPU), real faults. The scenarios are written against the
// small cluster type below, which runs nodes as local processes.
package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/roverml/rover/internal/testsrc"

	"github.com/roverml/rover/internal/testbuf"
)

var (
	roverBin   string
	sdkWorker  string
	pythonExec string
	repoRoot   string
)

func TestMain(m *testing.M) {
	os.Exit(setup(m))
}

func setup(m *testing.M) int {
	wd, err := os.Getwd()
	if err != nil {
		panic(err)
	}
	repoRoot = filepath.Clean(filepath.Join(wd, "..", ".."))
	dir, err := os.MkdirTemp("", "rover-e2e-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	roverBin = filepath.Join(dir, "rover")
	if out, err := exec.Command("go", "build", "-o", roverBin, "github.com/roverml/rover/cmd/rover").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: build rover: %v\n%s", err, out)
		return 1
	}
	sdkWorker = filepath.Join(dir, "sdkworker")
	if out, err := exec.Command("go", "build", "-o", sdkWorker, "github.com/roverml/rover/test/sdkworker").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: build sdkworker: %v\n%s", err, out)
		return 1
	}
	out, err := exec.Command(filepath.Join(repoRoot, "scripts", "find-python")).Output()
	if err != nil {
		// Fail loudly: these tests prove capabilities and must not be skipped.
		fmt.Fprintln(os.Stderr, "e2e: FAIL: no Python that can import torch; run `scripts/find-python --install` (apt-get install python3-torch)")
		return 1
	}
	pythonExec = strings.TrimSpace(string(out))
	return m.Run()
}

// cluster runs a job's master and agents as local processes.
type cluster struct {
	t         *testing.T
	dir       string
	addr      string
	tokenFile string
	job       string
	master    *process
	// masterArgs are the master's flags but --listen, for restarts.
	masterArgs []string
	// env is added to the environment of the processes started next.
	env []string
}

// process is a running rover process with its output in a file.
type process struct {
	name string
	cmd  *exec.Cmd
	out  *testbuf.Buffer
	done chan struct{}
	err  error
}

func newCluster(t *testing.T, job string, masterArgs ...string) *cluster {
	t.Helper()
	return newClusterAt(t, job, "127.0.0.1:0", masterArgs...)
}

// newClusterAt is newCluster with the master listening on listen.
func newClusterAt(t *testing.T, job, listen string, masterArgs ...string) *cluster {
	t.Helper()
	c := &cluster{t: t, dir: t.TempDir(), job: job}
	c.tokenFile = filepath.Join(c.dir, "job.token")
	addrFile := filepath.Join(c.dir, "master.addr")
	c.masterArgs = append([]string{"--job", job, "--token-file", c.tokenFile,
		"--addr-file", addrFile, "--linger", "3s"}, masterArgs...)
	c.master = c.start("master", append([]string{"master", "--listen", listen}, c.masterArgs...)...)
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(addrFile); err == nil && len(b) > 0 {
			c.addr = strings.TrimSpace(string(b))
			return c
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("master did not start:\n%s", c.master.out)
	return nil
}

func (c *cluster) start(name string, args ...string) *process {
	c.t.Helper()
	return c.startCmd(name, roverBin, args...)
}

// startCmd starts prog (which runs rover itself, as in `unshare ... rover
// run`) in the cluster's directory, with start's environment.
func (c *cluster) startCmd(name, prog string, args ...string) *process {
	c.t.Helper()
	testsrc.Track()
	p := &process{name: name, out: &testbuf.Buffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(prog, args...)
	p.cmd.Dir = c.dir
	p.cmd.Env = append(append(os.Environ(), "PYTHON_EXEC="+pythonExec, "PYTHONUNBUFFERED=1"), c.env...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		c.t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	c.t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
		if c.t.Failed() {
			c.t.Logf("---- output of %s ----\n%s", name, p.out)
		}
	})
	return p
}

// restartMaster starts the master again on the same address with the same
// flags (and so the same state dir, if it has one).
func (c *cluster) restartMaster(name string) {
	c.t.Helper()
	c.master = c.start(name, append([]string{"master", "--listen", c.addr}, c.masterArgs...)...)
}

// agent starts a node agent that joins the cluster's master.
func (c *cluster) agent(name string, args ...string) *process {
	c.t.Helper()
	base := []string{"run", "--rdzv-endpoint", c.addr, "--token-file", c.tokenFile, "--rdzv-id", c.job,
		"--node-id", name, "--heartbeat-interval", "1s", "--stop-grace-period", "5s"}
	return c.start(name, append(base, args...)...)
}

// wait waits for the process to exit and returns its exit code.
func (p *process) wait(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		t.Fatalf("%s did not exit within %s:\n%s", p.name, timeout, p.out)
	}
	return p.cmd.ProcessState.ExitCode()
}

// exited reports whether the process has exited.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *process) kill(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("kill %s: %v", p.name, err)
	}
	<-p.done
}

// waitFor polls cond until it holds; past timeout (a deadline that only
// turns a hang into a failure) the test fails, and the cluster's processes'
// output is logged.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitExists waits until path exists.
func waitExists(t *testing.T, path string, timeout time.Duration) {
	t.Helper()
	waitFor(t, timeout, path+" to appear", func() bool {
		_, err := os.Stat(path)
		return err == nil
	})
}
