package e2e

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Leased shards are never lost: a ShardClient worker (examples/elastic_data/
// leased.py, two shards prefetched) is SIGKILLed while it holds leases, at a
// random point, sometimes together with a worker of the other node while that
// node stops its workers gracefully; the job must end, with no shard
// completed twice, and every sample completed or in the shard of a process
// that died while completing it (leasedlog_test.go). Before incarnations, a
// lease granted to a worker of the old round after the master took the
// round's leases back was held forever, and the epoch never ended. The
// check used to allow one shard missing from the log per SIGKILL, but each
// worker its agent stops in the restart can die in that window too (as one
// did on a loaded machine: 40 samples, two shards, missing after one kill).

// pythonWorkers lists the python processes whose command line mentions text.
func pythonWorkers(text string) []int { return workerPIDs(text) }

// childrenOf keeps the pids whose parent is parent.
func childrenOf(parent int, pids []int) []int {
	var out []int
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		s := string(b)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
		if len(fields) > 1 && fields[1] == fmt.Sprint(parent) {
			out = append(out, pid)
		}
	}
	return out
}

// killLeasedWorker SIGKILLs one of parent's python workers (their command lines
// name dir), waiting for one to be running.
func killLeasedWorker(t *testing.T, rng *rand.Rand, parent int, dir string) {
	t.Helper()
	waitFor(t, jobTimeout, "a worker to kill", func() bool {
		pids := childrenOf(parent, pythonWorkers(dir))
		return len(pids) > 0 && syscall.Kill(pids[rng.IntN(len(pids))], syscall.SIGKILL) == nil
	})
}

// TestKilledShardClientLosesNoShard kills twice in every trial, at random
// points of the job (after a random number of completed shards, wherever
// each worker then is in its lease, work, complete and log cycle).
func TestKilledShardClientLosesNoShard(t *testing.T) {
	const size, shardSize, epochs, trials = 1200, 20, 2, 6
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	for trial := range trials {
		both := trial%2 == 1 // at the second kill, also kill a peer while its node stops its workers
		at := []int{5 + rng.IntN(30), 0}
		at[1] = at[0] + 5 + rng.IntN(30)
		t.Run(fmt.Sprintf("trial%d_after%d_%d_both%v", trial, at[0], at[1], both), func(t *testing.T) {
			dir := t.TempDir()
			out := filepath.Join(dir, "done.jsonl")
			c := newCluster(t, "leased-kill")
			args := []string{"--nnodes", "2", "--nproc-per-node", "2", "--max-restarts", "5", "--rdzv-conf", rdzvConf,
				filepath.Join(repoRoot, "examples", "elastic_data", "leased.py"),
				"--size", fmt.Sprint(size), "--shard-size", fmt.Sprint(shardSize), "--epochs", fmt.Sprint(epochs),
				"--per-sample", "0.005", "--out", out}
			a0, a1 := c.agent("node0", args...), c.agent("node1", args...)
			kills := 0
			for k, after := range at {
				waitFor(t, jobTimeout, fmt.Sprintf("%d shards completed", after), func() bool {
					_, n := leasedLines(t, out)
					return n >= after
				})
				// Kill a worker of node0 (the workers' command lines name
				// their node's log dir).
				starts := strings.Count(a0.out.String(), "starting workers")
				stopsBefore := strings.Count(a1.out.String(), "stopping workers")
				killLeasedWorker(t, rng, a0.cmd.Process.Pid, dir)
				kills++
				if both && k == len(at)-1 {
					// node1 learns of the failure and stops its workers
					// gracefully; kill one of them meanwhile.
					waitFor(t, jobTimeout, "node1 to stop its workers", func() bool {
						return strings.Count(a1.out.String(), "stopping workers") > stopsBefore
					})
					for _, pid := range childrenOf(a1.cmd.Process.Pid, pythonWorkers(dir)) {
						if syscall.Kill(pid, syscall.SIGKILL) == nil {
							kills++
							break
						}
					}
				}
				// The workers restart in a new round before the next kill.
				waitFor(t, jobTimeout, "node0 to restart its workers", func() bool {
					return strings.Count(a0.out.String(), "starting workers") > starts
				})
			}
			for _, a := range []*process{a0, a1} {
				if code := a.wait(t, jobTimeout); code != 0 {
					t.Fatalf("%s exited %d (a lost shard would hang the job):\n%s", a.name, code, a.out)
				}
			}
			log := readLeasedLog(t, out)
			for _, p := range log.problems(epochs, size) {
				t.Error(p)
			}
			t.Logf("%d kills; %d shards in the log; %d shards whose process died completing them", kills, log.lines, log.pending)
		})
	}
}
