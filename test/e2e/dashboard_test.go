package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/roverml/rover/internal/dashboard/browsertest"
)

// dashboardScript is a two-rank DDP job that trains until the file stop
// exists (every rank stops at the same step: they agree by an
// all-reduce), reports its steps to Rover, and whose rank 1 raises
// RuntimeError(message) once, when the file crash exists, recorded in its
// error file by torch's @record.
const dashboardScript = `import os, sys, time, torch, torch.distributed as dist
import rover.progress
from torch.distributed.elastic.multiprocessing.errors import record

@record
def main():
    crash, marker, stop, message = sys.argv[1:5]
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = torch.nn.Linear(8, 1)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    step = 0
    while True:
        step += 1
        loss = ddp(torch.randn(4, 8)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        rover.progress.step(step)
        if rank == 1 and os.path.exists(crash) and not os.path.exists(marker):
            open(marker, "w").close()
            raise RuntimeError(message)
        done = torch.tensor([1 if os.path.exists(stop) else 0])
        dist.all_reduce(done)
        if done.item():
            break
        time.sleep(0.2)
    dist.destroy_process_group()

main()
`

// TestDashboardOfARunningJob opens a real job's dashboard (a two-node DDP
// job under rover master --metrics-addr) in a real headless chromium,
// waits for the nodes table and both charts to draw from the live job,
// makes a worker raise an exception whose message is markup, and sees the
// failure row appear without a reload, with the message as text and no
// script run; a screenshot is kept as the test's artifact.
func TestDashboardOfARunningJob(t *testing.T) {
	const evil = `<img src=x onerror="window.__pwned=1">`
	dir := t.TempDir()
	script := filepath.Join(dir, "train.py")
	if err := os.WriteFile(script, []byte(dashboardScript), 0o644); err != nil {
		t.Fatal(err)
	}
	crash, marker, stop := filepath.Join(dir, "crash"), filepath.Join(dir, "crashed"), filepath.Join(dir, "stop")
	addrFile := filepath.Join(dir, "master.metrics")
	c := newCluster(t, "dash", "--metrics-addr", "127.0.0.1:0", "--metrics-addr-file", addrFile)
	var agents []*process
	for _, name := range []string{"node0", "node1"} {
		agents = append(agents, c.agent(name, "--nnodes", "2", "--nproc-per-node", "1", "--rdzv-conf", rdzvConf,
			"--max-restarts", "3", script, crash, marker, stop, evil))
	}
	waitExists(t, addrFile, time.Minute)
	addr, err := os.ReadFile(addrFile)
	if err != nil {
		t.Fatal(err)
	}

	ctx, console := browsertest.Start(t)
	browsertest.Open(t, ctx, "http://"+strings.TrimSpace(string(addr))+"/")
	browsertest.Eval[bool](t, ctx, `window.__loadMark = 'first load'; true`) // a reload would wipe it
	browsertest.WaitFor(t, ctx, "both nodes, live", `document.querySelectorAll('#nodes tbody tr').length === 2 &&
		document.querySelector('#conn').textContent === 'live'`)
	browsertest.WaitFor(t, ctx, "both charts drawn from the job's steps", `['#chart-steprate', '#chart-goodput'].every((id) =>
		Number(document.querySelector(id).dataset.points) >= 2 && document.querySelector(id + ' polyline') !== null) &&
		Number(document.querySelector('#chart-steprate').dataset.last) > 0`)
	if n := browsertest.Eval[int](t, ctx, `document.querySelectorAll('#failures tbody tr.failure').length`); n != 0 {
		t.Fatalf("%d failure rows before any failure", n)
	}

	if err := os.WriteFile(crash, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	browsertest.WaitFor(t, ctx, "the failure row", `document.querySelectorAll('#failures tbody tr.failure').length === 1`)
	row := browsertest.Eval[[]string](t, ctx, `[...document.querySelector('#failures tbody tr.failure').cells].map((c) => c.textContent)`)
	if !strings.Contains(strings.Join(row, "|"), evil) {
		t.Errorf("the failure row %q does not show the exception's message %q as text", row, evil)
	}
	if got := browsertest.Eval[string](t, ctx, `window.__loadMark || 'reloaded'`); got != "first load" {
		t.Errorf("the page reloaded (mark %q): the failure must arrive on the stream", got)
	}
	browsertest.WaitFor(t, ctx, "the job training again, both nodes in the world", `document.querySelectorAll('#nodes tbody tr').length === 2 &&
		Number(document.querySelector('#chart-steprate').dataset.last) > 0`)
	if got := browsertest.Eval[string](t, ctx, `typeof window.__pwned`); got != "undefined" {
		t.Errorf("the worker's exception message ran script in the page: window.__pwned is %s", browsertest.Eval[string](t, ctx, `String(window.__pwned)`))
	}
	if n := browsertest.Eval[int](t, ctx, `document.querySelectorAll('img, [onerror]').length`); n != 0 {
		t.Errorf("the worker's exception message became %d elements in the page", n)
	}
	browsertest.Screenshot(t, ctx, "dashboard.png")

	if err := os.WriteFile(stop, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, a := range agents {
		if code := a.wait(t, jobTimeout); code != 0 {
			t.Fatalf("%s exited %d:\n%s", a.name, code, a.out)
		}
	}
	for _, line := range console.Lines() {
		if strings.HasPrefix(line, "exception") || strings.Contains(line, "Content Security Policy") {
			t.Errorf("the page's console: %s", line)
		}
	}
}
