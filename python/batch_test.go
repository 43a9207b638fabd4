package python

import (
	"os"
	"os/exec"
	"testing"
)

// runOK runs script with python3 (the rover package importable from
// the working directory) and fails the test unless it prints "ok".
func runOK(t *testing.T, script string, env ...string) {
	t.Helper()
	cmd := exec.Command("python3", "-c", script)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil || string(out) != "ok\n" {
		t.Fatalf("python3: %v\n%s", err, out)
	}
}

// TestGlobalBatchAcrossWorldSizes: with global_batch_size=G, for world
// sizes 1 to 5 and both tails, every step's ranks' batches sum to G (the
// shares differ by at most one, the larger ones on the lowest ranks) and
// an epoch trains every position exactly once (less a dropped tail, or
// padded); through world changes mid-epoch (2 → 3 → 1, restored from
// state_dict as a checkpoint would be) too; ElasticBatchSampler yields the
// same batches; the documented per-worker form (batch_size=B) is the
// global form of G = world*B, index for index.
func TestGlobalBatchAcrossWorldSizes(t *testing.T) {
	runOK(t, `
import sys
sys.path.insert(0, ".")
from rover.data import ElasticSampler, ElasticBatchSampler

N, G = 103, 7

def steps_of(samplers, limit=None):
    """Runs the samplers of one world in lockstep; returns each step's batches."""
    its = [iter(ElasticBatchSampler(s)) for s in samplers]
    out = []
    while limit is None or len(out) < limit:
        batches = [next(it, None) for it in its]
        if batches[0] is None:
            assert all(b is None for b in batches), "ranks disagree on the number of steps"
            return out
        out.append(batches)
    return out

def check_steps(steps, world):
    for batches in steps:
        sizes = [len(b) for b in batches]
        assert sum(sizes) == G, (world, sizes)
        assert max(sizes) - min(sizes) <= 1 and sizes == sorted(sizes, reverse=True), (world, sizes)

def check_epoch(seen, tail):
    if tail == "drop":
        assert len(seen) == len(set(seen)) == N // G * G, (len(seen), len(set(seen)))
    else:
        assert set(seen) == set(range(N)), sorted(set(range(N)) - set(seen))
        assert len(seen) == -(-N // G) * G, len(seen)

for tail in ("drop", "pad"):
    for world in range(1, 6):
        ss = [ElasticSampler("d", N, shuffle=True, seed=3, tail=tail, rank=r, world_size=world, global_batch_size=G)
              for r in range(world)]
        assert sum(s.batch_size for s in ss) == G and all(s.local_batch_size == s.batch_size for s in ss)
        assert len(ElasticBatchSampler(ss[0])) == (N // G if tail == "drop" else -(-N // G)), len(ElasticBatchSampler(ss[0]))
        steps = steps_of(ss)
        check_steps(steps, world)
        check_epoch([i for batches in steps for b in batches for i in b], tail)
        # The flat sampler yields the same indices, len() of them.
        flat = [list(iter(ElasticSampler("d", N, shuffle=True, seed=3, tail=tail, rank=r, world_size=world,
                                         global_batch_size=G))) for r in range(world)]
        assert flat == [[i for st in steps for i in st[r]] for r in range(world)]
        assert [ElasticSampler("d", N, tail=tail, rank=r, world_size=world, global_batch_size=G).__len__()
                for r in range(world)] == [len(f) for f in flat]

    # World changes mid-epoch: 2 ranks for 4 steps, 3 ranks for 5, then 1.
    seen, state = [], {"epoch": 0, "consumed": 0}
    for world, limit in ((2, 4), (3, 5), (1, None)):
        ss = [ElasticSampler("d", N, shuffle=True, seed=3, tail=tail, rank=r, world_size=world, global_batch_size=G)
              for r in range(world)]
        for s in ss:
            s.load_state_dict(state)
        steps = steps_of(ss, limit)
        check_steps(steps, world)
        seen += [i for batches in steps for b in batches for i in b]
        if limit is not None:
            state = ss[0].state_dict(limit)
            assert all(s.state_dict(limit) == state for s in ss)
            assert state["epoch"] == 0, state
    check_epoch(seen, tail)

# The documented per-worker batch is the global batch world*B.
for world in (1, 3, 4):
    for r in range(world):
        a = list(ElasticSampler("d", N, 4, shuffle=True, seed=9, rank=r, world_size=world))
        b = list(ElasticSampler("d", N, shuffle=True, seed=9, rank=r, world_size=world, global_batch_size=4 * world))
        assert a == b, (world, r)
        s = ElasticSampler("d", N, 4, rank=r, world_size=world)
        assert (s.batch_size, s.global_batch_size, s.loss_scale) == (4, 4 * world, 1 / 4), s.__dict__

# Bad arguments: a clear error.
for kw, err, want in ((dict(), TypeError, "exactly one"), (dict(batch_size=4, global_batch_size=8), TypeError, "exactly one"),
                      (dict(global_batch_size=2), ValueError, "smaller than the world size 3"),
                      (dict(global_batch_size=0), ValueError, "global_batch_size is 0"),
                      (dict(global_batch_size=6.5), TypeError, "must be an int"),
                      (dict(batch_size=-1), ValueError, "batch_size is -1")):
    try:
        ElasticSampler("d", N, rank=0, world_size=3, **kw)
        raise SystemExit(f"{kw} was accepted")
    except err as e:
        assert want in str(e), (kw, str(e))
try:
    ElasticBatchSampler(range(3))
    raise SystemExit("a range was wrapped")
except TypeError:
    pass
print("ok")
`)
}

// TestSamplesReported runs rover.progress with a fake agent call:
// step(samples=) sums the samples of the steps reported together, a
// repeated call counts once, bad values raise (also outside rover run);
// ElasticSampler's batches report their samples with no call, also when
// checkpoint saves are the steps, and step()'s own samples win over them.
func TestSamplesReported(t *testing.T) {
	dir := t.TempDir()
	if _, err := Extract(dir); err != nil {
		t.Fatal(err)
	}
	runOK(t, `
import os
import rover.progress as p
for bad, err in ((-1, ValueError), (2**40 + 1, ValueError), (1.5, TypeError), ("3", TypeError), (True, TypeError)):
    try:
        p.step(0, samples=bad)  # outside rover run: still checked
        raise SystemExit(f"samples={bad!r} was accepted")
    except err as e:
        assert "samples" in str(e), str(e)
p.step(0, samples=3)
assert p._reporter is None
os.environ["ROVER_AGENT_SOCKET"] = "/nonexistent"
from rover import data
sent = []
def call(method, req, timeout=None):
    if method == "ReportProgress":
        sent.append(req["progress"])
    return {"dataset": req.get("dataset"), "position": {}}
p._agent.call = call
p._schedule = lambda delay, fn: None
now = [100.0]
p.time.monotonic = lambda: now[0]

def report():
    """Sends what is pending now, as the flush timer would."""
    with p._lock:
        p._reporter.send(now[0])
    return sent[-1].get("samples")

# The sampler alone: each batch it yields counts (2 ranks, a global batch of 5: rank 0's share is 3).
s = data.ElasticSampler("d", 50, global_batch_size=5, rank=0, world_size=2)
it = s.batches()
next(it)
assert sent[-1]["samples"] == "3", sent  # the first step goes out at once
next(it); next(it)
assert report() == "6", sent[-1]
# Checkpoint saves are the steps (a better source): the sampler's samples still count.
p._record(1, p.CHECKPOINT)
next(it)
p._record(2, p.CHECKPOINT)
assert report() == "3", sent[-1]
# step() with samples: they win; the sampler's are not added; a repeated call counts once.
p.step(10, samples=8)
next(it)
p.step(10, samples=8)
p.step(11, samples=4)
assert report() == "12", sent[-1]
assert report() is None, sent[-1]  # nothing since: no samples field
class Int:  # an integer type of another library (numpy.int64, a torch integer)
    def __index__(self):
        return 2
p.step(12, samples=Int())
assert report() == "2", sent[-1]
print("ok")
`, "PYTHONPATH="+dir, "LOCAL_RANK=0", "RANK=0")
}
