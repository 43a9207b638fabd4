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

// timedDDPScript trains a small model with DDP (gloo, several gradient
// buckets) for a few steps on seeded per-rank data, with rover._colltime
// installed before torch when TIMED=1, and prints on rank 0 the final
// parameters' bytes in hex, the collectives the hook timed and whether DDP
// runs the timing hook.
const timedDDPScript = `
import os
if os.environ["TIMED"] == "1":
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
for _ in range(5):
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
    print("hooked", getattr(ddp, "_rover_hooked", False))
dist.destroy_process_group()
`

// TestTimedDDPMatchesStockDDP: with collective timing, stock DDP's
// gradient reduction (which the timing replaces by its own hook) gives
// bit for bit the parameters that DDP's built-in C++ reduction gives, on a
// world of 3 (whose 1/3 scaling is inexact), and the hook did time the
// buckets; and every rank exits 0, run after run.
func TestTimedDDPMatchesStockDDP(t *testing.T) {
	dir := t.TempDir()
	if _, err := Extract(dir); err != nil {
		t.Fatal(err)
	}
	run := func(timed string) (params, count, hooked string) {
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
				cmd := pythonCmd(ctx, t, timedDDPScript, []string{"PYTHONPATH=" + dir, "TIMED=" + timed,
					"MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + port, fmt.Sprint("RANK=", r), fmt.Sprint("WORLD_SIZE=", world)})
				out, err := cmd.CombinedOutput()
				outs[r], errs[r] = string(out), err
			}()
		}
		wg.Wait()
		for r, err := range errs {
			if err != nil {
				t.Fatalf("TIMED=%s rank %d: %v\n%s", timed, r, err, outs[r])
			}
		}
		for _, line := range strings.Split(outs[0], "\n") {
			k, v, _ := strings.Cut(line, " ")
			switch k {
			case "params":
				params = v
			case "timed":
				count = v
			case "hooked":
				hooked = v
			}
		}
		if params == "" {
			t.Fatalf("TIMED=%s: rank 0 printed no parameters:\n%s", timed, outs[0])
		}
		return params, count, hooked
	}
	stock, _, stockHooked := run("0")
	// Several timed runs: a rank that ends while torch's threads still hold
	// the hook's callbacks aborted at exit in some of them (exit 134).
	for range 4 {
		timed, count, hooked := run("1")
		if stockHooked != "False" || hooked != "True" {
			t.Fatalf("DDP ran the timing hook: %s without timing, %s with it; want False and True", stockHooked, hooked)
		}
		if count == "" || count == "0" {
			t.Errorf("the timing hook timed %q collectives", count)
		}
		if timed != stock {
			t.Fatalf("with collective timing DDP trained other parameters than without it")
		}
	}
}
