package soak

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// baselineWorkers is the baseline's shape: one node of two workers, as a
// user runs a two-worker job on one machine with torchrun.
const baselineWorkers = 2

// The baseline's launchers.
const (
	launcherTorchrun = "torch.distributed.run"
	launcherFallback = "soak's restart-every-worker loop (torch.distributed.run cannot start workers here)"
)

// baselineJob is the same workload as a torchrun user runs it: a torch.save
// checkpoint every N steps, every worker restarted on any failure.
type baselineJob struct {
	cfg      Config
	dir      string
	env      []string
	launcher string
	reason   string // why the fallback: the launcher's error
	torchrun *proc
	group    *restartGroup
}

func newBaselineJob(cfg Config, dir string) *baselineJob {
	return &baselineJob{cfg: cfg, dir: dir, env: append(os.Environ(), "PYTHONUNBUFFERED=1")}
}

func (j *baselineJob) stepLog() string { return filepath.Join(j.dir, "steps.log") }

func (j *baselineJob) scriptArgs() []string {
	c := j.cfg
	return []string{c.Script, "--steps", strconv.Itoa(c.Steps()), "--step-time", strconv.FormatFloat(c.StepTime.Seconds(), 'f', -1, 64),
		"--log", j.stepLog(), "--ckpt", "torchsave", "--save-every", strconv.Itoa(c.BaselineCkptEvery),
		"--path", filepath.Join(j.dir, "ckpt.pt")}
}

// start launches the job with PyTorch's launcher and returns its launch
// time; when the launcher exits before any worker starts (Debian's torch
// 1.13 on Python 3.11: to_map's 'NoneType' object has no attribute 'get'),
// it starts soak's own loop instead and returns that launch time.
func (j *baselineJob) start(ctx context.Context) (time.Time, error) {
	if err := os.MkdirAll(j.dir, 0o755); err != nil {
		return time.Time{}, fmt.Errorf("baseline job: %w", err)
	}
	out := filepath.Join(j.dir, "torchrun.out")
	launch := time.Now()
	p, err := startProc("torchrun", j.dir, out, j.env, j.cfg.Python, append([]string{"-m", "torch.distributed.run",
		"--standalone", "--nnodes", "1", "--nproc_per_node", strconv.Itoa(baselineWorkers),
		"--max_restarts", strconv.Itoa(j.cfg.MaxRestarts), "--monitor_interval", "0.1"}, j.scriptArgs()...)...)
	if err != nil {
		return time.Time{}, err
	}
	tail := &stepTail{path: j.stepLog()}
	for {
		events, err := tail.poll()
		if err != nil {
			return time.Time{}, err
		}
		if len(events) > 0 {
			j.launcher, j.torchrun = launcherTorchrun, p
			return launch, nil
		}
		if p.exited() {
			break
		}
		if ctx.Err() != nil {
			p.stop(5 * time.Second)
			return time.Time{}, ctx.Err()
		}
		time.Sleep(50 * time.Millisecond)
	}
	j.launcher, j.reason = launcherFallback, lastErrorLine(out)
	_ = os.Remove(j.stepLog())
	j.group = &restartGroup{cfg: j.cfg, dir: j.dir, env: j.env, args: j.scriptArgs(), done: make(chan struct{})}
	launch = time.Now()
	go j.group.run(ctx)
	return launch, nil
}

// lastErrorLine is the last line of a Python traceback in path.
func lastErrorLine(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	last := "exited before starting any worker"
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); strings.Contains(l, "Error") {
			last = l
		}
	}
	return last
}

func (j *baselineJob) finished() bool {
	if j.torchrun != nil {
		return j.torchrun.exited()
	}
	select {
	case <-j.group.done:
		return true
	default:
		return false
	}
}

// mapFault maps what a single torchrun job has not got to a worker fault.
func (j *baselineJob) mapFault(k Kind) (Kind, string) {
	switch k {
	case Node:
		return Worker, "torchrun on one node has no agent to lose but itself: a worker SIGKILL instead"
	case Master:
		return Worker, "torchrun has no master: a worker SIGKILL instead"
	case Hang:
		return Hang, "torchrun detects no hang: the worker stays stopped --hang-timeout, then soak SIGKILLs it"
	}
	return k, ""
}

func (j *baselineJob) inject(ctx context.Context, f *Fault, lives map[int][]Life) error {
	pid := newestPid(lives, f.Rank)
	switch f.Injected {
	case Worker:
		return syscall.Kill(pid, syscall.SIGKILL)
	case Hang:
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			return fmt.Errorf("stop pid %d: %w", pid, err)
		}
		select {
		case <-time.After(j.cfg.HangTimeout):
		case <-ctx.Done():
		}
		return syscall.Kill(pid, syscall.SIGKILL)
	case Slow:
		return slowDown(ctx, pid, j.cfg.SlowFor)
	}
	return fmt.Errorf("fault %q cannot be injected into the baseline", f.Injected)
}

func (j *baselineJob) result() (restarts int, err error) {
	if j.torchrun != nil {
		if code := j.torchrun.exitCode(); code != 0 {
			return 0, fmt.Errorf("torchrun exited %d: see %s", code, filepath.Join(j.dir, "torchrun.out"))
		}
		return -1, nil
	}
	<-j.group.done
	return j.group.restarts, j.group.err
}

func (j *baselineJob) kill() {
	if j.torchrun != nil {
		j.torchrun.stop(10 * time.Second)
	}
	if j.group != nil {
		<-j.group.done // it stops its workers when the context ends
	}
}

// restartGroup is what torchrun does on one node, for where its own
// launcher cannot run: start the workers with torchrun's environment,
// watch them every 0.1 s (torchrun's --monitor-interval), and when one
// fails stop all of them (SIGTERM, then SIGKILL) and start them all again,
// up to --max-restarts times.
type restartGroup struct {
	cfg      Config
	dir      string
	env      []string
	args     []string
	restarts int // read by others once done is closed
	done     chan struct{}
	err      error
}

func (g *restartGroup) run(ctx context.Context) {
	defer close(g.done)
	for {
		workers, err := g.startWorkers()
		if err != nil {
			g.err = err
			return
		}
		failed, ok := g.watch(ctx, workers)
		for _, w := range workers {
			w.stop(30 * time.Second)
		}
		switch {
		case ctx.Err() != nil:
			g.err = ctx.Err()
			return
		case ok:
			return
		case g.restarts >= g.cfg.MaxRestarts:
			g.err = fmt.Errorf("worker %d failed after %d restarts (--max-restarts)", failed, g.restarts)
			return
		}
		g.restarts++
	}
}

// watch waits until every worker succeeded (ok) or one failed.
func (g *restartGroup) watch(ctx context.Context, workers []*proc) (failed int, ok bool) {
	for ctx.Err() == nil {
		succeeded := 0
		for i, w := range workers {
			if !w.exited() {
				continue
			}
			if w.exitCode() != 0 {
				return i, false
			}
			succeeded++
		}
		if succeeded == len(workers) {
			return 0, true
		}
		time.Sleep(100 * time.Millisecond)
	}
	return 0, false
}

func (g *restartGroup) startWorkers() ([]*proc, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	var workers []*proc
	for rank := range baselineWorkers {
		env := append(append([]string(nil), g.env...),
			"RANK="+strconv.Itoa(rank), "LOCAL_RANK="+strconv.Itoa(rank), "GROUP_RANK=0", "ROLE_RANK="+strconv.Itoa(rank),
			"WORLD_SIZE="+strconv.Itoa(baselineWorkers), "LOCAL_WORLD_SIZE="+strconv.Itoa(baselineWorkers),
			"ROLE_WORLD_SIZE="+strconv.Itoa(baselineWorkers), "GROUP_WORLD_SIZE=1", "ROLE_NAME=default",
			"MASTER_ADDR=127.0.0.1", "MASTER_PORT="+strconv.Itoa(port),
			"TORCHELASTIC_RESTART_COUNT="+strconv.Itoa(g.restarts), "TORCHELASTIC_MAX_RESTARTS="+strconv.Itoa(g.cfg.MaxRestarts),
			"TORCHELASTIC_RUN_ID=soak", "TORCHELASTIC_USE_AGENT_STORE=False", "OMP_NUM_THREADS=1")
		w, err := startProc(fmt.Sprintf("worker %d, restart %d", rank, g.restarts), g.dir,
			filepath.Join(g.dir, fmt.Sprintf("worker%d.out", rank)), env, g.cfg.Python, g.args...)
		if err != nil {
			for _, w := range workers {
				w.kill()
			}
			return nil, err
		}
		workers = append(workers, w)
	}
	return workers, nil
}

// freePort is a TCP port free on the loopback interface now.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
