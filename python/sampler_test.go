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
