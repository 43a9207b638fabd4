package e2e

import (
	"path/filepath"
	"strconv"
	"testing"
)

// TestGlobalBatchAcrossWorldChanges trains with ElasticSampler's
// global_batch_size (6) and flash checkpoints on two nodes of two workers,
// kills one node mid-epoch (the world shrinks from 4 ranks to 2) and later
// starts a new one (it grows back to 4). Every step of every world trains
// exactly 6 samples, each rank its share (2, 2, 1, 1 in a world of 4;
// 3, 3 in a world of 2), and over the steps that survived every sample of
// every epoch is trained exactly once, but a dropped tail shorter than the
// global batch.
func TestGlobalBatchAcrossWorldChanges(t *testing.T) {
	c := newCluster(t, "global-batch")
	dir := t.TempDir()
	const size, global, epochs = 600, 6, 2
	args := []string{"--nnodes", "1:2", "--nproc-per-node", "2", "--max-restarts", "5", "--rdzv-conf", rdzvConf,
		"--checkpoint-dir", filepath.Join(dir, "flash"), "--checkpoint-keep", "2",
		filepath.Join(repoRoot, "examples", "elastic_data", "ddp_sampler.py"),
		"--size", strconv.Itoa(size), "--global-batch-size", strconv.Itoa(global), "--epochs", strconv.Itoa(epochs),
		"--persist-every", "5", "--step-sleep", "0.05", "--log", dir}
	shrinkAndGrow(t, c, dir, args)

	logs := readTrainLogs(t, dir)
	type stepKey struct{ round, step int }
	sizes := map[stepKey][]int{} // the batch of each rank that logged the step
	worlds := map[int]int{}      // world -> steps trained by every rank of it
	for _, l := range logs {
		if l.globalBatch != global {
			t.Fatalf("round %d rank %d: the sampler's global batch is %d, want %d", l.round, l.rank, l.globalBatch, global)
		}
		q, rem := global/l.world, global%l.world
		want := q
		if l.rank < rem {
			want++
		}
		for _, s := range l.steps {
			if len(s.Indices) != want {
				t.Errorf("round %d (world %d) step %d: rank %d trained %d samples, want its share %d of %d",
					l.round, l.world, s.Step, l.rank, len(s.Indices), want, global)
			}
			k := stepKey{l.round, s.Step}
			sizes[k] = append(sizes[k], len(s.Indices))
		}
	}
	world := map[int]int{}
	for _, l := range logs {
		world[l.round] = l.world
	}
	for k, ss := range sizes {
		if len(ss) != world[k.round] {
			continue // a step a killed rank did not log
		}
		sum := 0
		for _, n := range ss {
			sum += n
		}
		if sum != global {
			t.Errorf("round %d step %d: the ranks' batches %v sum to %d, want the global batch %d", k.round, k.step, ss, sum, global)
		}
		worlds[world[k.round]]++
	}
	if worlds[4] == 0 || worlds[2] == 0 {
		t.Fatalf("whole steps by world size %v: want the world to shrink from 4 to 2 and grow back", worlds)
	}
	t.Logf("whole steps by world size: %v", worlds)
	checkExactlyOnce(t, logs, size, epochs, global)
}
