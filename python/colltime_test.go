package python

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestCudaTimer runs rover._colltime's GPU path on this CPU machine with a
// fake torch.cuda, whose events complete when the test says: a synchronous
// collective on a "GPU" tensor starts the CUDA timer and wraps the
// matmuls; a matmul or nn.functional.linear on a GPU tensor is timed with
// its floating-point operations, one on a CPU tensor is not; take() sums
// only the pairs whose end event completed (without waiting) and keeps the
// rest; past MAX_PENDING nothing more is timed; an event that cannot be
// recorded leaves the operation untimed, not failed; and the progress
// report carries the sums.
func TestCudaTimer(t *testing.T) {
	dir := t.TempDir()
	if _, err := Extract(dir); err != nil {
		t.Fatal(err)
	}
	script := `
import json, os, sys, types

gpu_ms = [0.0]   # the fake GPU's clock
events = []

class Event:
    def __init__(self, enable_timing=False):
        assert enable_timing
        self.at, self.complete = None, False
        events.append(self)
    def record(self):
        self.at = gpu_ms[0]
    def query(self):
        return self.complete
    def elapsed_time(self, end):
        assert self.complete and end.complete
        return end.at - self.at

class Tensor:
    def __init__(self, *shape, cuda=True):
        self.shape, self.is_cuda = shape, cuda
    def numel(self):
        n = 1
        for d in self.shape:
            n *= d
        return n
    def element_size(self):
        return 4
    def dim(self):
        return len(self.shape)

def matmul(a, b):
    gpu_ms[0] += 2.0
    return Tensor(*(a.shape[:-1] + b.shape[-1:]), cuda=a.is_cuda)

def linear(x, w, bias=None):
    gpu_ms[0] += 3.0
    return Tensor(*(x.shape[:-1] + w.shape[:1]), cuda=x.is_cuda)

torch = types.ModuleType("torch")
torch.cuda = types.SimpleNamespace(Event=Event)
torch.matmul = matmul
functional = types.ModuleType("torch.nn.functional")
functional.linear = linear
sys.modules["torch"], sys.modules["torch.nn.functional"] = torch, functional

import rover._colltime as ct
c10d = types.SimpleNamespace(GroupMember=types.SimpleNamespace(WORLD=object()))
def all_reduce(t, op=None, group=None, async_op=False):
    gpu_ms[0] += 5.0
all_reduce = ct._wrap_collective(c10d, "all_reduce", all_reduce)
out = {}

all_reduce(Tensor(10, cuda=False))          # a CPU collective: no GPU timing
out["cpu_collective_starts_timer"] = ct.clock.cuda is not None
all_reduce(Tensor(10))                      # on the GPU: the timer starts, matmuls are wrapped
timer = ct.clock.cuda
out["wrapped"] = [hasattr(torch.matmul, "__wrapped__"), hasattr(functional.linear, "__wrapped__")]
torch.matmul(Tensor(8, 16, 32), Tensor(32, 64))   # 2*8*16*32*64 flops, 2 ms
torch.matmul(Tensor(4, 4, cuda=False), Tensor(4, 4, cuda=False))  # CPU: untimed
functional.linear(Tensor(16, 32), Tensor(128, 32))  # 2*16*32*128 flops, 3 ms
out["pending"] = len(timer._pending)
out["take_before_completion"] = timer.take()
for e in events[:4]:                        # the collective's and the first matmul's events complete
    e.complete = True
out["take_partly"] = timer.take()
for e in events:
    e.complete = True
out["take_rest"] = timer.take()
out["take_again"] = timer.take()

timer.MAX_PENDING = 2
for _ in range(3):
    torch.matmul(Tensor(2, 2), Tensor(2, 2))
out["bounded"] = [len(timer._pending), timer.dropped]
for e in events:
    e.complete = True
timer.MAX_PENDING = 1024
broken = [True]
def record(self):
    if broken[0]:
        raise RuntimeError("operation not permitted when stream is capturing")
Event.record = record
out["broken_events"] = [torch.matmul(Tensor(2, 2), Tensor(2, 2)).shape, all_reduce(Tensor(4)), timer.dropped]
broken[0] = False

import rover.progress as p
os.environ["ROVER_AGENT_SOCKET"] = "/nonexistent"
sent = []
p._agent.call = lambda method, req, timeout=None: sent.append(req["progress"])
p._schedule = lambda delay, fn: None
p.step(1)
out["report"] = {k: v for k, v in sent[0].items() if k in ("gpuCollectiveSeconds", "matmulSeconds", "matmulFlops")}
print(json.dumps(out, sort_keys=True))
`
	cmd := exec.Command("python3", "-c", script)
	cmd.Env = append(os.Environ(), "PYTHONPATH="+dir, "LOCAL_RANK=0", "RANK=0")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python3: %v\n%s", err, out)
	}
	got := strings.TrimSpace(string(out))
	// The collective took 5 ms of "GPU" time, the matmul 2 ms with
	// 2*8*16*32*64 = 524288 flops, the linear 3 ms with 2*16*32*128 =
	// 131072; the bounded matmuls of 4 ms together reach the report.
	want := `{"bounded": [2, 1], "broken_events": [[2, 2], null, 3], "cpu_collective_starts_timer": false, "pending": 3, ` +
		`"report": {"gpuCollectiveSeconds": 0.0, "matmulFlops": "32", "matmulSeconds": 0.004}, ` +
		`"take_again": [0.0, 0.0, 0], "take_before_completion": [0.0, 0.0, 0], "take_partly": [0.005, 0.002, 524288], ` +
		`"take_rest": [0.0, 0.003, 131072], "wrapped": [true, true]}`
	if got != want {
		t.Errorf("CUDA timer:\n got %s\nwant %s", got, want)
	}
}
