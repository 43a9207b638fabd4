package soak

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"connectrpc.com/connect"
	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/client"
)

// roverNodes is the Rover job's shape: two nodes of one worker each, so
// that a node can be killed and relaunched while the other lives on.
const roverNodes = 2

// roverJob is the job under Rover: a `rover master` process on a state dir
// and one `rover run` agent per node, all on this machine.
type roverJob struct {
	cfg        Config
	dir        string
	env        []string
	addr       string
	tokenFile  string
	masterArgs []string
	master     *proc
	masters    int
	agents     []*proc
	launches   []int // per node, its agents so far
}

func newRoverJob(cfg Config, dir string) *roverJob {
	return &roverJob{cfg: cfg, dir: dir, tokenFile: filepath.Join(dir, "job.token"),
		env:      append(os.Environ(), "PYTHON_EXEC="+cfg.Python, "PYTHONUNBUFFERED=1"),
		launches: make([]int, roverNodes)}
}

func (j *roverJob) stepLog() string { return filepath.Join(j.dir, "steps.log") }

// startMaster starts the master (listening on j.addr once known) and
// waits until it serves.
func (j *roverJob) startMaster(ctx context.Context) error {
	addrFile := filepath.Join(j.dir, "master.addr")
	if j.masterArgs == nil {
		j.masterArgs = []string{"--job", "soak", "--token-file", j.tokenFile, "--addr-file", addrFile,
			"--state-dir", filepath.Join(j.dir, "state"), "--linger", "10m"}
	}
	listen := j.addr
	if listen == "" {
		listen = "127.0.0.1:0"
	}
	_ = os.Remove(addrFile)
	j.masters++
	p, err := startProc(fmt.Sprintf("master%d", j.masters), j.dir, filepath.Join(j.dir, "master.out"), j.env,
		j.cfg.RoverBin, append([]string{"master", "--listen", listen}, j.masterArgs...)...)
	if err != nil {
		return err
	}
	j.master = p
	for deadline := time.Now().Add(time.Minute); ; {
		if b, err := os.ReadFile(addrFile); err == nil && len(b) > 0 {
			j.addr = strings.TrimSpace(string(b))
			break
		}
		if p.exited() || time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("the master did not start (exit %v): see %s", p.err, filepath.Join(j.dir, "master.out"))
		}
		time.Sleep(20 * time.Millisecond)
	}
	return j.waitServing(ctx)
}

// waitServing waits until the master answers GetJob.
func (j *roverJob) waitServing(ctx context.Context) error {
	for deadline := time.Now().Add(time.Minute); ; {
		if _, err := j.getJob(ctx); err == nil {
			return nil
		} else if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("the master at %s does not answer: %w", j.addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (j *roverJob) getJob(ctx context.Context) (*roverv1.GetJobResponse, error) {
	token, err := os.ReadFile(j.tokenFile)
	if err != nil {
		return nil, fmt.Errorf("read the job's token: %w", err)
	}
	hc := client.NewHTTPClient()
	defer hc.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	r, err := client.New(hc, j.addr, strings.TrimSpace(string(token))).GetJob(ctx, connect.NewRequest(&roverv1.GetJobRequest{}))
	if err != nil {
		return nil, fmt.Errorf("GetJob: %w", err)
	}
	return r.Msg, nil
}

// startAgent starts node n's agent (again).
func (j *roverJob) startAgent(n int) error {
	c := j.cfg
	j.launches[n]++
	args := []string{"run", "--rdzv-endpoint", j.addr, "--token-file", j.tokenFile, "--rdzv-id", "soak",
		"--node-id", fmt.Sprintf("node%d", n), "--nnodes", strconv.Itoa(roverNodes), "--nproc-per-node", "1",
		"--max-restarts", strconv.Itoa(c.MaxRestarts), "--heartbeat-interval", "1s", "--stop-grace-period", "5s",
		"--checkpoint-dir", filepath.Join(j.dir, "ckpt"), "--hang-timeout", c.HangTimeout.String(), "--hang-detection", "2",
		c.Script, "--steps", strconv.Itoa(c.Steps()), "--step-time", strconv.FormatFloat(c.StepTime.Seconds(), 'f', -1, 64),
		"--log", j.stepLog(), "--ckpt", "flash", "--save-every", strconv.Itoa(c.SaveEvery),
		"--persist-every", strconv.Itoa(c.PersistEvery)}
	p, err := startProc(fmt.Sprintf("node%d agent %d", n, j.launches[n]), j.dir,
		filepath.Join(j.dir, fmt.Sprintf("node%d.out", n)), j.env, c.RoverBin, args...)
	if err != nil {
		return err
	}
	j.agents[n] = p
	return nil
}

func (j *roverJob) start(ctx context.Context) error {
	if err := os.MkdirAll(j.dir, 0o755); err != nil {
		return fmt.Errorf("rover job: %w", err)
	}
	if err := j.startMaster(ctx); err != nil {
		return err
	}
	j.agents = make([]*proc, roverNodes)
	for n := range roverNodes {
		if err := j.startAgent(n); err != nil {
			return err
		}
	}
	return nil
}

func (j *roverJob) finished() bool {
	for _, a := range j.agents {
		if !a.exited() {
			return false
		}
	}
	return true
}

func (j *roverJob) mapFault(k Kind) (Kind, string) { return k, "" }

// nodeOf is the node whose agent runs the worker pid: the agent it
// descends from.
func (j *roverJob) nodeOf(pid int) (int, error) {
	for p, hops := pid, 0; p > 1 && hops < 8; hops++ {
		ppid, err := parentOf(p)
		if err != nil {
			return 0, fmt.Errorf("find the agent of pid %d: %w", pid, err)
		}
		for n, a := range j.agents {
			if a.cmd.Process.Pid == ppid {
				return n, nil
			}
		}
		p = ppid
	}
	return 0, fmt.Errorf("pid %d descends from no agent of this job", pid)
}

// parentOf is pid's parent, from /proc.
func parentOf(pid int) (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	fields := strings.Fields(s[i+1:])
	if i < 0 || len(fields) < 2 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected %q", pid, s)
	}
	return strconv.Atoi(fields[1])
}

func (j *roverJob) inject(ctx context.Context, f *Fault, lives map[int][]Life) error {
	if f.Injected == Master {
		j.master.kill()
		if err := j.startMaster(ctx); err != nil {
			return err
		}
		f.Observed = true // it serves again; observe also wants a step after it
		return nil
	}
	pid := newestPid(lives, f.Rank)
	switch f.Injected {
	case Worker:
		return syscall.Kill(pid, syscall.SIGKILL)
	case Node:
		n, err := j.nodeOf(pid)
		if err != nil {
			return err
		}
		f.Note = fmt.Sprintf("node%d's agent killed and started again", n)
		j.agents[n].kill()
		return j.startAgent(n)
	case Hang:
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			return fmt.Errorf("stop pid %d: %w", pid, err)
		}
		// Rover's hang detection restarts the workers, SIGKILLing the stopped
		// one; past a generous deadline soak lets it go on, and the fault
		// shows as not observed.
		deadline := time.Now().Add(j.cfg.HangTimeout + 2*time.Minute)
		for syscall.Kill(pid, 0) == nil && time.Now().Before(deadline) && ctx.Err() == nil && !j.finished() {
			time.Sleep(50 * time.Millisecond)
		}
		_ = syscall.Kill(pid, syscall.SIGCONT)
		return nil
	case Slow:
		return slowDown(ctx, pid, j.cfg.SlowFor)
	}
	return fmt.Errorf("unknown fault %q", f.Injected)
}

// result stops the lingering master after asking it for the job's goodput.
func (j *roverJob) result(ctx context.Context) (*roverv1.JobGoodput, error) {
	var errs []error
	for n, a := range j.agents {
		if code := a.exitCode(); code != 0 {
			errs = append(errs, fmt.Errorf("node%d's agent exited %d: see %s", n, code, filepath.Join(j.dir, fmt.Sprintf("node%d.out", n))))
		}
	}
	r, err := j.getJob(ctx)
	j.master.stop(10 * time.Second)
	if err != nil {
		return nil, errors.Join(append(errs, err)...)
	}
	return r.GetGoodput(), errors.Join(errs...)
}

// kill ends whatever still runs (after an error).
func (j *roverJob) kill() {
	for _, a := range j.agents {
		if a != nil {
			a.stop(10 * time.Second)
		}
	}
	if j.master != nil {
		j.master.stop(5 * time.Second)
	}
}
