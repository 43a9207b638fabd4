package python

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// timedDDPScript trains a small model with DDP (gloo; one gradient
// bucket: DDP's first takes up to 1 MiB) for 14 steps on seeded per-rank
// data, with rover._colltime installed before torch unless TIMED=0 (as
// ROVER_COLLECTIVE_TIMING=$TIMED would), and prints on rank 0 the final
// parameters' bytes in hex, the collectives the hook timed and the forward
// call at which Rover's hook was registered (0: never). HOOK_US is the
// hook's cost per bucket that the adaptive rule assumes: 0.001 (1 ns)
// makes it register the hook in the middle of training (at the 10th
// forward call), 1e9 (1000 s) never.
const timedDDPScript = `
import os
if os.environ["TIMED"] != "0":
    os.environ["ROVER_COLLECTIVE_TIMING"] = os.environ["TIMED"]
    os.environ["ROVER_COLLECTIVE_TIMING_HOOK_US"] = os.environ["HOOK_US"]
    from rover import _colltime
    _colltime.install()
import torch, torch.distributed as dist
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 3))
ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.1)
opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
gen = torch.Generator().manual_seed(100 + rank)
for _ in range(14):
    x = torch.randn(16, 64, generator=gen)
    loss = ddp(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
if rank == 0:
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    from rover import _colltime
    print("params", flat.numpy().tobytes().hex())
    print("timed", _colltime.clock.count)
    st = ddp.__dict__.get("_rover_ddp")
    print("registered", st.registered_at if st else 0)
dist.destroy_process_group()
`

// TestTimedDDPMatchesStockDDP: with collective timing, stock DDP's
// gradient reduction (which the timing replaces by its own hook) gives
// bit for bit the parameters that DDP's built-in C++ reduction gives, on a
// world of 3 (whose 1/3 scaling is inexact), whether the hook is
// registered at the first forward call (ROVER_COLLECTIVE_TIMING=always)
// or in the middle of training (the adaptive rule, told that the hook
// costs 1 ns), and the hook did time the buckets; told that it costs 1000
// s, the rule registers none. Every rank exits 0, run after run.
func TestTimedDDPMatchesStockDDP(t *testing.T) {
	dir := t.TempDir()
	if _, err := Extract(dir); err != nil {
		t.Fatal(err)
	}
	run := func(timed, hookUS string) (params, count, registered string) {
		t.Helper()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := fmt.Sprint(ln.Addr().(*net.TCPAddr).Port)
		ln.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		const world = 3
		outs := make([]string, world)
		errs := make([]error, world)
		var wg sync.WaitGroup
		for r := range world {
			wg.Add(1)
			go func() {
				defer wg.Done()
				cmd := pythonCmd(ctx, t, timedDDPScript, []string{"PYTHONPATH=" + dir, "TIMED=" + timed, "HOOK_US=" + hookUS,
					"MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + port, fmt.Sprint("RANK=", r), fmt.Sprint("WORLD_SIZE=", world)})
				out, err := cmd.CombinedOutput()
				outs[r], errs[r] = string(out), err
			}()
		}
		wg.Wait()
		for r, err := range errs {
			if err != nil {
				t.Fatalf("TIMED=%s HOOK_US=%s rank %d: %v\n%s", timed, hookUS, r, err, outs[r])
			}
		}
		for _, line := range strings.Split(outs[0], "\n") {
			k, v, _ := strings.Cut(line, " ")
			switch k {
			case "params":
				params = v
			case "timed":
				count = v
			case "registered":
				registered = v
			}
		}
		if params == "" {
			t.Fatalf("TIMED=%s HOOK_US=%s: rank 0 printed no parameters:\n%s", timed, hookUS, outs[0])
		}
		return params, count, registered
	}
	stock, _, _ := run("0", "")
	// Several timed runs: a rank that ends while torch's threads still hold
	// the hook's callbacks aborted at exit in some of them (exit 134).
	for _, tt := range []struct{ timed, hookUS, registered string }{
		{"always", "", "1"}, {"1", "0.001", "10"}, {"always", "", "1"}, {"1", "0.001", "10"}, {"1", "1e9", "0"},
	} {
		params, count, registered := run(tt.timed, tt.hookUS)
		if registered != tt.registered {
			t.Fatalf("TIMED=%s HOOK_US=%s: Rover's hook registered at forward call %s, want %s", tt.timed, tt.hookUS, registered, tt.registered)
		}
		if timed := registered != "0"; timed && (count == "" || count == "0") {
			t.Errorf("TIMED=%s HOOK_US=%s: the timing hook timed %q collectives", tt.timed, tt.hookUS, count)
		} else if !timed && count != "0" {
			t.Errorf("TIMED=%s HOOK_US=%s: %s collectives timed without the hook, want 0", tt.timed, tt.hookUS, count)
		}
		if params != stock {
			t.Fatalf("TIMED=%s HOOK_US=%s: with collective timing DDP trained other parameters than without it", tt.timed, tt.hookUS)
		}
	}
}
