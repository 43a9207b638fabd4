package robustness

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/roverml/rover/internal/agent/ckptsaver"
	"github.com/roverml/rover/internal/proc"

	"github.com/roverml/rover/internal/testbuf"
)

// roverBin is the binary under test, built once by TestMain.
var roverBin string

func TestMain(m *testing.M) {
	os.Exit(setup(m))
}

func setup(m *testing.M) int {
	dir, err := os.MkdirTemp("", "rover-robustness-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "robustness:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	if roverBin = os.Getenv("ROVER_ROBUSTNESS_BIN"); roverBin != "" {
		return m.Run() // probe another build, such as an older release
	}
	roverBin = filepath.Join(dir, "rover")
	if out, err := exec.Command("go", "build", "-o", roverBin, "github.com/roverml/rover/cmd/rover").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "robustness: build rover: %v\n%s", err, out)
		return 1
	}
	return m.Run()
}

// probe is one row of the table: a rover command line and what it must
// do. After every probe, no process of it may be left running and its job
// may leave nothing in /dev/shm.
type probe struct {
	name string
	// args follow "rover"; in them and in files, {dir} is the probe's
	// directory, {job} its job name and {addr} the fixture's master.
	args  []string
	files map[string]string // written into {dir} first
	// master starts a fixture `rover master` on {dir}/state first.
	master bool
	// signal is sent once the output holds after ("": at once), and
	// once during, when set, has returned.
	signal syscall.Signal
	after  string
	// during runs once the output holds after, while the probe runs; tag
	// is the environment entry every process of the probe carries.
	during func(t *testing.T, tag string)
	code   int    // the exit code; 128+N for death by signal N
	says   string // a fragment of stdout and stderr
	// maxRSS bounds the process's peak memory, in MiB (0: defaultMaxRSS).
	maxRSS int64
	absent []string // files under {dir} that must not exist afterwards
}

// defaultMaxRSS is the memory bound of a probe that gives none, in MiB:
// rover itself, far from what unbounded input would take.
const defaultMaxRSS = 256

// deadline bounds each wait of a probe; it turns a hang into a failure
// and asserts nothing about speed.
const deadline = 90 * time.Second

func runProbes(t *testing.T, probes []probe) {
	for _, p := range probes {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			p.run(t)
		})
	}
}

func (p probe) run(t *testing.T) {
	dir := t.TempDir()
	job := uniqueJob()
	tag := "ROVER_PROBE=" + job
	vars := strings.NewReplacer("{dir}", dir, "{job}", job)
	for name, content := range p.files {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(vars.Replace(content)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	addr := ""
	if p.master {
		addr = startMaster(t, dir)
	}
	vars = strings.NewReplacer("{dir}", dir, "{job}", job, "{addr}", addr)
	args := make([]string, len(p.args))
	for i, a := range p.args {
		args[i] = vars.Replace(a)
	}
	out := &testbuf.Buffer{}
	cmd := exec.Command(roverBin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), tag)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start rover %q: %v", args, err)
	}
	t.Cleanup(func() {
		proc.KillTagged(tag) // a failed probe's leftovers
		for _, d := range jobArenas(job) {
			os.RemoveAll(d)
		}
	})
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	if p.signal != 0 || p.during != nil {
		if out.WaitFor(deadline, done, p.after) != nil {
			<-done
			t.Fatalf("rover %q exited before its output held %q:\n%s", args, p.after, out)
		}
	}
	if p.during != nil {
		p.during(t, tag)
	}
	if p.signal != 0 {
		_ = cmd.Process.Signal(p.signal)
	}
	select {
	case <-done:
	case <-time.After(deadline):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("rover %q still running after %v:\n%s", args, deadline, out)
	}
	ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
	code := ws.ExitStatus()
	if ws.Signaled() {
		code = 128 + int(ws.Signal())
	}
	if code != p.code {
		t.Errorf("exit code %d, want %d", code, p.code)
	}
	if !strings.Contains(out.String(), p.says) {
		t.Errorf("the output lacks %q", p.says)
	}
	bound := p.maxRSS
	if bound == 0 {
		bound = defaultMaxRSS
	}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok && ru.Maxrss > bound<<10 {
		t.Errorf("peak memory %d MiB, want at most %d MiB", ru.Maxrss>>10, bound)
	}
	if left := waitNone(func() []string { return pidList(proc.TaggedPids([]byte(tag))) }); len(left) > 0 {
		t.Errorf("processes of the probe still run after %v: %s", deadline, describe(left))
	}
	if left := waitNone(func() []string { return jobArenas(job) }); len(left) > 0 {
		t.Errorf("the job's shared memory is still in /dev/shm after %v: %v", deadline, left)
	}
	for _, f := range p.absent {
		if _, err := os.Stat(filepath.Join(dir, f)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s exists (%v): the probe ran what it must not", f, err)
		}
	}
	if t.Failed() {
		t.Logf("rover %q said:\n%s", args, lastLines(out.String(), 80))
	}
}

// startMaster runs a fixture master on dir/state with a token in
// dir/token, and returns its address once it serves.
func startMaster(t *testing.T, dir string) string {
	t.Helper()
	addrFile := filepath.Join(dir, "master.addr")
	cmd := exec.Command(roverBin, "master", "--listen", "127.0.0.1:0", "--addr-file", addrFile,
		"--token-file", filepath.Join(dir, "token"), "--state-dir", filepath.Join(dir, "state"))
	cmd.Dir = dir
	log := &testbuf.Buffer{}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(deadline):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	stop := time.Now().Add(deadline)
	for {
		if b, err := os.ReadFile(addrFile); err == nil && len(bytes.TrimSpace(b)) > 0 {
			return strings.TrimSpace(string(b))
		}
		select {
		case <-exited:
			t.Fatalf("the fixture master exited:\n%s", log)
		default:
		}
		if time.Now().After(stop) {
			t.Fatalf("the fixture master wrote no address in %v:\n%s", deadline, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// probeProcs lists the probe's processes (by tag) whose command line
// starts with argv0 and holds word.
func probeProcs(tag, argv0, word string) []int {
	var out []int
	for _, pid := range proc.TaggedPids([]byte(tag)) {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if len(args) > 0 && filepath.Base(args[0]) == argv0 && slices.Contains(args, word) {
			out = append(out, pid)
		}
	}
	return out
}

// waitNone polls list until it is empty or the deadline passes, and
// returns what is left.
func waitNone(list func() []string) []string {
	stop := time.Now().Add(deadline)
	for {
		left := list()
		if len(left) == 0 || time.Now().After(stop) {
			return left
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func pidList(pids []int) []string {
	out := make([]string, len(pids))
	for i, p := range pids {
		out[i] = fmt.Sprint(p)
	}
	return out
}

// describe names each pid's command line.
func describe(pids []string) string {
	var b strings.Builder
	for _, p := range pids {
		cmdline, _ := os.ReadFile("/proc/" + p + "/cmdline")
		fmt.Fprintf(&b, "\n  %s: %s", p, bytes.ReplaceAll(bytes.TrimRight(cmdline, "\x00"), []byte{0}, []byte{' '}))
	}
	return b.String()
}

var jobSeq struct {
	sync.Mutex
	n int
}

// uniqueJob returns a job name no other run on this machine uses (a DNS
// label), so that the probe's processes and shared memory are its own.
func uniqueJob() string {
	jobSeq.Lock()
	defer jobSeq.Unlock()
	jobSeq.n++
	return fmt.Sprintf("probe-%d-%d-%d", os.Getpid(), time.Now().UnixNano()%1_000_000, jobSeq.n)
}

// jobArenas lists the arena directories in /dev/shm whose owner is a node
// of job.
func jobArenas(job string) []string { return ckptsaver.ArenaDirsOfNodes(job + "-") }

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
