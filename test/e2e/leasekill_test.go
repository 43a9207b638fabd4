package e2e

import (
	"encoding/json"
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
// completed twice. Before incarnations, a lease granted to a worker of the
// old round after the master took the round's leases back was held forever,
// and the epoch never ended.

// leasedLines reads a file of completed shards, one JSON line each (leased.py's
// --out, sdkworker's done.jsonl): (epoch, sample) -> completions, and lines.
func leasedLines(t *testing.T, path string) (map[[2]int64]int, int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		return map[[2]int64]int{}, 0
	}
	count := map[[2]int64]int{}
	n := 0
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var s struct {
			Epoch   int64   `json:"epoch"`
			Indices []int64 `json:"indices"`
		}
		if json.Unmarshal([]byte(line), &s) != nil {
			continue // a line cut short by the kill
		}
		n++
		for _, i := range s.Indices {
			count[[2]int64{s.Epoch, i}]++
		}
	}
	return count, n
}

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

func TestKilledShardClientLosesNoShard(t *testing.T) {
	const size, shardSize, epochs, trials = 1200, 20, 2, 6
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	for trial := range trials {
		both := trial%2 == 1 // also kill a peer while its node stops its workers
		after := 5 + rng.IntN(40)
		t.Run(fmt.Sprintf("trial%d_after%d_both%v", trial, after, both), func(t *testing.T) {
			dir := t.TempDir()
			out := filepath.Join(dir, "done.jsonl")
			c := newCluster(t, "leased-kill")
			args := []string{"--nnodes", "2", "--nproc-per-node", "2", "--max-restarts", "5", "--rdzv-conf", rdzvConf,
				filepath.Join(repoRoot, "examples", "elastic_data", "leased.py"),
				"--size", fmt.Sprint(size), "--shard-size", fmt.Sprint(shardSize), "--epochs", fmt.Sprint(epochs),
				"--per-sample", "0.005", "--out", out}
			a0, a1 := c.agent("node0", args...), c.agent("node1", args...)
			waitFor(t, jobTimeout, fmt.Sprintf("%d shards completed", after), func() bool {
				_, n := leasedLines(t, out)
				return n >= after
			})
			// Kill a worker of node0 (the workers' command lines name their
			// node's log dir).
			stopsBefore := strings.Count(a1.out.String(), "stopping workers")
			pids := childrenOf(a0.cmd.Process.Pid, pythonWorkers(dir))
			if len(pids) == 0 {
				t.Fatal("found no worker to kill")
			}
			victim := pids[rng.IntN(len(pids))]
			if err := syscall.Kill(victim, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			kills := 1
			if both {
				// node1 learns of the failure and stops its workers
				// gracefully; kill one of them meanwhile.
				waitFor(t, time.Minute, "node1 to stop its workers", func() bool {
					return strings.Count(a1.out.String(), "stopping workers") > stopsBefore
				})
				for _, pid := range childrenOf(a1.cmd.Process.Pid, pythonWorkers(dir)) {
					if syscall.Kill(pid, syscall.SIGKILL) == nil {
						kills++
						break
					}
				}
				t.Logf("killed %d workers (the second while its node stopped its workers gracefully)", kills)
			}
			for _, a := range []*process{a0, a1} {
				if code := a.wait(t, jobTimeout); code != 0 {
					t.Fatalf("%s exited %d (a lost shard would hang the job):\n%s", a.name, code, a.out)
				}
			}
			count, _ := leasedLines(t, out)
			missing := 0
			for e := int64(0); e < epochs; e++ {
				for i := int64(0); i < size; i++ {
					switch n := count[[2]int64{e, i}]; {
					case n > 1:
						t.Errorf("epoch %d sample %d completed %d times", e, i, n)
					case n == 0:
						missing++
					}
				}
			}
			// A worker killed after the master took its completion but
			// before it wrote its line leaves that shard out of the log.
			if missing > kills*shardSize {
				t.Errorf("%d samples never completed; at most %d may be missing from the log (%d kills)", missing, kills*shardSize, kills)
			}
		})
	}
}
