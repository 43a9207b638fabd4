package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/roverml/rover/internal/agent/stacks"
	"github.com/roverml/rover/internal/proc"
	"github.com/roverml/rover/internal/runconfig"
)

// groupSpec is what a worker group of one round needs.
type groupSpec struct {
	// Refuse, when set, is why the group must not start: it ends at once
	// with this error, as a group whose worker could not be started.
	Refuse    error
	Argv      []string
	Placement placement // node-level fields; local ranks are filled per worker
	Dir       string    // the attempt directory of this round's restart count
	Redirects runconfig.StdSpec
	Tee       runconfig.StdSpec
	Filter    []int // local ranks shown on the console; nil = all
	// PrefixTemplate is $TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE: the prefix
	// of teed console lines ("": torchrun's "[<role><local rank>]:").
	PrefixTemplate string
	ConsoleOut     io.Writer
	ConsoleErr     io.Writer
	StopGrace      time.Duration
	Host           string
	// Rendezvous resolves MASTER_ADDR and MASTER_PORT for the round.
	Rendezvous func(ctx context.Context) (string, int, error)
	// Env is set for every worker after torchrun's contract.
	Env func(base []string) []string
	// Started is called with the full placement once MASTER_ADDR is known.
	Started func(p placement)
	// Spawned is called with the workers once all of them started.
	Spawned func([]stacks.Worker)
	// Standby, when set, runs workers in standby interpreters where it
	// can and keeps one ready for each local rank's next start.
	Standby *standbyPool
	// StepSlots is the directory of the workers' step slots (stepslot.go);
	// "": none.
	StepSlots string
	Log       *slog.Logger
}

// groupResult is how a worker group ended.
type groupResult struct {
	Round     int
	Succeeded bool
	// Stopped is true when the agent stopped the group.
	Stopped  bool
	Failures []proc.Failure
	// Err is a failure to start the group at all.
	Err error
	// StartFailed says Err is a worker that could not be started (its
	// process not created: the program not found or not executable, an
	// argument or environment the kernel refuses, the machine out of
	// processes for --nproc-per-node), at StartRank/StartLocal. Starting
	// it again fails the same way, so it is reported as such (see
	// startFailureCode), not as a fault to restart. A group refused
	// (groupSpec.Refuse) names its node's first rank in StartRank.
	StartFailed           bool
	StartRank, StartLocal int
	// Last is the newest step the group's workers completed, from their
	// step slots once they all exited.
	Last lastStep
}

// group is a running worker group.
type group struct {
	round  int
	cancel context.CancelCauseFunc
	done   chan groupResult // size 1: written once by run, read by the agent
}

// startGroup starts the group's goroutine. Cancelling the group (stop) stops
// the workers with the grace period; the result arrives on done either way.
func startGroup(ctx context.Context, spec groupSpec) *group {
	ctx, cancel := context.WithCancelCause(ctx)
	g := &group{round: spec.Placement.Round, cancel: cancel, done: make(chan groupResult, 1)}
	go func() { g.done <- runGroup(ctx, spec) }()
	return g
}

// stop stops the workers and waits for the group's result. cause is why:
// a SignalCause makes the group forward that signal to its workers.
func (g *group) stop(cause error) groupResult {
	// The cause is passed explicitly: a parent context that is being
	// cancelled closes its Done channel before it cancels its children, so
	// the group's context may not carry the parent's cause yet.
	g.cancel(cause)
	return <-g.done
}

type worker struct {
	local   int
	rank    int
	proc    *proc.Process
	out     *proc.Output
	errFile string
	errTail *lineRing
	logDir  string
	// fromStandby: the worker runs in its standby interpreter.
	fromStandby bool
}

func runGroup(ctx context.Context, spec groupSpec) groupResult {
	res := groupResult{Round: spec.Placement.Round}
	if spec.Refuse != nil {
		res.Err, res.StartRank = spec.Refuse, spec.Placement.Rank // the node's first rank
		return res
	}
	addr, port, err := spec.Rendezvous(ctx)
	if err != nil {
		if ctx.Err() != nil {
			res.Stopped = true
			return res
		}
		res.Err = fmt.Errorf("resolve MASTER_ADDR/MASTER_PORT of round %d: %w", spec.Placement.Round, err)
		return res
	}
	p := spec.Placement
	p.MasterAddr, p.MasterPort = addr, port
	if spec.Started != nil {
		spec.Started(p)
	}
	if spec.StepSlots != "" {
		if err := resetStepSlots(spec.StepSlots, p.LocalWorldSize); err != nil {
			spec.Log.Warn("the workers' last steps will not be known", "err", err)
		}
	}
	if p.Rank != 0 && spec.Standby != nil {
		spec.Standby.awaitRemoteStore(ctx, p.MasterAddr, p.MasterPort, spec.Log)
	}
	workers := make([]*worker, 0, p.LocalWorldSize)
	for local := 0; local < p.LocalWorldSize; local++ {
		w, err := startWorker(spec, p, local)
		if err != nil {
			res.Err, res.StartFailed = err, true
			res.StartRank, res.StartLocal = p.Rank+local, local
			stopAll(workers, 0)
			closeAll(workers)
			return res
		}
		workers = append(workers, w)
		if w.rank == 0 && w.fromStandby && p.LocalWorldSize > 1 {
			spec.Standby.awaitStore(ctx, p.MasterPort, w.proc.Done(), spec.Log)
		}
	}
	if spec.Spawned != nil {
		refs := make([]stacks.Worker, len(workers))
		for i, w := range workers {
			refs[i] = stacks.Worker{Local: w.local, Rank: w.rank, Pid: w.proc.Pid(), StacksFile: w.stacksFile()}
		}
		spec.Spawned(refs)
	}
	res.Succeeded, res.Stopped, res.Failures = supervise(ctx, spec, workers)
	closeAll(workers)
	if spec.StepSlots != "" {
		var err error
		if res.Last, err = readStepSlots(spec.StepSlots, p.LocalWorldSize); err != nil {
			spec.Log.Warn("could not read the workers' last steps", "err", err)
		}
	}
	return res
}

func startWorker(spec groupSpec, p placement, local int) (*worker, error) {
	w := &worker{local: local, rank: p.Rank + local, errTail: newLineRing(20)}
	w.logDir = filepath.Join(spec.Dir, strconv.Itoa(local))
	if err := os.MkdirAll(w.logDir, 0o700); err != nil {
		return nil, fmt.Errorf("create log directory of local rank %d: %w", local, err)
	}
	w.errFile = filepath.Join(w.logDir, "error.json")
	_ = os.Remove(w.errFile)
	out, err := proc.OpenOutput(proc.OutputSpec{
		Dir:        w.logDir,
		Redirect:   proc.Std(spec.Redirects.For(local)),
		Tee:        proc.Std(spec.Tee.For(local)),
		Console:    spec.Filter == nil || slices.Contains(spec.Filter, local),
		Prefix:     linePrefix(spec.PrefixTemplate, p.Role, w.rank, local),
		ConsoleOut: spec.ConsoleOut,
		ConsoleErr: spec.ConsoleErr,
	})
	if err != nil {
		return nil, fmt.Errorf("open output of local rank %d: %w", local, err)
	}
	w.out = out
	wp := p
	wp.LocalRank, wp.Rank, wp.ErrorFile = local, w.rank, w.errFile
	launch := workerLaunch{
		Argv: spec.Argv,
		Env:  append(workerEnvWith(os.Environ(), wp, spec.Env), stacks.FileEnv+"="+w.stacksFile()),
	}
	stdout, stderr := out.Stdout(), orDiscardTee(out.Stderr(), w.errTail)
	if spec.Standby != nil {
		defer spec.Standby.refill(local, launch)
		pr, why := spec.Standby.take(local, launch, stdout, stderr)
		if pr != nil {
			spec.Log.Info("worker started in its standby interpreter", "round", p.Round, "local_rank", local, "rank", w.rank, "pid", pr.Pid())
			w.proc, w.fromStandby = pr, true
			return w, nil
		}
		spec.Log.Info("worker started cold", "round", p.Round, "local_rank", local, "rank", w.rank, "why", why)
	}
	pr, err := proc.Start(proc.Spec{Argv: launch.Argv, Env: launch.Env, Stdout: stdout, Stderr: stderr})
	if err != nil {
		out.Close()
		return nil, fmt.Errorf("start worker of local rank %d (%s): %w", local, spec.Argv[0], err)
	}
	w.proc = pr
	return w, nil
}

// supervise waits until every worker succeeded, one failed, or ctx ended. On
// a failure or a stop it stops the remaining workers.
func supervise(ctx context.Context, spec groupSpec, workers []*worker) (succeeded, stopped bool, failures []proc.Failure) {
	exited := make(chan *worker, len(workers)) // buffered: every worker's watcher sends once
	for _, w := range workers {
		go func() {
			<-w.proc.Done()
			exited <- w
		}()
	}
	remaining := len(workers)
	for remaining > 0 {
		select {
		case <-ctx.Done():
			if sig := forwardedSignal(ctx); sig != 0 {
				forward(workers, sig, spec.StopGrace)
			}
			stopAll(workers, spec.StopGrace)
			return false, true, nil
		case w := <-exited:
			remaining--
			if w.proc.Exit().Success() {
				continue
			}
			failures = append(failures, failureOf(spec, w))
			// Collect the workers that failed at about the same time, then stop the rest.
			for drained := false; !drained; {
				select {
				case o := <-exited:
					remaining--
					if !o.proc.Exit().Success() {
						failures = append(failures, failureOf(spec, o))
					}
				default:
					drained = true
				}
			}
			stopAll(workers, spec.StopGrace)
			return false, false, failures
		}
	}
	return true, false, nil
}

func failureOf(spec groupSpec, w *worker) proc.Failure {
	ex := w.proc.Exit()
	f := proc.Failure{
		Time:      ex.Time,
		Host:      spec.Host,
		Node:      spec.Placement.NodeRank,
		Rank:      w.rank,
		LocalRank: w.local,
		Pid:       w.proc.Pid(),
		Exit:      ex,
	}
	rec, err := proc.ReadErrorFile(w.errFile)
	switch {
	case err == nil:
		f.Error, f.ErrorFile = rec, w.errFile
		if !rec.Time.IsZero() {
			f.Time = rec.Time
		}
	case errors.Is(err, os.ErrNotExist):
	default:
		f.ErrorFile = w.errFile
	}
	if f.Error == nil {
		f.LogTail = w.errTail.String()
	}
	return f
}

func stopAll(workers []*worker, grace time.Duration) {
	var wg sync.WaitGroup
	for _, w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.proc.Stop(grace)
		}()
	}
	wg.Wait()
}

func closeAll(workers []*worker) {
	for _, w := range workers {
		w.out.Close()
	}
}

// orDiscardTee writes to w (when the stream goes anywhere) and to tail. A
// failing w (a closed console) never fails the worker's writes.
func orDiscardTee(w io.Writer, tail io.Writer) io.Writer {
	if w == nil {
		return tail
	}
	return bestEffort{w, tail}
}

// bestEffort writes to both writers and ignores their errors.
type bestEffort struct{ a, b io.Writer }

func (t bestEffort) Write(p []byte) (int, error) {
	_, _ = t.a.Write(p)
	_, _ = t.b.Write(p)
	return len(p), nil
}

// SignalCause is the cause of a context cancelled by a signal (the agent's
// own SIGINT or SIGTERM); the agent forwards that signal to its workers.
type SignalCause interface {
	error
	Signal() syscall.Signal
}

// forwardedSignal returns the signal that stopped the agent, if any.
func forwardedSignal(ctx context.Context) syscall.Signal {
	var sc SignalCause
	if errors.As(context.Cause(ctx), &sc) {
		return sc.Signal()
	}
	return 0
}

// forward sends sig to every worker and waits up to grace for them to exit;
// stopAll then deals with the rest.
func forward(workers []*worker, sig syscall.Signal, grace time.Duration) {
	for _, w := range workers {
		_ = w.proc.Signal(sig)
	}
	timer := time.NewTimer(grace)
	defer timer.Stop()
	for _, w := range workers {
		select {
		case <-w.proc.Done():
		case <-timer.C:
			return
		}
	}
}

func workerEnvWith(base []string, p placement, extra func([]string) []string) []string {
	env := workerEnv(base, p)
	if extra == nil {
		return env
	}
	add := extra(base)
	keys := map[string]bool{}
	for _, kv := range add {
		k, _, _ := strings.Cut(kv, "=")
		keys[k] = true
	}
	out := env[:0:0]
	for _, kv := range env {
		if k, _, _ := strings.Cut(kv, "="); !keys[k] {
			out = append(out, kv)
		}
	}
	return append(out, add...)
}

// startFailureCode is the exit status a worker that could not be started is
// reported with, as a shell reports a command it cannot run: 127 when the
// program was not found, 126 for any other refusal. The master's diagnosis
// takes both as a start failure that a restart would repeat
// (internal/diagnosis, rule start-failure).
func startFailureCode(err error) int {
	if errors.Is(err, fs.ErrNotExist) {
		return 127
	}
	return 126
}

func (w *worker) stacksFile() string { return filepath.Join(w.logDir, "stacks.txt") }
