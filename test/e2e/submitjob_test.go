package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/roverml/rover/internal/agent/ckptsaver"
	"github.com/roverml/rover/internal/testsrc"

	"github.com/roverml/rover/internal/testbuf"
)

// submitted is a running `rover submit`: its stdout (the nodes' output)
// and stderr (progress, the master's log, the summary) are kept apart.
type submitted struct {
	job    string // the job's name, and so the prefix of its node ids
	dir    string // --job-dir
	cmd    *exec.Cmd
	stdout *testbuf.Buffer
	stderr *testbuf.Buffer
	done   chan struct{}
}

// uniqueJob returns a job name no other run on this machine uses, so that
// the job's processes and shared memory can be told from any other's.
func uniqueJob(prefix string) string {
	return fmt.Sprintf("%s-%d-%d", prefix, os.Getpid(), time.Now().UnixNano()%1_000_000)
}

// submit starts `rover submit --job-dir DIR args...` for job in a fresh
// directory. args name the job (--rdzv-id or a job file).
func submit(t testing.TB, job string, args ...string) *submitted {
	t.Helper()
	testsrc.Track()
	s := &submitted{job: job, dir: filepath.Join(t.TempDir(), "job"), stdout: &testbuf.Buffer{}, stderr: &testbuf.Buffer{}, done: make(chan struct{})}
	s.cmd = exec.Command(roverBin, append([]string{"submit", "--job-dir", s.dir}, args...)...)
	s.cmd.Dir = t.TempDir()
	s.cmd.Env = append(os.Environ(), "PYTHON_EXEC="+pythonExec, "PYTHONUNBUFFERED=1")
	s.cmd.Stdout, s.cmd.Stderr = s.stdout, s.stderr
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("start rover submit: %v", err)
	}
	go func() {
		_ = s.cmd.Wait()
		close(s.done)
	}()
	t.Cleanup(func() {
		// Stop it as Ctrl-C would, so that it cleans up; SIGKILL if that
		// takes too long (its agents die with it, their parent-death
		// signal) and remove what they left in shared memory.
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.done:
		case <-time.After(time.Minute):
			_ = s.cmd.Process.Kill()
			<-s.done
		}
		for _, d := range jobArenas(job) {
			_ = os.RemoveAll(d)
		}
		if t.Failed() {
			t.Logf("---- rover submit's stderr ----\n%s", s.stderr)
			t.Logf("---- rover submit's stdout (last 60 lines) ----\n%s", lastLines(s.stdout.String(), 60))
		}
	})
	return s
}

// wait waits for rover submit to exit and returns its exit code (128+N
// when it died of signal N).
func (s *submitted) wait(t testing.TB, timeout time.Duration) int {
	t.Helper()
	select {
	case <-s.done:
	case <-time.After(timeout):
		t.Fatalf("rover submit did not exit within %s", timeout)
	}
	ws := s.cmd.ProcessState.Sys().(syscall.WaitStatus)
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}

// nodeIDs lists the node log directories the job created (one per node
// the platform started).
func (s *submitted) nodeIDs(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(s.dir, "nodes"))
	if err != nil {
		t.Fatalf("list the job's node logs: %v", err)
	}
	var ids []string
	for _, e := range entries {
		ids = append(ids, e.Name())
	}
	return ids
}

// node is the node id of rank's relaunch-th node.
func (s *submitted) node(rank, relaunch int) string {
	return fmt.Sprintf("%s-worker-%d-%d", s.job, rank, relaunch)
}

// summaryRow matches the summary's row of a node: GROUP RANK NODE STATE
// RELAUNCHES.
func (s *submitted) summaryRow(rank, relaunch int, state, relaunches string) *regexp.Regexp {
	return regexp.MustCompile(fmt.Sprintf(`(?m)^worker\s+%d\s+%s\s+%s\s+%s\s`,
		rank, regexp.QuoteMeta(s.node(rank, relaunch)), state, regexp.QuoteMeta(relaunches)))
}

var committedRE = regexp.MustCompile(`msg="committed checkpoint step".* step=(\d+)`)

// committed is the newest checkpoint step the master logged as committed
// (0: none yet).
func (s *submitted) committed() int {
	n := 0
	for _, m := range committedRE.FindAllStringSubmatch(s.stderr.String(), -1) {
		v, _ := strconv.Atoi(m[1])
		n = max(n, v)
	}
	return n
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// procEnv returns the environment and argv of a live (non-zombie) process.
func procEnv(pid int) (env, argv []string, ok bool) {
	if zombie(pid) {
		return nil, nil, false
	}
	e, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		return nil, nil, false
	}
	a, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return nil, nil, false
	}
	split := func(b []byte) []string { return strings.Split(strings.TrimRight(string(b), "\x00"), "\x00") }
	return split(e), split(a), true
}

// pidsWithEnv returns the live processes whose environment holds kv
// (agents and, inheriting it, their workers).
func pidsWithEnv(kv string) []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if env, _, ok := procEnv(pid); ok && slices.Contains(env, kv) {
			out = append(out, pid)
		}
	}
	return out
}

// jobProcesses are the live processes of a submitted job: the local
// platform gives every agent ELASTIC_JOB_NAME, and workers inherit it.
func jobProcesses(job string) []int { return pidsWithEnv("ELASTIC_JOB_NAME=" + job) }

// agentPid returns the pid of node id's agent (`rover run`), not of its
// workers, which inherit ROVER_NODE_ID; 0 if it is not running.
func agentPid(id string) int {
	for _, pid := range pidsWithEnv("ROVER_NODE_ID=" + id) {
		if _, argv, ok := procEnv(pid); ok && len(argv) > 1 && filepath.Base(argv[0]) == "rover" && argv[1] == "run" {
			return pid
		}
	}
	return 0
}

// describe is ps-like output of pids, for failure messages.
func describe(pids []int) string {
	var b bytes.Buffer
	for _, pid := range pids {
		if _, argv, ok := procEnv(pid); ok {
			fmt.Fprintf(&b, "%d %s\n", pid, strings.Join(argv, " "))
		}
	}
	return b.String()
}

// jobArenas returns the arena directories in /dev/shm that agents of the
// job's nodes own (their owner file names the node).
func jobArenas(job string) []string { return ckptsaver.ArenaDirsOfNodes(job + "-worker-") }
