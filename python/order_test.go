package python

import (
	"encoding/json"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/roverml/rover/internal/shard"
)

// orderCase is one shuffled order both sides compute: whole for small
// sizes, at sampled positions for large ones.
type orderCase struct {
	Size  int64   `json:"size"`
	Epoch int     `json:"epoch"`
	Seed  uint64  `json:"seed"`
	At    []int64 `json:"at,omitempty"` // nil: every position
}

// orderCases covers sizes 1, 2, 3, odd sizes, powers of two and their
// neighbours (where the Feistel domain changes), and large sizes up to
// shard.MaxSize, with seeds that use all 64 bits.
func orderCases() []orderCase {
	var cs []orderCase
	seeds := []uint64{0, 1, 42, 12345678901234567890, 1<<64 - 1}
	small := []int64{1, 2, 3, 4, 5, 7, 10, 15, 16, 17, 31, 33, 63, 64, 65, 97, 255, 256, 257, 1000, 1023, 1024, 1025, 4097}
	for i, n := range small {
		cs = append(cs, orderCase{Size: n, Epoch: i % 4, Seed: seeds[i%len(seeds)]})
	}
	large := []int64{1<<20 - 1, 1 << 20, 1<<20 + 1, 1<<31 + 11, 1<<32 - 1, 1 << 32, 1<<32 + 1, 1<<40 + 3, 1 << 48, shard.MaxSize - 1, shard.MaxSize}
	for i, n := range large {
		var at []int64
		for k := range int64(16) {
			at = append(at, k, n-1-k, n/17*(k+1)+k)
		}
		slices.Sort(at)
		cs = append(cs, orderCase{Size: n, Epoch: 1 + i%3, Seed: seeds[(i+2)%len(seeds)], At: slices.Compact(at)})
	}
	return cs
}

// TestOrderMatchesGo checks that the Python package computes the same epoch
// orders and rank batches as the master's shard package, bit for bit: ranks
// and master must agree on which samples a position means.
func TestOrderMatchesGo(t *testing.T) {
	cases := orderCases()
	in, err := json.Marshal(cases)
	if err != nil {
		t.Fatal(err)
	}
	script := `
import json, sys
sys.path.insert(0, ".")
from rover._order import epoch_order, rank_batch
out = {"orders": [], "batches": []}
for c in json.load(sys.stdin):
    o = epoch_order(c["size"], c["epoch"], True, c["seed"])
    assert len(o) == c["size"]
    at = c.get("at")
    out["orders"].append(list(o) if at is None else [o[i] for i in at])
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
	cmd.Stdin = strings.NewReader(string(in))
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
	for _, c := range cases {
		o := shard.EpochOrder(shard.Dataset{Size: c.Size, Shuffle: true, Seed: c.Seed}, c.Epoch)
		if c.At == nil {
			want = append(want, o.AppendRange(nil, 0, c.Size))
			continue
		}
		var s []int64
		for _, i := range c.At {
			s = append(s, o.At(i))
		}
		want = append(want, s)
	}
	if len(got.Orders) != len(want) {
		t.Fatalf("python computed %d orders, want %d", len(got.Orders), len(want))
	}
	for i, c := range cases {
		if diff := cmp.Diff(want[i], got.Orders[i]); diff != "" {
			t.Errorf("order of size %d, epoch %d, seed %d differs (-go +python):\n%s", c.Size, c.Epoch, c.Seed, diff)
		}
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
