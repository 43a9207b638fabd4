package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestHangEarlyInUserCode runs the DDP example on two nodes with
// --hang-timeout=10s --hang-detection=2; rank 3 loops forever in Python
// (not SIGSTOP) at step 15, before that step's forward pass, so the other
// ranks block in the step's first collective: the reason says so, naming
// rank 3 as the one that never arrived. The steps before it take
// about a second, and the newest of them reaches the master only through
// the progress reporter's flush (no further step() call comes): the hang is
// declared, with the newest step 14 in its reason, the workers are
// restarted, and the job finishes.
func TestHangEarlyInUserCode(t *testing.T) {
	reason := hangEarlyInUserCode(t, nil)
	// Where the ranks stand: 0-2 in step 15's gradient all-reduce, and rank
	// 3 (on node1) never arrived, having completed step 14's.
	if m := hangLocation.FindStringSubmatch(reason); m == nil {
		t.Errorf("hang reason %q does not say where the ranks stand: want %q", reason, hangLocation)
	} else if m[1] != "ranks 0-2" || m[2] != "all_reduce (DDP bucket)" || m[3] != "rank 3 (node1)" || m[4] != "last completed all_reduce (DDP bucket)" {
		t.Errorf("hang location %q: want ranks 0-2 waiting in all_reduce (DDP bucket), and rank 3 (node1) that never arrived "+
			"and last completed one", m[0])
	}
}

// TestHangEarlyInUserCodeStockDDP is TestHangEarlyInUserCode on stock DDP
// (--allreduce ddp), whose gradient buckets collective timing leaves
// untimed here: its hook would cost about 150 µs of CPU per step, and the
// example's steps take 1-3 ms of CPU, far from the 15 ms where that is
// under 1%. The hang's reason must still say where the ranks stand, from
// the DDP step each is in: ranks 0-2 in step 15 (their forward call made,
// their gradient all-reduce waiting), and rank 3 never began it.
func TestHangEarlyInUserCodeStockDDP(t *testing.T) {
	reason := hangEarlyInUserCode(t, nil, "--allreduce", "ddp")
	const want = "; DDP steps: ranks 0-2 are in DDP step #15 (group world), whose gradient buckets are not timed; " +
		"rank 3 (node1) never began it: it is in DDP step #14"
	if !strings.HasSuffix(reason, want) {
		t.Errorf("hang reason %q: want it to end with %q", reason, want)
	}
}

// hangEarlyInUserCode runs the hang of TestHangEarlyInUserCode with env
// for the agents and extra arguments for the example, checks the newest
// step in the hang's reason, that the job finishes after a restart, and
// returns the reason.
func hangEarlyInUserCode(t *testing.T, env []string, extra ...string) string {
	dir := t.TempDir()
	times := filepath.Join(dir, "times.log")
	c := newCluster(t, "ddp")
	c.env = append(c.env, env...)
	agents := map[string]*process{}
	for _, name := range []string{"node0", "node1"} {
		args := append([]string{"--nnodes", "2", "--node-rank", name[len(name)-1:], "--hang-timeout", hangTimeout.String(),
			"--hang-detection", "2", "--log-dir", filepath.Join(dir, "logs", name)},
			trainArgs(dir, append([]string{"--flash", filepath.Join(dir, "store"), "--steps", "40", "--ckpt-every", "0",
				"--spin-at-step", "15", "--spin-rank", "3", "--log-times", times}, extra...)...)...)
		agents[name] = c.agent(name, args...)
	}
	var spun time.Time
	waitFor(t, 3*time.Minute, "rank 3 to spin at step 15", func() bool {
		spun = loggedTime(times, "spin", 3)
		return !spun.IsZero()
	})
	trained := loggedTime(times, "trained", 3) // its first step
	var reason string
	waitFor(t, hangTimeout+2*time.Minute, "the master to declare the hang", func() bool {
		m := hangReason.FindStringSubmatch(c.master.out.String())
		if m != nil {
			reason = m[1]
		}
		return m != nil
	})
	declared := time.Since(spun)
	if !strings.Contains(reason, "newest step 14,") {
		t.Errorf("hang reason %q: want the newest step 14 (the flushed one)", reason)
	}
	for name, a := range agents {
		if code := a.wait(t, jobTimeout); code != 0 {
			t.Fatalf("%s exited %d:\n%s", name, code, a.out)
		}
	}
	if r := readResult(t, filepath.Join(dir, "out.json")); r.Step != 40 || r.RestartCount != 1 {
		t.Errorf("result: step %d restarts %d; want 40, 1", r.Step, r.RestartCount)
	}
	t.Logf("hang-timeout %s: rank 3 spun %s after its first step; the hang was declared %s after: %s", hangTimeout,
		spun.Sub(trained).Round(10*time.Millisecond), declared.Round(10*time.Millisecond), reason)
	return reason
}

// hangLocation is the end of a hang's reason that says where the ranks
// stand (stall.Location): who waits in which op, who never arrived and
// what it did last.
var hangLocation = regexp.MustCompile(`(ranks? [0-9,-]+) waits? in (.+?) #\d+ \(group world, [^)]*\); (rank \d+ \(\w+\)) never arrived: it (last completed .+?|waits in .+?) #\d+ `)

var hangReason = regexp.MustCompile(`msg="the job hangs; the agents collect their workers' stacks" [^\n]*?reason="((?:[^"\\]|\\.)*)"`)

// loggedTime is when rank logged event (restart 0) in the example's
// --log-times file; zero when it has not.
func loggedTime(path, event string, rank int) time.Time {
	b, _ := os.ReadFile(path)
	prefix := "event=" + event + " restart=0 rank=" + strconv.Itoa(rank) + " "
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		_, ts, _ := strings.Cut(line, " t=")
		if f, err := strconv.ParseFloat(ts, 64); err == nil {
			return time.Unix(0, int64(f*1e9))
		}
	}
	return time.Time{}
}
