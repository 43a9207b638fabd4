package python

import (
	"encoding/json"
	"os/exec"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/roverml/rover/internal/shard"
)

// TestOrderMatchesGo checks that the Python package computes the same epoch
// orders and rank batches as the master's shard package, bit for bit: ranks
// and master must agree on which samples a position means.
func TestOrderMatchesGo(t *testing.T) {
	script := `
import json, sys
sys.path.insert(0, ".")
from rover._order import epoch_order, rank_batch
out = {"orders": [], "batches": []}
for size, epoch, seed in [(1, 0, 0), (10, 0, 1), (10, 1, 1), (97, 3, 12345678901234567890), (1000, 2, 42)]:
    out["orders"].append(list(epoch_order(size, epoch, True, seed)))
cache = {}
order = lambda e: cache.setdefault(e, epoch_order(53, e, True, 9))
for tail in ("drop", "pad"):
    pos = (0, 0)
    for world in [3, 3, 1, 5, 2, 4, 4, 4, 4, 4, 4]:
        for r in range(world):
            idx, nxt = rank_batch(53, 4, 3, order, pos, world, r, tail)
            out["batches"].append([idx, list(nxt)])
        if idx is None:
            break
        pos = nxt
print(json.dumps(out))
`
	cmd := exec.Command("python3", "-c", script)
	raw, err := cmd.Output()
	if err != nil {
		t.Fatalf("python3: %v", err)
	}
	var got struct {
		Orders  [][]int64       `json:"orders"`
		Batches [][]interface{} `json:"batches"`
	}
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	var want [][]int64
	for _, c := range []struct {
		size  int64
		epoch int
		seed  uint64
	}{{1, 0, 0}, {10, 0, 1}, {10, 1, 1}, {97, 3, 12345678901234567890}, {1000, 2, 42}} {
		o := shard.EpochOrder(shard.Dataset{Size: c.size, Shuffle: true, Seed: c.seed}, c.epoch)
		want = append(want, o.AppendRange(nil, 0, c.size))
	}
	if diff := cmp.Diff(want, got.Orders); diff != "" {
		t.Errorf("epoch orders differ (-go +python):\n%s", diff)
	}
	ds := shard.Dataset{Name: "d", Size: 53, BatchSize: 4, Epochs: 3, Shuffle: true, Seed: 9, Mode: shard.Sync}
	var wantBatches [][]interface{}
	for _, tail := range []shard.TailPolicy{shard.DropTail, shard.PadTail} {
		pos := shard.Position{}
		var idx []int64
		for _, world := range []int{3, 3, 1, 5, 2, 4, 4, 4, 4, 4, 4} {
			var next shard.Position
			var ok bool
			for r := 0; r < world; r++ {
				idx, next, ok = shard.RankBatch(ds, shard.EpochOrder(ds, pos.Epoch), pos, world, r, tail)
				var jidx interface{}
				if ok {
					l := make([]interface{}, len(idx))
					for i, v := range idx {
						l[i] = float64(v)
					}
					jidx = l
				}
				wantBatches = append(wantBatches, []interface{}{jidx, []interface{}{float64(next.Epoch), float64(next.Consumed)}})
			}
			if !ok {
				break
			}
			pos = next
		}
	}
	if diff := cmp.Diff(wantBatches, got.Batches); diff != "" {
		t.Errorf("rank batches differ (-go +python):\n%s", diff)
	}
}
