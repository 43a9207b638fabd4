package e2e

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// jobEvent is what the test reads of a line of `rover events --json`.
type jobEvent struct {
	Seq      uint64      `json:"seq"`
	Kind     string      `json:"kind"`
	Severity string      `json:"severity"`
	Node     string      `json:"node"`
	Round    int         `json:"round"`
	Message  string      `json:"message"`
	Cause    string      `json:"cause"`
	Action   string      `json:"action"`
	ExitCode json.Number `json:"exit_code"` // "" when absent
}

// parseEvents decodes JSON lines of events.
func parseEvents(t *testing.T, text string) []jobEvent {
	t.Helper()
	var evs []jobEvent
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(line, "{") {
			continue
		}
		var e jobEvent
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("event line %q: %v", line, err)
		}
		evs = append(evs, e)
	}
	return evs
}

// listEvents runs `rover events --json` against the cluster's master.
func (c *cluster) listEvents(t *testing.T) []jobEvent {
	t.Helper()
	out, err := exec.Command(roverBin, "events", "--json", "--master", c.addr, "--token-file", c.tokenFile).Output()
	if err != nil {
		t.Fatalf("rover events: %v\n%s", err, out)
	}
	return parseEvents(t, string(out))
}

func firstOf(evs []jobEvent, kind string, round int) (jobEvent, bool) {
	for _, e := range evs {
		if e.Kind == kind && (round == 0 || e.Round == round) {
			return e, true
		}
	}
	return jobEvent{}, false
}

// checkNumbering fails unless evs are numbered 1, 2, ... without a gap or
// a repeat.
func checkNumbering(t *testing.T, evs []jobEvent) {
	t.Helper()
	for i, e := range evs {
		if e.Seq != uint64(i+1) {
			t.Fatalf("event %d of the log has number %d: numbers must run 1, 2, ... without gaps or repeats\n%+v", i, e.Seq, evs)
		}
	}
}

// TestEventsOfAKilledWorker runs real DDP on two nodes and SIGKILLs a
// worker: `rover events --follow`, started before, sees the failure arrive
// with its cause and the master's action; `rover events` lists the
// rendezvous, the failure, the restart and the new world; after the
// master is SIGKILLed and started again on its state dir, the numbering
// goes on from the last event; a follower started then with --since sees
// the job's end and exits 0 when the master stops, and so does the first
// follower, which reconnected across the restart; events.jsonl holds the
// same events.
func TestEventsOfAKilledWorker(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	c := newCluster(t, "events", "--state-dir", state)
	follow := c.start("follow", "events", "--follow", "--json", "--master", c.addr, "--token-file", c.tokenFile)
	waitOutput(t, `"kind":"master_started"`, follow)
	// The job holds at step 20 until the test lets it go, so that it does
	// not end before the master's restart.
	hold := filepath.Join(dir, "go-on")
	args := append([]string{"--nnodes", "2", "--warm-standby=false"}, trainArgs(dir, "--step-sleep", "0.05",
		"--hold-at-step", "20", "--hold-file", hold)...)
	a0, a1 := c.agent("node0", args...), c.agent("node1", args...)
	waitOutput(t, `"kind":"rendezvous_completed"`, follow)
	var pids []int
	waitFor(t, jobTimeout, "a worker process to kill", func() bool {
		pids = workerPIDs(dir)
		return len(pids) > 0
	})
	if err := syscall.Kill(pids[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// The follower sees the failure live, while the job runs on.
	waitOutput(t, `"kind":"worker_failed"`, follow)
	waitOutput(t, "round=2", a0, a1)
	waitFor(t, jobTimeout, "the world of round 2 in the event log", func() bool {
		_, ok := firstOf(c.listEvents(t), "rendezvous_completed", 2)
		return ok
	})

	before := c.listEvents(t)
	checkNumbering(t, before)
	if e, ok := firstOf(before, "rendezvous_completed", 1); !ok || !strings.Contains(e.Message, "2 nodes and 4 workers") {
		t.Errorf("no rendezvous_completed of round 1 with 2 nodes and 4 workers: %+v", e)
	}
	f, ok := firstOf(before, "worker_failed", 1)
	if !ok || f.Cause == "" || f.Action == "" || f.Node == "" || f.Severity != "Warning" || f.ExitCode == "" {
		t.Errorf("worker_failed %+v: want the node, its exit code, a cause and an action, as a Warning", f)
	}
	if e, ok := firstOf(before, "restart", 2); !ok || !strings.Contains(e.Message, "restart 1 of 3") {
		t.Errorf("restart of round 2: %+v, want restart 1 of 3", e)
	}
	followed := parseEvents(t, follow.out.String())
	if len(followed) == 0 || followed[len(followed)-1].Seq > before[len(before)-1].Seq {
		t.Fatalf("the follower holds %d events, the list %d", len(followed), len(before))
	}
	for i, e := range followed {
		if e != before[i] {
			t.Errorf("followed event %+v, listed %+v", e, before[i])
		}
	}

	// The master dies and comes back on its state dir.
	c.master.kill(t)
	waitOutput(t, "lost the master", a0, a1)
	c.restartMaster("master2")
	waitOutput(t, "restored master state", c.master)
	last := before[len(before)-1].Seq
	after := c.listEvents(t)
	checkNumbering(t, after)
	restarted, ok := firstOf(after[min(len(after), len(before)):], "master_started", 0)
	if !ok || restarted.Seq != last+1 || !strings.Contains(restarted.Message, "resumed the job at round 2") {
		t.Errorf("after the master's restart, events %+v; want master_started numbered %d, resuming round 2", after[len(before):], last+1)
	}
	follow2 := c.start("follow2", "events", "--follow", "--json", "--since", "1", "--master", c.addr, "--token-file", c.tokenFile)
	waitOutput(t, `"kind":"master_started"`, follow2)
	if err := os.WriteFile(hold, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitOutput(t, `"kind":"job_succeeded"`, follow2)
	for _, a := range []*process{a0, a1} {
		if code := a.wait(t, jobTimeout); code != 0 {
			t.Fatalf("%s exited %d:\n%s", a.name, code, a.out)
		}
	}
	if code := c.master.wait(t, 30*time.Second); code != 0 {
		t.Errorf("the restarted master exited %d:\n%s", code, c.master.out)
	}
	if code := follow2.wait(t, 30*time.Second); code != 0 {
		t.Errorf("rover events --follow exited %d when the master stopped at the job's end, want 0:\n%s", code, follow2.out)
	}
	if got := parseEvents(t, follow2.out.String()); len(got) == 0 || got[0].Seq != 2 {
		t.Errorf("rover events --since 1 began at %+v, want event 2", got)
	}

	// The first follower lost the master, found it again and followed on
	// to the end without a gap or a repeat.
	if code := follow.wait(t, 30*time.Second); code != 0 {
		t.Errorf("the first rover events --follow exited %d, want 0 at the job's end:\n%s", code, follow.out)
	}
	if !strings.Contains(follow.out.String(), "lost the master") {
		t.Errorf("the first follower did not say it lost the master:\n%s", follow.out)
	}
	throughRestart := parseEvents(t, follow.out.String())
	checkNumbering(t, throughRestart)

	b, err := os.ReadFile(filepath.Join(state, "events.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	onDisk := parseEvents(t, string(b))
	checkNumbering(t, onDisk)
	if end := onDisk[len(onDisk)-1]; end.Kind != "job_succeeded" {
		t.Errorf("events.jsonl ends with %+v, want job_succeeded", end)
	}
	for i, e := range after {
		if onDisk[i] != e {
			t.Errorf("events.jsonl line %d is %+v, the master served %+v", i+1, onDisk[i], e)
		}
	}
	if len(throughRestart) != len(onDisk) {
		t.Errorf("the follower through the restart printed %d events, events.jsonl holds %d", len(throughRestart), len(onDisk))
	}
}
