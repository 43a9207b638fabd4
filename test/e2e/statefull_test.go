package e2e

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// failingWorker is the command line of `rover run` for workers that create
// DIR/started, wait for DIR/go, then fail at once (with a log tail for the
// failure report), again and again, with restarts to spare: each failure and
// restart is a transition the master journals, so the journal grows past
// the pages its file holds, and needs new space.
func failingWorker(dir string) []string {
	return []string{"--max-restarts", "100000", "--no-python", "sh", "-c",
		`touch "$1/started"; while [ ! -e "$1/go" ]; do sleep 0.05; done; head -c 8000 /dev/zero | tr '\0' x >&2; exit 1`, "sh", dir}
}

// stateFailedCode is the documented exit code of a master whose state
// store refused a write (docs/exit-codes.md).
const stateFailedCode = 6

// TestMasterStateDiskFull fills the disk of a real master's --state-dir (a
// small tmpfs) mid-job: the master's next transition cannot be made
// durable, so the master exits at once with the documented code and the
// cause, rather than close its port and wait silently. Once space is freed,
// a master restarted on the same state dir resumes the job from it.
func TestMasterStateDiskFull(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	mountTmpfs(t, state, "1m")
	c := newCluster(t, "full", "--state-dir", state)
	gate := filepath.Join(dir, "gate")
	if err := os.MkdirAll(gate, 0o700); err != nil {
		t.Fatal(err)
	}
	c.agent("node-0", append([]string{"--nnodes", "1"}, failingWorker(gate)...)...)
	waitExists(t, filepath.Join(gate, "started"), jobTimeout)

	filler := filepath.Join(state, "filler")
	fill(t, filler)
	if err := os.WriteFile(filepath.Join(gate, "go"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	// Failing workers are transitions the master must journal.
	if code := c.master.wait(t, jobTimeout); code != stateFailedCode {
		t.Fatalf("the master exited %d with its state disk full, want %d:\n%s", code, stateFailedCode, c.master.out)
	}
	out := c.master.out.String()
	for _, want := range []string{"no space left on device", "the master's state store failed", state} {
		if !strings.Contains(out, want) {
			t.Errorf("the master's output does not say %q:\n%s", want, out)
		}
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	c.restartMaster("master-2")
	waitFor(t, jobTimeout, "the restarted master to resume the job", func() bool {
		return strings.Contains(c.master.out.String(), "restored master state")
	})
	// It resumes what was durable: the round and node from before the disk
	// filled (the failure that did not fit was never acknowledged).
	if out := c.master.out.String(); !strings.Contains(out, "round=1") || !strings.Contains(out, "nodes=1") {
		t.Errorf("the restarted master did not resume round 1 with its node:\n%s", out)
	}
}

// TestStandaloneStateDiskFull fills the disk of the embedded master of
// `rover run --standalone` (its state is in the log dir, a small tmpfs
// here) mid-job: the agent stops its workers and exits with the master's
// documented code and the cause, instead of training on with nothing
// durable.
func TestStandaloneStateDiskFull(t *testing.T) {
	dir := t.TempDir()
	logs := filepath.Join(dir, "logs")
	mountTmpfs(t, logs, "1m")
	gate := filepath.Join(dir, "gate")
	if err := os.MkdirAll(gate, 0o700); err != nil {
		t.Fatal(err)
	}
	c := &cluster{t: t, dir: dir}
	p := c.start("agent", append([]string{"run", "--standalone", "--log-dir", logs}, failingWorker(gate)...)...)
	waitExists(t, filepath.Join(gate, "started"), jobTimeout)
	fill(t, filepath.Join(logs, "filler"))
	if err := os.WriteFile(filepath.Join(gate, "go"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, jobTimeout); code != stateFailedCode {
		t.Fatalf("rover run --standalone exited %d with its master's state disk full, want %d:\n%s", code, stateFailedCode, p.out)
	}
	out := p.out.String()
	for _, want := range []string{"no space left on device", "the job's master (run by this agent) stopped"} {
		if !strings.Contains(out, want) {
			t.Errorf("the agent's output does not say %q:\n%s", want, out)
		}
	}
}

// TestSubmitStateDiskFull fills the job directory of `rover submit` (a
// small tmpfs: the embedded master's state is in it) mid-job: rover submit
// stops the job's nodes and exits with the master's documented code and the
// cause, rather than wait for an outcome its master can no longer reach.
func TestSubmitStateDiskFull(t *testing.T) {
	dir := t.TempDir()
	jobDir := filepath.Join(dir, "job")
	mountTmpfs(t, jobDir, "2m")
	gate := filepath.Join(dir, "gate")
	if err := os.MkdirAll(gate, 0o700); err != nil {
		t.Fatal(err)
	}
	job := uniqueJob("statefull")
	c := &cluster{t: t, dir: dir}
	p := c.start("submit", append([]string{"submit", "--quiet", "--job-dir", jobDir, "--rdzv-id", job, "--nnodes", "1"}, failingWorker(gate)...)...)
	waitExists(t, filepath.Join(gate, "started"), jobTimeout)
	fill(t, filepath.Join(jobDir, "filler"))
	if err := os.WriteFile(filepath.Join(gate, "go"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, jobTimeout); code != stateFailedCode {
		t.Fatalf("rover submit exited %d with its master's state disk full, want %d:\n%s", code, stateFailedCode, p.out)
	}
	out := p.out.String()
	for _, want := range []string{"no space left on device", "the master's state store failed"} {
		if !strings.Contains(out, want) {
			t.Errorf("rover submit's output does not say %q:\n%s", want, out)
		}
	}
}

// TestHostedMasterStateDiskFull: in a job without `rover master`, node rank
// 0's agent hosts the master, its state in that agent's log dir (a small
// tmpfs here). When it fills mid-job, the hosting agent stops its workers
// and exits with the master's documented code and the cause.
func TestHostedMasterStateDiskFull(t *testing.T) {
	dir, port := t.TempDir(), freePortPair(t)
	logs := filepath.Join(dir, "logs")
	mountTmpfs(t, logs, "1m")
	gate := filepath.Join(dir, "gate")
	if err := os.MkdirAll(gate, 0o700); err != nil {
		t.Fatal(err)
	}
	c := &cluster{t: t, dir: dir, job: uniqueJob("hosted-full")}
	p := c.start("node0", append([]string{"run", "--nnodes", "1", "--rdzv-backend", "static", "--node-rank", "0",
		"--master-addr", "127.0.0.1", "--master-port", strconv.Itoa(port), "--rdzv-id", c.job, "--log-dir", logs}, failingWorker(gate)...)...)
	waitExists(t, filepath.Join(gate, "started"), jobTimeout)
	fill(t, filepath.Join(logs, "filler"))
	if err := os.WriteFile(filepath.Join(gate, "go"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, jobTimeout); code != stateFailedCode {
		t.Fatalf("the hosting agent exited %d with its master's state disk full, want %d:\n%s", code, stateFailedCode, p.out)
	}
	out := p.out.String()
	for _, want := range []string{"no space left on device", "the job's master (run by this agent) stopped"} {
		if !strings.Contains(out, want) {
			t.Errorf("the agent's output does not say %q:\n%s", want, out)
		}
	}
}

// TestMasterRefusesEmptyJournal: a real `rover master` on a state dir whose
// journal.db is empty (0 bytes) refuses to start a fresh job from it: it
// exits 1 naming the file and what starting would drop; with
// --discard-state it starts, moving the file aside and saying so.
func TestMasterRefusesEmptyJournal(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	if err := os.MkdirAll(state, 0o700); err != nil {
		t.Fatal(err)
	}
	journal := filepath.Join(state, "journal.db")
	if err := os.WriteFile(journal, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	c := &cluster{t: t, dir: dir}
	args := []string{"master", "--listen", "127.0.0.1:0", "--job", "empty", "--token-file", filepath.Join(dir, "job.token"),
		"--addr-file", filepath.Join(dir, "master.addr"), "--state-dir", state}
	p := c.start("master", args...)
	if code := p.wait(t, jobTimeout); code != 1 {
		t.Fatalf("the master exited %d on an empty journal, want 1:\n%s", code, p.out)
	}
	for _, want := range []string{journal, "it is empty (0 bytes)", "the whole job state", "--discard-state"} {
		if !strings.Contains(p.out.String(), want) {
			t.Errorf("the master's output does not say %q:\n%s", want, p.out)
		}
	}
	p = c.start("master-discard", append(args, "--discard-state")...)
	waitExists(t, filepath.Join(dir, "master.addr"), jobTimeout)
	if out := p.out.String(); !strings.Contains(out, "discarded the damaged state file") || !strings.Contains(out, journal) {
		t.Errorf("the master with --discard-state does not say what it discarded:\n%s", out)
	}
	if moved, _ := filepath.Glob(journal + ".discarded-*"); len(moved) != 1 {
		t.Errorf("the empty journal was not kept aside: %v", moved)
	}
}
