package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/roverml/rover/internal/agent"
	"github.com/roverml/rover/internal/agent/ckptsaver"
)

// Backup peers (docs/design/flash-checkpoint.md, "Backup peers"): in
// sharded mode every rank saves only its own slice of the parameters
// (train.py --flash-mode sharded), every node's agent pushes its shards to
// its backup peer after each save, and a node that replaces a lost one
// fetches its shards from there, so every rank of the new world restores
// from memory. When the backup peer is lost too, or dies while it sends,
// every rank falls back to storage.

// shardedJob starts a sharded DDP job of nodes nodes under rover submit,
// with fault (if any) in its agents' peer servers, and waits until it has
// committed a checkpoint, saved step 15, and pushed its shards to the
// backup peers.
func shardedJob(t *testing.T, nodes int, fault string) (s *submitted, dir, saves string) {
	t.Helper()
	if fault != "" {
		t.Setenv(agent.PeerFaultEnv, fault)
	}
	dir = t.TempDir()
	t.Setenv(agent.PeerStallFileEnv, filepath.Join(dir, "stalled"))
	saves = filepath.Join(dir, "saves.log")
	job := uniqueJob(fmt.Sprintf("bak%d%s", nodes, fault))
	s = submit(t, job, append([]string{"--rdzv-id", job, "--nnodes", fmt.Sprint(nodes)},
		trainArgs(dir, "--flash", filepath.Join(dir, "flash"), "--flash-mode", "sharded", "--log-saves", saves, "--step-sleep", "0.1")...)...)
	waitFor(t, jobTimeout, "a committed checkpoint", func() bool { return s.committed() >= 10 })
	waitStep(t, saves, 15)
	for n := range nodes {
		waitFor(t, jobTimeout, s.node(n, 0)+"'s first backup push", func() bool {
			return strings.Contains(nodeLog(t, s, s.node(n, 0)), "backing up this node's shards to its backup peer")
		})
	}
	return s, dir, saves
}

// loseNode SIGKILLs node's agent (its workers die with it) and removes its
// shared memory: a lost machine.
func loseNode(t testing.TB, s *submitted, node string) {
	t.Helper()
	pid := agentPid(node)
	if pid == 0 {
		t.Fatalf("no agent process of node %s", node)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill the agent of %s: %v", node, err)
	}
	for _, d := range ckptsaver.ArenaDirsOfNodes(node) {
		os.RemoveAll(d)
	}
}

// newestSaved is the newest step every rank below ranks saved in the
// job's first start.
func newestSaved(t testing.TB, saves string, ranks int) int {
	newest, per := -1, map[int]int{}
	for _, sv := range readSaves(t, saves) {
		if sv.rank < ranks && sv.restart == 0 {
			per[sv.rank] = max(per[sv.rank], sv.step)
		}
	}
	for r := range ranks {
		if newest < 0 || per[r] < newest {
			newest = per[r]
		}
	}
	return newest
}

// finalStarts checks the job's result against clean and returns the last
// world's starts (world ranks).
func finalStarts(t *testing.T, s *submitted, dir string, clean ddpResult, world int) []worldStart {
	t.Helper()
	if code := s.wait(t, jobTimeout); code != 0 {
		t.Fatalf("rover submit exited %d, want 0:\n%s", code, s.stderr)
	}
	res := readResult(t, filepath.Join(dir, "out.json"))
	if res.Step != 60 || res.WorldSize != world {
		t.Fatalf("result: step %d world %d; want 60, %d", res.Step, res.WorldSize, world)
	}
	if d := maxRelDiff(t, clean.Weights, res.Weights); d > 1e-6 {
		t.Errorf("weights differ from an uninterrupted run's by %g relative, want <= 1e-6", d)
	}
	n := worldLines(t, filepath.Join(dir, "world.log"))
	starts := readRestarts(t, filepath.Join(dir, "world.log"), n-world, world)
	t.Logf("resumed:\n%s", startLines(starts))
	return starts
}

// TestSubmitShardedBackupRestore: `rover submit` of two nodes in sharded
// mode; node 1 is lost; its replacement fetches its shards from its backup
// peer (node 0), every rank resumes from memory at the newest step the
// survivors and the backup hold (not storage's), the restart says so per
// node, and the weights equal an uninterrupted run's.
func TestSubmitShardedBackupRestore(t *testing.T) {
	clean := cleanRun(t)
	s, dir, saves := shardedJob(t, 2, "")
	loseNode(t, s, s.node(1, 0))
	newest := newestSaved(t, saves, 2)
	t.Logf("lost %s at step %d (committed %d)", s.node(1, 0), newest, s.committed())
	starts := finalStarts(t, s, dir, clean, 4)
	if n := worldLines(t, filepath.Join(dir, "world.log")); n != 8 {
		t.Errorf("world.log has %d starts, want 8: the first world's and the restored one's", n)
	}
	step := sameStep(t, starts)
	// The backup may lag the survivors' newest save by one push.
	if step < newest-1 {
		t.Errorf("every rank resumed from step %d, older than %d, the newest the survivors and the backup could hold", step, newest-1)
	}
	for _, st := range starts {
		if st.source != "memory" {
			t.Errorf("%q: want it restored from memory", st.line)
		}
	}
	replacement := s.node(1, 1)
	if log := nodeLog(t, s, replacement); !strings.Contains(log, "restored the checkpoint from the node's backup peer") {
		t.Errorf("the replacement's agent did not log a restore from its backup peer:\n%s", log)
	}
	if log := nodeLog(t, s, s.node(0, 0)); !strings.Contains(log, "keeping a backup of a peer's shards") {
		t.Errorf("the survivor's agent did not log the backup it keeps:\n%s", log)
	}
	// The master's restart line and the summary name each node's source.
	want := fmt.Sprintf("%s backup peer %s", replacement, s.node(0, 0))
	if got := s.stderr.String(); strings.Count(got, want) < 2 || !strings.Contains(got, s.node(0, 0)+" memory step "+strconv.Itoa(step)) {
		t.Errorf("rover submit's log and summary do not both say %q (and the survivor's memory):\n%s", want, got)
	}
}

// TestSubmitShardedBackupPeerLostToo: three nodes in sharded mode; node 1
// and its backup peer (node 2) are lost together: no memory holds node
// 1's shards, so every rank of the new world loads the same step from
// storage, and the weights are still an uninterrupted run's.
func TestSubmitShardedBackupPeerLostToo(t *testing.T) {
	clean := cleanThree(t)
	s, dir, _ := shardedJob(t, 3, "")
	loseNode(t, s, s.node(1, 0))
	loseNode(t, s, s.node(2, 0))
	t.Logf("lost %s and its backup peer %s (committed %d)", s.node(1, 0), s.node(2, 0), s.committed())
	starts := finalStarts(t, s, dir, clean, 6)
	sameStep(t, starts)
	for _, st := range starts {
		if st.source != "storage" {
			t.Errorf("%q: want it restored from storage", st.line)
		}
	}
	if log := nodeLog(t, s, s.node(1, 1)); strings.Contains(log, "restored the checkpoint from") {
		t.Errorf("node 1's replacement restored from a peer, though its backup peer was lost:\n%s", log)
	}
}

// TestSubmitShardedBackupPeerKilledMidTransfer: node 1 is lost, and its
// backup peer is killed while it sends node 1's shards to the replacement
// (it stalls halfway, ROVER_TEST_PEER_FAULT=stall, and the test SIGKILLs
// it): the replacement refuses the cut transfer, loads nothing of it, and
// the job goes on from storage with an uninterrupted run's weights.
func TestSubmitShardedBackupPeerKilledMidTransfer(t *testing.T) {
	clean := cleanRun(t)
	s, dir, _ := shardedJob(t, 2, "stall")
	loseNode(t, s, s.node(1, 0))
	stalled := filepath.Join(dir, "stalled")
	waitFor(t, jobTimeout, "the backup peer to stall mid-transfer", func() bool {
		b, err := os.ReadFile(stalled)
		return err == nil && strings.HasSuffix(string(b), "\n")
	})
	b, _ := os.ReadFile(stalled)
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid != agentPid(s.node(0, 0)) {
		t.Fatalf("the stalled agent is pid %q, want %s's (%d)", b, s.node(0, 0), agentPid(s.node(0, 0)))
	}
	loseNode(t, s, s.node(0, 0))
	starts := finalStarts(t, s, dir, clean, 4)
	sameStep(t, starts)
	for _, st := range starts {
		if st.source != "storage" {
			t.Errorf("%q: want it restored from storage", st.line)
		}
	}
	if log := nodeLog(t, s, s.node(1, 1)); !strings.Contains(log, "could not restore the checkpoint from the node's backup peer") {
		t.Errorf("the replacement's agent did not log the cut transfer:\n%s", log)
	}
}
