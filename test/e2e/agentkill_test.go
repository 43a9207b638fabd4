package e2e

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	cleanOnce   sync.Once
	cleanResult ddpResult
)

// cleanRun is the uninterrupted two-node run that the fault tests compare
// with, run once per test binary.
func cleanRun(t *testing.T) ddpResult {
	t.Helper()
	cleanOnce.Do(func() { cleanResult = runTwoNodes(t) })
	if cleanResult.Step == 0 {
		t.Fatal("the uninterrupted run failed (see the first test that ran it)")
	}
	return cleanResult
}

// saveLine is one line of train.py's --log-saves file.
type saveLine struct{ restart, rank, pid, step int }

func readSaves(t testing.TB, path string) []saveLine {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		if os.IsNotExist(err) {
			return nil
		}
		t.Fatal(err)
	}
	defer f.Close()
	var out []saveLine
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var s saveLine
		if _, err := fmt.Sscanf(sc.Text(), "restart=%d rank=%d pid=%d step=%d", &s.restart, &s.rank, &s.pid, &s.step); err == nil {
			out = append(out, s)
		}
	}
	return out
}

// TestDDPFlashSurvivesAKilledAgent kills one of two node agents (SIGKILL:
// its workers die with it, nothing is persisted) while the job saves to
// memory every step, and starts a new agent on that node. The new agent
// adopts the killed agent's arenas, the master agrees on the newest step
// every rank holds in memory, every rank resumes from that same step, and
// the final weights equal those of an uninterrupted run.
func TestDDPFlashSurvivesAKilledAgent(t *testing.T) {
	clean := cleanRun(t)
	dir := t.TempDir()
	saves, worlds := filepath.Join(dir, "saves.log"), filepath.Join(dir, "world.log")
	c := newCluster(t, "ddp")
	args := append([]string{"--nnodes", "2"}, trainArgs(dir, "--flash", filepath.Join(dir, "flash"),
		"--log-saves", saves, "--step-sleep", "0.05")...)
	a0, a1 := c.agent("node0", args...), c.agent("node1", args...)

	deadline := time.Now().Add(jobTimeout)
	for done := false; !done; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("training did not reach step 25:\n%s", a0.out)
		}
		for _, s := range readSaves(t, saves) {
			done = done || s.step >= 25
		}
	}
	a1.kill(t)
	a1 = c.agent("node1", args...)
	for _, a := range []*process{a0, a1} {
		if code := a.wait(t, jobTimeout); code != 0 {
			t.Fatalf("%s exited %d:\n%s", a.name, code, a.out)
		}
	}
	if !strings.Contains(a1.out.String(), "adopted the checkpoint arenas of a killed agent") {
		t.Errorf("the new agent did not adopt the killed agent's arenas:\n%s", a1.out)
	}
	res := readResult(t, filepath.Join(dir, "out.json"))
	if res.Step != 60 || res.WorldSize != 4 {
		t.Fatalf("result: step %d world %d; want 60, 4", res.Step, res.WorldSize)
	}
	if d := maxRelDiff(t, clean.Weights, res.Weights); d > 1e-6 {
		t.Errorf("weights differ by %g relative, want <= 1e-6", d)
	}

	// The last step each rank saved in its first life (the pids that saved
	// step 1). A rank may have committed one more step than it logged before
	// it died, so the newest step all ranks hold is min or min+1.
	first, last := map[int]int{}, map[int]int{}
	for _, s := range readSaves(t, saves) {
		if s.step == 1 {
			first[s.rank] = s.pid
		}
		if first[s.rank] == s.pid {
			last[s.rank] = max(last[s.rank], s.step)
		}
	}
	lo := 1 << 30
	for rank := range 4 {
		if _, ok := last[rank]; !ok {
			t.Fatalf("rank %d logged no save before the kill", rank)
		}
		lo = min(lo, last[rank])
	}
	starts := readRestarts(t, worlds, 4, 4) // one restart of every rank
	for _, s := range starts {
		if s.source != "memory" || s.world != 4 {
			t.Errorf("%q: want a world of 4 resumed from memory", s.line)
		}
	}
	resumed := sameStep(t, starts)
	if s := resumed; s < lo || s > lo+1 {
		t.Errorf("every rank resumed from step %d; the newest step all ranks held is %d or %d (last saves %v)", s, lo, lo+1, last)
	}
	t.Logf("killed after steps %v were saved; every rank resumed from step %d in memory", last, resumed)
}
