package python

import (
	"os/exec"
	"testing"
)

// TestElasticSamplerAcrossWorldSizes trains an epoch with 4 ranks for 3
// steps, saves the position, and finishes it with 2 ranks restored from it:
// every sample of the epoch is trained exactly once, except a tail that
// cannot fill a global batch (drop), or at least once (pad).
func TestElasticSamplerAcrossWorldSizes(t *testing.T) {
	script := `
import sys
sys.path.insert(0, ".")
from rover.data import ElasticSampler
for tail in ("drop", "pad"):
    N, B = 103, 4
    seen = []
    first = [ElasticSampler("d", N, B, shuffle=True, seed=7, tail=tail, rank=r, world_size=4) for r in range(4)]
    its = [iter(s) for s in first]
    for step in range(3):
        for r in range(4):
            seen += [next(its[r]) for _ in range(B)]
    state = first[0].state_dict(3)
    assert state["consumed"] == 48, state
    second = [ElasticSampler("d", N, B, shuffle=True, seed=7, tail=tail, rank=r, world_size=2) for r in range(2)]
    for s in second:
        s.load_state_dict(state)
        n = len(s)
        assert len(list(iter(s))) == n, (n,)
    for s in second:
        s.load_state_dict(state)
        seen += list(iter(s))
    if tail == "drop":
        assert len(seen) == len(set(seen)) == 96, (len(seen), len(set(seen)))
    else:
        assert set(seen) == set(range(N)), sorted(set(range(N)) - set(seen))
print("ok")
`
	out, err := exec.Command("python3", "-c", script).CombinedOutput()
	if err != nil || string(out) != "ok\n" {
		t.Fatalf("python3: %v\n%s", err, out)
	}
}

// TestElasticSamplerRefusesOldOrders: a position part-way through a shuffled
// epoch saved by an earlier Rover (no "order" key: its shuffled orders were
// other permutations) is refused with a message saying what to do; at an
// epoch boundary, unshuffled, or saved by this Rover, it loads.
func TestElasticSamplerRefusesOldOrders(t *testing.T) {
	script := `
import sys
sys.path.insert(0, ".")
from rover.data import ElasticSampler
s = ElasticSampler("d", 100, 4, shuffle=True, seed=7, rank=0, world_size=2)
it = iter(s)
[next(it) for _ in range(8)]
state = s.state_dict(2)
assert state["order"] == 2, state
s.load_state_dict(state)
old = {"name": "d", "epoch": 3, "consumed": 16}
try:
    s.load_state_dict(old)
    raise SystemExit("an old position part-way through a shuffled epoch loaded")
except ValueError as e:
    msg = str(e)
    for want in ("part-way through shuffled epoch 3 (16 of 100", "earlier Rover", "{'epoch': 4, 'consumed': 0}"):
        assert want in msg, (want, msg)
s.load_state_dict({"name": "d", "epoch": 4, "consumed": 0})
assert s.position == (4, 0), s.position
ElasticSampler("d", 100, 4, shuffle=False, rank=0, world_size=2).load_state_dict(old)
print("ok")
`
	out, err := exec.Command("python3", "-c", script).CombinedOutput()
	if err != nil || string(out) != "ok\n" {
		t.Fatalf("python3: %v\n%s", err, out)
	}
}
