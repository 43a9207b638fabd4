package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/roverml/rover/internal/agent"
	"github.com/roverml/rover/internal/agent/ckptsaver"
)

// Peer restore (docs/design/flash-checkpoint.md, "Peer restore"): a node
// that replaces a lost machine fetches the agreed step from a survivor's
// memory, so every rank of the new world restores from memory.

var (
	cleanThreeOnce   sync.Once
	cleanThreeResult ddpResult
)

// cleanThree is an uninterrupted three-node run's result.
func cleanThree(t *testing.T) ddpResult {
	t.Helper()
	cleanThreeOnce.Do(func() {
		dir := t.TempDir()
		s := submit(t, uniqueJob("peer-clean3"), append([]string{"--rdzv-id", "x", "--nnodes", "3"}, trainArgs(dir)...)...)
		if code := s.wait(t, jobTimeout); code != 0 {
			t.Fatalf("the uninterrupted three-node run exited %d", code)
		}
		cleanThreeResult = readResult(t, filepath.Join(dir, "out.json"))
	})
	if cleanThreeResult.Step == 0 {
		t.Fatal("the uninterrupted three-node run failed (see the first test that ran it)")
	}
	return cleanThreeResult
}

// TestSubmitPeerRestoreTwoNodes: `rover submit` of two nodes; node 1 is
// lost (its agent and workers SIGKILLed, its shared memory removed); its
// replacement fetches the survivor's newest step from the survivor's
// memory, every rank resumes from memory at that step, and the weights
// equal an uninterrupted run's.
func TestSubmitPeerRestoreTwoNodes(t *testing.T) { peerRestore(t, 2, "") }

// TestSubmitPeerRestoreThreeNodes is the same with three nodes: two
// survivors serve the replacement.
func TestSubmitPeerRestoreThreeNodes(t *testing.T) { peerRestore(t, 3, "") }

// TestSubmitPeerRestoreFaultyTransfer: the survivor's agent damages what it
// sends (a byte flipped; the connection cut halfway): the replacement
// refuses it, its ranks load the same step from storage (where the
// survivor persisted it before rejoining), and the weights are still an
// uninterrupted run's.
func TestSubmitPeerRestoreFaultyTransfer(t *testing.T) {
	for _, fault := range []string{"flip", "cut"} {
		t.Run(fault, func(t *testing.T) { peerRestore(t, 2, fault) })
	}
}

func peerRestore(t *testing.T, nodes int, fault string) {
	var clean ddpResult
	if nodes == 2 {
		clean = cleanRun(t)
	} else {
		clean = cleanThree(t)
	}
	if fault != "" {
		t.Setenv(agent.PeerFaultEnv, fault)
	}
	dir := t.TempDir()
	saves := filepath.Join(dir, "saves.log")
	job := uniqueJob(fmt.Sprintf("peer%d%s", nodes, fault))
	s := submit(t, job, append([]string{"--rdzv-id", job, "--nnodes", fmt.Sprint(nodes)},
		trainArgs(dir, "--flash", filepath.Join(dir, "flash"), "--log-saves", saves, "--step-sleep", "0.1")...)...)
	waitFor(t, jobTimeout, "a committed checkpoint", func() bool { return s.committed() >= 10 })
	waitStep(t, saves, 15)
	lost := nodes - 1
	victim := agentPid(s.node(lost, 0))
	if victim == 0 {
		t.Fatalf("no agent process of node %s", s.node(lost, 0))
	}
	if err := syscall.Kill(victim, syscall.SIGKILL); err != nil {
		t.Fatalf("kill the agent of %s: %v", s.node(lost, 0), err)
	}
	// A lost machine: its shared memory goes too (rover submit also
	// removes it once it reaped the agent).
	for _, d := range ckptsaver.ArenaDirsOfNodes(s.node(lost, 0)) {
		os.RemoveAll(d)
	}
	survivors := 2 * lost // the survivors' ranks: 0 .. 2*lost-1
	newest := -1          // the newest step every survivor rank saved before the kill
	per := map[int]int{}
	for _, sv := range readSaves(t, saves) {
		if sv.rank < survivors && sv.restart == 0 {
			per[sv.rank] = max(per[sv.rank], sv.step)
		}
	}
	for r := range survivors {
		if newest < 0 || per[r] < newest {
			newest = per[r]
		}
	}
	t.Logf("killed the agent of %s at step %d (committed %d)", s.node(lost, 0), newest, s.committed())
	if code := s.wait(t, jobTimeout); code != 0 {
		t.Fatalf("rover submit exited %d, want 0:\n%s", code, s.stderr)
	}
	world := 2 * nodes
	res := readResult(t, filepath.Join(dir, "out.json"))
	if res.Step != 60 || res.WorldSize != world {
		t.Fatalf("result: step %d world %d; want 60, %d", res.Step, res.WorldSize, world)
	}
	if d := maxRelDiff(t, clean.Weights, res.Weights); d > 1e-6 {
		t.Errorf("weights differ from an uninterrupted run's by %g relative, want <= 1e-6", d)
	}
	first := world
	if fault != "" {
		// The replacement refused the damaged transfer and started no
		// workers: that round failed (the survivors' workers may have
		// logged their start before it was stopped), and the next agreed
		// without peers.
		n := worldLines(t, filepath.Join(dir, "world.log"))
		if n < 2*world || n > 2*world+survivors {
			t.Fatalf("world.log has %d starts, want %d and, from the failed round, up to %d more", n, 2*world, survivors)
		}
		first = n - world
	}
	starts := readRestarts(t, filepath.Join(dir, "world.log"), first, world)
	t.Logf("resumed:\n%s", startLines(starts))
	step := sameStep(t, starts)
	if step < newest {
		t.Errorf("every rank resumed from step %d, older than %d, the survivors' newest in memory", step, newest)
	}
	for _, st := range starts {
		// A lost node and a refused transfer are membership changes: the
		// restart budget is untouched.
		if st.restart != 0 {
			t.Errorf("%q: want TORCHELASTIC_RESTART_COUNT 0, no restart spent", st.line)
		}
		want := "memory"
		if fault != "" {
			want = "storage" // the damaged transfer was refused: no peer restore in the next round
		}
		if st.source != want {
			t.Errorf("%q: want it restored from %s", st.line, want)
		}
	}
	log := nodeLog(t, s, s.node(lost, 1))
	if fault == "" && !strings.Contains(log, "restored the checkpoint from a peer's memory") {
		t.Errorf("the replacement's agent did not log a restore from a peer:\n%s", log)
	}
	if fault != "" && (!strings.Contains(log, "could not restore the checkpoint from a peer") || !strings.Contains(log, "could not start workers")) {
		t.Errorf("the replacement's agent did not log the refused transfer:\n%s", log)
	}
}

// nodeLog is a node's stdout and stderr logs.
func nodeLog(t testing.TB, s *submitted, id string) string {
	t.Helper()
	var b strings.Builder
	for _, f := range []string{"stdout.log", "stderr.log"} {
		data, _ := os.ReadFile(filepath.Join(s.dir, "nodes", id, f))
		b.Write(data)
	}
	return b.String()
}

// worldLines counts the starts in a world.log.
func worldLines(t testing.TB, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return len(strings.Split(strings.TrimSpace(string(b)), "\n"))
}
