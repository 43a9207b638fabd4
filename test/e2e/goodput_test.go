package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/client"
)

// goodputScript is a small DDP job: rank 0 saves a torch.save checkpoint
// every 10 steps, every rank logs each life's start (its pid and the step
// it resumed from) and each step it completed, and reports its steps to
// Rover (rover.progress). Each step ends with a sleep of its last
// argument's seconds: longer than the workers' report interval (1s), every
// step is reported when it completes; shorter, a report carries one step in
// several, and the steps since the last report reach the master only with
// the group's end (the agent's LAST_STEP).
const goodputScript = `import os, sys, time, torch, torch.distributed as dist
import rover.progress
dist.init_process_group("gloo")
rank = dist.get_rank()
ckpt, log, total, pause = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
def line(s):
    with open(log, "a") as f:
        f.write(s + "\n")
torch.manual_seed(0)
model = torch.nn.Linear(8, 1)
ddp = torch.nn.parallel.DistributedDataParallel(model)
opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
start = 0
if os.path.exists(ckpt):
    state = torch.load(ckpt)
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    start = state["step"]
line("start rank=%d pid=%d step=%d" % (rank, os.getpid(), start))
for step in range(start + 1, total + 1):
    loss = ddp(torch.randn(4, 8)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 10 == 0:
        if rank == 0:
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step}, ckpt + ".tmp")
            os.replace(ckpt + ".tmp", ckpt)
        dist.barrier()
    line("step rank=%d pid=%d step=%d" % (rank, os.getpid(), step))
    rover.progress.step(step)
    time.sleep(pause)
dist.barrier()
dist.destroy_process_group()
`

// stepLog is what goodputScript's workers logged: each life of each rank
// (by pid) with the step it started from and the highest it completed.
type stepLog struct {
	lives []life // in the order they started
}

type life struct {
	rank, pid, start, high int
}

func readStepLog(t *testing.T, path string) stepLog {
	t.Helper()
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return stepLog{}
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var l stepLog
	byPid := map[int]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var kind string
		var rank, pid, step int
		if _, err := fmt.Sscanf(sc.Text(), "%s rank=%d pid=%d step=%d", &kind, &rank, &pid, &step); err != nil {
			continue
		}
		i, ok := byPid[pid]
		if !ok {
			i = len(l.lives)
			byPid[pid] = i
			l.lives = append(l.lives, life{rank: rank, pid: pid, start: step, high: step})
		}
		l.lives[i].high = max(l.lives[i].high, step)
	}
	return l
}

// generation is the lives of the n-th start of every rank (n from 0).
func (l stepLog) generation(n, ranks int) ([]life, bool) {
	seen := map[int]int{}
	var out []life
	for _, lf := range l.lives {
		if seen[lf.rank] == n {
			out = append(out, lf)
		}
		seen[lf.rank]++
	}
	return out, len(out) == ranks
}

// TestGoodputOfAFaultyJob runs a two-node DDP job of two workers per node,
// SIGKILLs a worker twice and a node's agent once (a new agent replaces it),
// and checks the master's goodput in GetJob: a ratio within (0,1), three
// restarts, each with its phases summing to its downtime, and as many steps
// lost as the workers' own logs show were computed again (at each restart,
// the highest step the old lives completed less the step the new ones
// resumed from the checkpoint). The workers complete about three steps per
// progress report, and each fault comes as soon as every rank logged a
// given step, whether a report carried it or not: the steps completed since
// the last report reach the master only as the agents' LAST_STEP, read
// from the workers' step slots once they exited (a killed worker sends
// nothing).
//
// It holds with or without the agents' lifecycle events: without them the
// first progress report of a round implies the resume (the workers report
// their first step at once), and the phases between the round forming and
// the first step are all "spawn".
func TestGoodputOfAFaultyJob(t *testing.T) {
	dir := t.TempDir()
	script, steps := filepath.Join(dir, "train.py"), filepath.Join(dir, "steps.log")
	if err := os.WriteFile(script, []byte(goodputScript), 0o644); err != nil {
		t.Fatal(err)
	}
	c := newCluster(t, "goodput", "--linger", "5m")
	args := []string{"--nnodes", "2", "--nproc-per-node", "2", "--rdzv-conf", rdzvConf, "--max-restarts", "3",
		script, filepath.Join(dir, "ckpt.pt"), steps, "40", "0.3"}
	a0, a1 := c.agent("node0", args...), c.agent("node1", args...)

	token, err := os.ReadFile(c.tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	hc := client.NewHTTPClient()
	defer hc.CloseIdleConnections()
	mc := client.New(hc, c.addr, strings.TrimSpace(string(token)))
	job := func() *roverv1.GetJobResponse {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		r, err := mc.GetJob(ctx, connect.NewRequest(&roverv1.GetJobRequest{}))
		if err != nil {
			t.Fatalf("GetJob: %v", err)
		}
		return r.Msg
	}

	for gen, fault := range []struct {
		rank, step int
		node       bool
	}{{rank: 1, step: 8}, {rank: 2, step: 18}, {rank: 3, step: 28, node: true}} {
		var victim life
		waitFor(t, jobTimeout, fmt.Sprintf("generation %d at step %d", gen, fault.step), func() bool {
			lives, ok := readStepLog(t, steps).generation(gen, 4)
			if !ok {
				return false
			}
			low := lives[0].high
			for _, l := range lives {
				low = min(low, l.high)
				if l.rank == fault.rank {
					victim = l
				}
			}
			return low >= fault.step
		})
		if fault.node {
			a1.kill(t)
			a1 = c.agent("node1", args...)
		} else if err := syscall.Kill(victim.pid, syscall.SIGKILL); err != nil {
			t.Fatalf("kill rank %d (pid %d): %v", fault.rank, victim.pid, err)
		}
		t.Logf("fault %d: killed %s after step %d", gen+1, map[bool]string{true: "node1's agent", false: "a worker"}[fault.node], victim.high)
	}
	for _, a := range []*process{a0, a1} {
		if code := a.wait(t, jobTimeout); code != 0 {
			t.Fatalf("%s exited %d:\n%s", a.name, code, a.out)
		}
	}

	log := readStepLog(t, steps)
	recomputed := 0
	for gen := 1; gen <= 3; gen++ {
		old, ok1 := log.generation(gen-1, 4)
		lives, ok2 := log.generation(gen, 4)
		if !ok1 || !ok2 {
			t.Fatalf("the step log has no generation %d of 4 ranks: %+v", gen, log.lives)
		}
		high := 0
		for _, l := range old {
			high = max(high, l.high)
		}
		for _, l := range lives[1:] {
			if l.start != lives[0].start {
				t.Fatalf("generation %d resumed from steps %+v", gen, lives)
			}
		}
		recomputed += max(high-lives[0].start, 0)
		t.Logf("generation %d completed up to step %d; generation %d resumed from step %d", gen-1, high, gen, lives[0].start)
	}
	if last, _ := log.generation(3, 4); last[0].high != 40 {
		t.Fatalf("the job ended at step %d, want 40", last[0].high)
	}

	g := job().GetGoodput()
	t.Logf("goodput %.3f of %.1fs, %d restarts, %d steps lost, badput %v", g.GetRatio(), g.GetWallSeconds(), g.GetRestarts(), g.GetLostSteps(), g.GetBadput())
	if g.GetRatio() <= 0 || g.GetRatio() >= 1 {
		t.Errorf("goodput ratio %v, want within (0,1)", g.GetRatio())
	}
	if g.GetRestarts() != 3 || len(g.GetLatestRestarts()) != 3 {
		t.Errorf("%d restarts (%d kept), want 3: %v", g.GetRestarts(), len(g.GetLatestRestarts()), g.GetLatestRestarts())
	}
	if recomputed == 0 || g.GetLostSteps() != int64(recomputed) {
		t.Errorf("the master counts %d steps lost; the workers' logs show %d computed again", g.GetLostSteps(), recomputed)
	}
	if g.GetPhase() != "ended" || g.GetStep() != 40 {
		t.Errorf("goodput phase %q at step %d, want ended at 40", g.GetPhase(), g.GetStep())
	}
	for _, rp := range g.GetLatestRestarts() {
		sum := rp.GetDetectSeconds() + rp.GetStopSeconds() + rp.GetRendezvousSeconds() + rp.GetSpawnSeconds() +
			rp.GetInitSeconds() + rp.GetRestoreSeconds() + rp.GetFirstStepSeconds()
		if !rp.GetDone() || rp.GetDowntimeSeconds() <= 0 || sum < rp.GetDowntimeSeconds()-1e-6 || sum > rp.GetDowntimeSeconds()+1e-6 {
			t.Errorf("restart %v: want done, its phases summing to its downtime", rp)
		}
	}
	if n := strings.Count(c.master.out.String(), "restart round "); n != 3 {
		t.Errorf("the master's log has %d restart lines, want 3", n)
	}
	status, err := exec.Command(roverBin, "status", "--master", c.addr, "--token-file", c.tokenFile).CombinedOutput()
	if err != nil || !strings.Contains(string(status), "goodput ") || !strings.Contains(string(status), "FIRST STEP") {
		t.Errorf("rover status (%v) shows no goodput:\n%s", err, status)
	}
}
