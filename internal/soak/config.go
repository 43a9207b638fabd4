package soak

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
)

// Kind is a kind of fault.
type Kind string

// The faults soak injects.
const (
	// Worker SIGKILLs one worker process.
	Worker Kind = "worker"
	// Node SIGKILLs one node's agent (its worker dies with it) and starts a
	// new agent with the same node id, as a platform relaunches a node.
	Node Kind = "node"
	// Master SIGKILLs the master and starts it again on the same state dir
	// and address.
	Master Kind = "master"
	// Hang SIGSTOPs one worker: the job stops making progress until Rover's
	// hang detection restarts the workers.
	Hang Kind = "hang"
	// Slow stops and continues one worker in bursts (SIGSTOP/SIGCONT), so
	// that its node computes at half speed for a while.
	Slow Kind = "slow"
)

// Kinds are all the kinds, in the order --faults documents them.
var Kinds = []Kind{Worker, Node, Master, Hang, Slow}

// ParseKinds parses a comma-separated list of kinds.
func ParseKinds(s string) ([]Kind, error) {
	var out []Kind
	for _, f := range strings.Split(s, ",") {
		k := Kind(strings.TrimSpace(f))
		ok := false
		for _, known := range Kinds {
			ok = ok || k == known
		}
		if !ok {
			return nil, fmt.Errorf("unknown fault %q: want a comma-separated list of worker, node, master, hang, slow", f)
		}
		out = append(out, k)
	}
	return out, nil
}

// Config is one soak run.
type Config struct {
	RoverBin string // the rover binary that runs the master and the agents
	Python   string // the interpreter of the workers (it imports torch)
	Script   string // examples/soak/train.py
	Dir      string // where the jobs' files go (kept after the run)

	Duration  time.Duration // the ideal training time of each job (its steps at StepTime)
	FaultRate float64       // faults per minute of the job's wall time
	Faults    []Kind        // injected in turn
	Seed      int64         // picks the victims

	StepTime     time.Duration // a step's ideal wall time
	SaveEvery    int           // Rover's flash checkpoint to memory, every this many steps
	PersistEvery int           // and persisted every this many
	HangTimeout  time.Duration // Rover's --hang-timeout, and how long the baseline's hung worker stays stopped
	SlowFor      time.Duration // how long a slowed node stays slow

	Baseline          bool // also run the baseline
	BaselineCkptEvery int  // the baseline's torch.save, every this many steps
	MaxRestarts       int  // both jobs' --max-restarts

	Progress io.Writer // a line per fault and per phase of the run; nil for none
}

// Defaults are the flags' defaults.
func Defaults() Config {
	return Config{
		Duration: 5 * time.Minute, FaultRate: 1, Faults: []Kind{Worker}, Seed: 1,
		StepTime: 100 * time.Millisecond, SaveEvery: 2, PersistEvery: 20, HangTimeout: 10 * time.Second,
		SlowFor: 5 * time.Second, Baseline: true, BaselineCkptEvery: 20, MaxRestarts: 100,
	}
}

// Steps is each job's number of steps: Duration of ideal steps.
func (c Config) Steps() int { return int(c.Duration / c.StepTime) }

// Validate reports every problem of c at once, by flag name.
func (c Config) Validate() error {
	var errs []error
	check := func(bad bool, format string, args ...any) {
		if bad {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	check(c.RoverBin == "", "no rover binary")
	check(c.Python == "", "no Python: set $PYTHON_EXEC to an interpreter that imports torch")
	check(c.Script == "", "--script: the workload (examples/soak/train.py) is needed")
	check(c.Dir == "", "--dir: a directory is needed")
	check(c.StepTime < 10*time.Millisecond || c.StepTime > time.Minute, "--step-time %s: must be 10ms to 1m", c.StepTime)
	check(c.Duration < 10*c.StepTime || c.Duration > 24*time.Hour, "--duration %s: must be at least 10 steps and at most 24h", c.Duration)
	check(c.FaultRate < 0 || c.FaultRate > 60, "--fault-rate %v: must be 0 to 60 faults a minute", c.FaultRate)
	check(len(c.Faults) == 0 && c.FaultRate > 0, "--faults: name at least one fault")
	check(c.SaveEvery < 1, "--save-every %d: must be at least 1", c.SaveEvery)
	check(c.PersistEvery < 1, "--persist-every %d: must be at least 1", c.PersistEvery)
	check(c.BaselineCkptEvery < 1, "--baseline-ckpt-every %d: must be at least 1", c.BaselineCkptEvery)
	check(c.MaxRestarts < 0, "--max-restarts %d: must be at least 0", c.MaxRestarts)
	check(c.HangTimeout < time.Second, "--hang-timeout %s: must be at least 1s", c.HangTimeout)
	check(c.SlowFor < time.Second, "--slow-for %s: must be at least 1s", c.SlowFor)
	return errors.Join(errs...)
}

// interval is the time between two scheduled faults (0: none).
func (c Config) interval() time.Duration {
	if c.FaultRate <= 0 || len(c.Faults) == 0 {
		return 0
	}
	return time.Duration(float64(time.Minute) / c.FaultRate)
}
