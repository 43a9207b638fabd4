package python

import (
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// ddpTimingScript drives rover._ddptiming's rule with a fake clock and a
// fake DistributedDataParallel (no torch): each scenario patches a fresh
// fake DDP class, runs forward calls at the given step intervals, and
// prints what happened as JSON: at which forward call Rover's hook was
// registered (0: never), how often registration was tried, whether the
// buckets are timed, and the DDP step the clock reports.
const ddpTimingScript = `
import io, json, os, pickle, sys, types

import rover._colltime as ct
import rover._ddptiming as dt

now, cpu = [100.0], [7.0]
dt._now, dt._cpu = (lambda: now[0]), (lambda: cpu[0])

WORLD = object()
c10d = types.SimpleNamespace(GroupMember=types.SimpleNamespace(WORLD=WORLD), _pg_group_ranks={},
                             get_world_size=lambda group=None: 2, backend="gloo")
c10d.get_backend = lambda group=None: c10d.backend
c10d.all_reduce = lambda t, op=None, group=None, async_op=False: None

class Param:
    def __init__(self, nbytes, grad=True):
        self.nbytes, self.requires_grad = nbytes, grad
    def numel(self):
        return self.nbytes // 4
    def element_size(self):
        return 4

def fake_ddp_module(buckets="1", fail=False, logging=True, params=(), cap=25 << 20):
    class DDP:
        def __init__(self):
            self.process_group = WORLD
            self.hooks, self.tries, self.calls = [], 0, 0
            self.bucket_bytes_cap = cap
            self.module = types.SimpleNamespace(parameters=lambda: list(params))
            if logging:
                self._get_ddp_logging_data = lambda: {"bucket_sizes": buckets[0] if isinstance(buckets, list) else buckets,
                                                      **({"rebuilt_bucket_sizes": buckets[1]} if isinstance(buckets, list) and self.calls > 1 else {})}
        def register_comm_hook(self, state, hook):
            self.tries += 1
            if fail:
                raise RuntimeError("register_comm_hook must be called before the first forward (another torch)")
            if self.hooks:
                raise RuntimeError("register_comm_hook or register_builtin_comm_hook can only be called once.")
            self.hooks.append(getattr(hook, "__name__", "?"))
        def _register_builtin_comm_hook(self, kind):
            self.hooks.append("builtin")
        def forward(self, x):
            self.calls += 1
            return x * 2
    return types.SimpleNamespace(DistributedDataParallel=DDP)

def run(intervals, mode="adaptive", **kw):
    """Forward calls at the intervals: a list of (count, seconds), or of
    (count, wall-clock seconds, CPU seconds) where they differ."""
    mod = fake_ddp_module(**kw)
    dt.patch(mod, c10d, mode)
    ddp = mod.DistributedDataParallel()
    out = []
    for count, seconds, *busy in intervals:
        for _ in range(count):
            now[0] += seconds
            cpu[0] += busy[0] if busy else seconds
            out.append(ddp.forward(3))
    st = ddp.__dict__["_rover_ddp"]
    return {"registered_at": st.registered_at, "tries": ddp.tries, "hooks": ddp.hooks, "timed": st.timed,
            "outputs_ok": all(o == 6 for o in out) and ddp.calls == len(out), "clock": list(ct.clock.ddp)}

r = {}
# Stock DDP, one bucket: the hook costs 150 us a step, so it is registered
# once most of the last 16 steps take 15 ms or more.
r["tiny"] = run([(2000, 0.0012)])
r["slow"] = run([(40, 0.050)])
r["slows_down"] = run([(200, 0.0012), (40, 0.85)])
r["just_under"] = run([(200, 0.0149)])
r["half_slow"] = run([(100, 0.0012), (1, 0.05)] * 100)  # a long step in a hundred: the median stays short
# Long in wall-clock time but not in CPU time (a process short of CPU
# pays the hook's CPU stretched alike): no hook. Long in both (CPU time
# above wall-clock time: several threads): the hook.
r["starved"] = run([(100, 0.050, 0.0012)])
r["threads"] = run([(100, 0.020, 0.080)])
# Four buckets: 60 ms is the threshold. DDP rebuilds its buckets after the
# first step: the rule reads them again before it registers.
r["four_buckets_50ms"] = run([(100, 0.050)], buckets="a, b, c, d")
r["four_buckets_100ms"] = run([(100, 0.100)], buckets="a, b, c, d")
r["rebuilt_to_four_50ms"] = run([(100, 0.050)], buckets=["1000", "1, 2, 3, 4"])
# No logging data: the buckets are estimated from the parameters (60 MiB
# at 25 MiB a bucket after the first MiB: 4 buckets).
r["estimated_four_50ms"] = run([(100, 0.050)], logging=False, params=[Param(30 << 20), Param(30 << 20), Param(8 << 20, grad=False)])
r["estimated_four_70ms"] = run([(100, 0.070)], logging=False, params=[Param(30 << 20), Param(30 << 20)])
r["estimate"] = [dt.estimate_buckets(types.SimpleNamespace(module=types.SimpleNamespace(parameters=lambda: ps), bucket_bytes_cap=cap))
                 for ps, cap in (([Param(1000)], 25 << 20), ([Param(1 << 20)], 25 << 20), ([Param((1 << 20) + 4)], 25 << 20),
                                 ([Param(60 << 20)], 25 << 20), ([Param(10 << 20)], 1 << 20))]
# ROVER_COLLECTIVE_TIMING=always: at the first forward call, whatever the cost.
r["always_tiny"] = run([(50, 0.0012)], mode="always")
# A registration that fails leaves DDP untimed and working, tried once.
r["fails"] = run([(100, 0.050)], fail=True)
r["fails_always"] = run([(10, 0.001)], mode="always", fail=True)
# Another backend: Rover's hook reduces with gloo and nccl only.
c10d.backend = "mpi"
r["mpi"] = run([(100, 0.050)])
c10d.backend = "gloo"

# The script's own hook is wrapped (timed), a C++ one left alone; either
# settles it, also once forward calls began.
def own(mode, builtin, after=0):
    mod = fake_ddp_module()
    dt.patch(mod, c10d, mode)
    ddp = mod.DistributedDataParallel()
    for _ in range(after):
        now[0] += 0.001
        ddp.forward(1)
    if builtin:
        ddp._register_builtin_comm_hook("ALLREDUCE")
    else:
        ddp.register_comm_hook(None, lambda state, bucket: None)
    for _ in range(40):
        now[0] += 0.05
        ddp.forward(1)
    st = ddp.__dict__["_rover_ddp"]
    return [ddp.hooks, st.timed, st.registered_at, ct.clock.ddp[2]]
r["own_hook"] = own("adaptive", False)
r["own_hook_later"] = own("adaptive", False, after=5)
r["builtin_hook"] = own("always", True)

# The meter's median, and a pickled DDP's state (its meter refers back to
# the model) carries none.
m = dt.StepMeter(lambda: 1)
for t in (0.0, 0.01, 0.03, 0.06):
    m.forward(t, 2 * t)
st = pickle.loads(pickle.dumps(dt._State("world")))
r["meter"] = [round(m.median(), 6), round(m.threshold, 9), st.group, st.meter]

# The progress report carries the DDP step once, when it changed.
import rover.progress as p
os.environ["ROVER_AGENT_SOCKET"] = "/nonexistent"
sent = []
p._agent.call = lambda method, req, timeout=None: sent.append(req["progress"])
p._schedule = lambda delay, fn: None
def collective():
    ct.clock.end(ct.clock.begin("all_reduce", 4, "world"))
collective()
p.step(1)
collective()
p._reporter.sent_at = None
p.step(2)  # DDP's buckets untimed: no split of the step into compute and wait
ct.clock.ddp_step("world", 41, True)
collective()
p._reporter.sent_at = None
p.step(3)
r["reports"] = [[s.get("ddpStep"), s.get("collectives")] for s in sent]
print(json.dumps(r, sort_keys=True))
`

// TestDDPTimingRule checks rover._ddptiming's rule for stock DDP with
// fake clocks and a fake DDP: tiny steps never register Rover's timed hook;
// steps long enough that its cost per bucket is under 1% of one register
// it (once most of the last 16 are); a job whose steps slow down registers
// it later; steps long in wall-clock time but short in CPU time (a process
// short of CPU) do not; more buckets need longer steps, read from DDP after its
// rebuild or estimated from the parameters; ROVER_COLLECTIVE_TIMING=always
// registers at the first forward call; a failed registration leaves DDP
// untimed and working, tried once; a script's own hook is timed, a C++ one
// left alone; and the progress report carries the DDP step, and splits
// the step into compute and wait only where DDP's buckets are timed.
func TestDDPTimingRule(t *testing.T) {
	dir := t.TempDir()
	if _, err := Extract(dir); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("python3", "-c", ddpTimingScript)
	cmd.Env = append(os.Environ(), "PYTHONPATH="+dir, "LOCAL_RANK=0", "RANK=0")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python3: %v\n%s", err, out)
	}
	type result struct {
		RegisteredAt int      `json:"registered_at"`
		Tries        int      `json:"tries"`
		Hooks        []string `json:"hooks"`
		Timed        bool     `json:"timed"`
		OutputsOK    bool     `json:"outputs_ok"`
		Clock        []any    `json:"clock"`
	}
	var got map[string]json.RawMessage
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("output: %v\n%s", err, out)
	}
	const rover = "rover_timed_allreduce_hook"
	never := func(forwards float64) result {
		return result{OutputsOK: true, Hooks: []string{}, Clock: []any{"world", forwards, false}}
	}
	at := func(forward int, forwards float64) result {
		return result{RegisteredAt: forward, Tries: 1, Hooks: []string{rover}, Timed: true, OutputsOK: true, Clock: []any{"world", forwards, true}}
	}
	want := map[string]result{
		"tiny":       never(2000),
		"slow":       at(10, 40), // 9 long intervals of 16 after the first call
		"slows_down": at(209, 240),
		"just_under": never(200),
		"half_slow":  never(10100),
		"starved":    never(100),
		"threads":    at(10, 100),
		// 4 buckets: 60 ms.
		"four_buckets_50ms":    never(100),
		"four_buckets_100ms":   at(10, 100),
		"rebuilt_to_four_50ms": never(100),
		"estimated_four_50ms":  never(100),
		"estimated_four_70ms":  at(10, 100),
		"always_tiny":          at(1, 50),
		"fails":                {Tries: 1, Hooks: []string{}, OutputsOK: true, Clock: []any{"world", 100.0, false}},
		"fails_always":         {Tries: 1, Hooks: []string{}, OutputsOK: true, Clock: []any{"world", 10.0, false}},
		"mpi":                  never(100),
	}
	for name, w := range want {
		var g result
		if err := json.Unmarshal(got[name], &g); err != nil {
			t.Fatalf("%s: %v in %s", name, err, got[name])
		}
		if diff := cmp.Diff(w, g); diff != "" {
			t.Errorf("%s (-want +got):\n%s", name, diff)
		}
	}
	others := map[string]string{
		"estimate":       `[1,1,2,4,10]`,
		"own_hook":       `[["rover_timed_hook"],true,0,true]`,
		"own_hook_later": `[["rover_timed_hook"],true,0,true]`,
		"builtin_hook":   `[["builtin"],false,0,false]`,
		"meter":          `[0.02,0.015,"world",null]`,
		"reports": `[[{"bucketsTimed":false,"forwards":"40","group":"world"},null],[null,null],` +
			`[{"bucketsTimed":true,"forwards":"41","group":"world"},"1"]]`,
	}
	for name, w := range others {
		var g any
		if err := json.Unmarshal(got[name], &g); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		b, _ := json.Marshal(g)
		if string(b) != w {
			t.Errorf("%s: got %s, want %s", name, b, w)
		}
	}
}

// collectiveTimingModeScript installs collective timing as a worker's
// startup hook does, with fake torch modules already loaded, and prints
// whether DDP was patched, the mode, and the forward call at which a DDP
// with tiny steps got Rover's hook (0: never).
const collectiveTimingModeScript = `
import sys, types
WORLD = object()
c10d = types.ModuleType("torch.distributed.distributed_c10d")
c10d.GroupMember = types.SimpleNamespace(WORLD=WORLD)
c10d.get_backend = lambda group=None: "gloo"
c10d.get_world_size = lambda group=None: 2
def all_reduce(t, op=None, group=None, async_op=False):
    return None
c10d.all_reduce = all_reduce
class DDP:
    process_group = WORLD
    def register_comm_hook(self, state, hook):
        self.hook = hook.__name__
    def _register_builtin_comm_hook(self, kind):
        pass
    def forward(self, x):
        return x
ddp_mod = types.ModuleType("torch.nn.parallel.distributed")
ddp_mod.DistributedDataParallel = DDP
torch = types.ModuleType("torch")
dist = types.ModuleType("torch.distributed")
dist.distributed_c10d, torch.distributed = c10d, dist
sys.modules.update({"torch": torch, "torch.distributed": dist, "torch.distributed.distributed_c10d": c10d,
                    "torch.nn.parallel.distributed": ddp_mod})
import rover._colltime as ct
import rover._ddptiming as dt
now = [0.0]
dt._now = dt._cpu = lambda: now[0]
ct.install()
d = DDP()
for _ in range(30):
    now[0] += 0.001
    d.forward(1)
st = d.__dict__.get("_rover_ddp")
print(hasattr(DDP.forward, "__wrapped__"), ct._mode, st.registered_at if st else None, getattr(d, "hook", None))
`

// TestCollectiveTimingModes: ROVER_COLLECTIVE_TIMING=0 leaves torch
// untouched; unset or 1 is the adaptive rule (tiny steps: no hook);
// always registers Rover's hook at the first forward call;
// ROVER_COLLECTIVE_TIMING_HOOK_US replaces the cost the rule assumes;
// another value warns on stderr and counts as the default (rover run
// refuses it before).
func TestCollectiveTimingModes(t *testing.T) {
	dir := t.TempDir()
	if _, err := Extract(dir); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ env, hookUS, want, stderr string }{
		{"", "", "True adaptive 0 None", ""},
		{"1", "", "True adaptive 0 None", ""},
		{"always", "", "True always 1 rover_timed_allreduce_hook", ""},
		{"0", "", "False adaptive None None", ""},
		{"on", "", "True adaptive 0 None", "rover: ROVER_COLLECTIVE_TIMING='on': want 0 (off), 1 (the default: stock DDP's buckets timed where that costs under 1% of a step) or always; using 1\n"},
		// Told that the hook costs 1 us a bucket, 1 ms steps are long enough.
		{"1", "1", "True adaptive 10 rover_timed_allreduce_hook", ""},
		{"1", "-5", "True adaptive 0 None", "rover: ROVER_COLLECTIVE_TIMING_HOOK_US='-5': want microseconds, 0 to 1e9; using the default\n"},
	} {
		cmd := exec.Command("python3", "-c", collectiveTimingModeScript)
		cmd.Env = append(os.Environ(), "PYTHONPATH="+dir, "ROVER_COLLECTIVE_TIMING="+tt.env, "ROVER_COLLECTIVE_TIMING_HOOK_US="+tt.hookUS)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("ROVER_COLLECTIVE_TIMING=%q: %v\n%s%s", tt.env, err, out, stderr.String())
		}
		if got := strings.TrimSpace(string(out)); got != tt.want || stderr.String() != tt.stderr {
			t.Errorf("ROVER_COLLECTIVE_TIMING=%q: got %q, stderr %q; want %q, stderr %q", tt.env, got, stderr.String(), tt.want, tt.stderr)
		}
	}
}
