package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/client"
)

// incarnations numbers each save of the --log-saves file by the life of
// its rank's process that made it: a rank's first pid is life 0, its next
// life 1, and so on.
func incarnations(saves []saveLine) []int {
	pids := map[int][]int{}
	out := make([]int, len(saves))
	for i, s := range saves {
		ps := pids[s.rank]
		if len(ps) == 0 || ps[len(ps)-1] != s.pid {
			ps = append(ps, s.pid)
			pids[s.rank] = ps
		}
		out[i] = len(ps) - 1
	}
	return out
}

// TestGoodputOfAFaultyJob runs the DDP example on two nodes of two workers
// with flash checkpoints, SIGKILLs a worker twice and a node's agent once
// (a new agent replaces it), and checks the master's goodput in GetJob: a
// ratio within (0,1), three restarts, each with its phases summing to its
// downtime, and as many steps lost as the workers' own logs show were
// computed again (the highest step an old life saved, less the step its
// successors resumed from).
//
// It holds with or without the agents' lifecycle events: without them the
// first progress report of a round implies the resume (the example reports
// each saved step, the first one at once), and the phases between the
// round forming and the first step are all "spawn".
func TestGoodputOfAFaultyJob(t *testing.T) {
	dir := t.TempDir()
	saves, worlds := filepath.Join(dir, "saves.log"), filepath.Join(dir, "world.log")
	c := newCluster(t, "goodput", "--linger", "5m")
	args := append([]string{"--nnodes", "2"}, trainArgs(dir, "--flash", filepath.Join(dir, "flash"),
		"--log-saves", saves, "--step-sleep", "0.2", "--steps", "80")...)
	a0, a1 := c.agent("node0", args...), c.agent("node1", args...)

	// saveOf waits for a save of rank's life at or past step and returns it.
	saveOf := func(rank, life, step int) saveLine {
		var got saveLine
		waitFor(t, jobTimeout, "a save of a new life", func() bool {
			ss := readSaves(t, saves)
			for i, l := range incarnations(ss) {
				if ss[i].rank == rank && l == life && ss[i].step >= step {
					got = ss[i]
					return true
				}
			}
			return false
		})
		return got
	}
	for i, fault := range []struct {
		rank, step int
		node       bool
	}{{rank: 1, step: 15}, {rank: 2, step: 35}, {rank: 3, step: 55, node: true}} {
		s := saveOf(fault.rank, i, fault.step)
		if fault.node {
			a1.kill(t)
			a1 = c.agent("node1", args...)
		} else if err := syscall.Kill(s.pid, syscall.SIGKILL); err != nil {
			t.Fatalf("kill rank %d (pid %d): %v", fault.rank, s.pid, err)
		}
		t.Logf("fault %d: killed %s at step %d", i+1, map[bool]string{true: "node1's agent", false: "a worker"}[fault.node], s.step)
	}
	for _, a := range []*process{a0, a1} {
		if code := a.wait(t, jobTimeout); code != 0 {
			t.Fatalf("%s exited %d:\n%s", a.name, code, a.out)
		}
	}
	if res := readResult(t, filepath.Join(dir, "out.json")); res.Step != 80 {
		t.Fatalf("the job ended at step %d, want 80", res.Step)
	}

	// What the workers' logs show was computed again: at each of the three
	// restarts, the steps the old lives saved past the step the new ones
	// resumed from.
	ss := readSaves(t, saves)
	lives := incarnations(ss)
	high := map[int]int{} // life -> highest step saved in it
	for i, s := range ss {
		high[lives[i]] = max(high[lives[i]], s.step)
	}
	starts := readRestarts(t, worlds, 4, 12)
	recomputed := 0
	for life := 1; life <= 3; life++ {
		resumed := sameStep(t, starts[4*(life-1):4*life])
		recomputed += max(high[life-1]-resumed, 0)
		t.Logf("life %d saved up to step %d; life %d resumed from step %d", life-1, high[life-1], life, resumed)
	}

	token, err := os.ReadFile(c.tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	hc := client.NewHTTPClient()
	defer hc.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := client.New(hc, c.addr, strings.TrimSpace(string(token))).GetJob(ctx, connect.NewRequest(&roverv1.GetJobRequest{}))
	if err != nil {
		t.Fatalf("GetJob: %v", err)
	}
	g := r.Msg.GetGoodput()
	t.Logf("goodput %.3f of %.1fs, %d restarts, %d steps lost, badput %v", g.GetRatio(), g.GetWallSeconds(), g.GetRestarts(), g.GetLostSteps(), g.GetBadput())
	if g.GetRatio() <= 0 || g.GetRatio() >= 1 {
		t.Errorf("goodput ratio %v, want within (0,1)", g.GetRatio())
	}
	if g.GetRestarts() != 3 || len(g.GetLatestRestarts()) != 3 {
		t.Errorf("%d restarts (%d kept), want 3: %v", g.GetRestarts(), len(g.GetLatestRestarts()), g.GetLatestRestarts())
	}
	if g.GetLostSteps() != int64(recomputed) {
		t.Errorf("the master counts %d steps lost; the workers' logs show %d computed again", g.GetLostSteps(), recomputed)
	}
	// Workers report at most once a second, and the last reports may not
	// reach the master before the job ends: the newest step it knows is one
	// of the last life's.
	if g.GetPhase() != "ended" || g.GetStep() <= 55 || g.GetStep() > 80 {
		t.Errorf("goodput phase %q at step %d, want ended past step 55", g.GetPhase(), g.GetStep())
	}
	for _, rp := range g.GetLatestRestarts() {
		sum := rp.GetDetectSeconds() + rp.GetStopSeconds() + rp.GetRendezvousSeconds() + rp.GetSpawnSeconds() +
			rp.GetInitSeconds() + rp.GetRestoreSeconds() + rp.GetFirstStepSeconds()
		if !rp.GetDone() || rp.GetDowntimeSeconds() <= 0 || sum < rp.GetDowntimeSeconds()-1e-6 || sum > rp.GetDowntimeSeconds()+1e-6 {
			t.Errorf("restart %v: want done, its phases summing to its downtime", rp)
		}
	}
	out := c.master.out.String()
	if n := strings.Count(out, "restart round "); n != 3 {
		t.Errorf("the master's log has %d restart lines, want 3:\n%s", n, out)
	}
	status, err := exec.Command(roverBin, "status", "--master", c.addr, "--token-file", c.tokenFile).CombinedOutput()
	if err != nil || !strings.Contains(string(status), "goodput ") || !strings.Contains(string(status), "FIRST STEP") {
		t.Errorf("rover status (%v) shows no goodput:\n%s", err, status)
	}
}
