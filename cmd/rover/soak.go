package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/roverml/rover/internal/soak"
)

// runSoak is `rover soak`: a real DDP job under a fault schedule, under
// Rover and under a torchrun-style baseline, with both goodputs.
func runSoak(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, asJSON, err := parseSoak(args, stderr)
	if err != nil {
		return helpIsNoError(err)
	}
	if cfg.RoverBin, err = roverBinary(); err != nil {
		return err
	}
	if cfg.Dir == "" {
		if cfg.Dir, err = os.MkdirTemp("", "rover-soak-"); err != nil {
			return fmt.Errorf("soak: %w", err)
		}
	}
	cfg.Progress = stderr
	r, runErr := soak.Run(ctx, *cfg)
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(r); err != nil {
			return errors.Join(runErr, fmt.Errorf("soak: write the report: %w", err))
		}
	} else {
		r.WriteText(stdout)
	}
	return runErr
}

// parseSoak parses and checks the command line of `rover soak`, reporting
// every problem at once.
func parseSoak(args []string, stderr io.Writer) (*soak.Config, bool, error) {
	cfg := soak.Defaults()
	fs := flag.NewFlagSet("rover soak", flag.ContinueOnError)
	fs.SetOutput(stderr)
	faults := fs.String("faults", "worker", "the faults injected in turn: a comma-separated list of worker (SIGKILL a worker), node (SIGKILL an agent, start a new one), master (SIGKILL the master, start it again on its state dir), hang (SIGSTOP a worker), slow (SIGSTOP/SIGCONT a worker in bursts)")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	fs.DurationVar(&cfg.Duration, "duration", cfg.Duration, "each job's ideal training time: its steps are this over --step-time")
	fs.Float64Var(&cfg.FaultRate, "fault-rate", cfg.FaultRate, "faults per minute (0: none)")
	fs.Int64Var(&cfg.Seed, "seed", cfg.Seed, "seed of the victims' choice")
	fs.DurationVar(&cfg.StepTime, "step-time", cfg.StepTime, "a step's ideal wall time")
	fs.IntVar(&cfg.SaveEvery, "save-every", cfg.SaveEvery, "Rover's flash checkpoint to memory every this many steps")
	fs.IntVar(&cfg.PersistEvery, "persist-every", cfg.PersistEvery, "and persisted to storage every this many")
	fs.IntVar(&cfg.BaselineCkptEvery, "baseline-ckpt-every", cfg.BaselineCkptEvery, "the baseline's torch.save checkpoint every this many steps")
	fs.IntVar(&cfg.MaxRestarts, "max-restarts", cfg.MaxRestarts, "both jobs' --max-restarts")
	fs.BoolVar(&cfg.Baseline, "baseline", cfg.Baseline, "also run the baseline (torch.distributed.run, or soak's restart-every-worker loop where it cannot start)")
	fs.DurationVar(&cfg.HangTimeout, "hang-timeout", cfg.HangTimeout, "Rover's --hang-timeout; the baseline's hung worker stays stopped this long, then is killed")
	fs.DurationVar(&cfg.SlowFor, "slow-for", cfg.SlowFor, "how long a slowed node stays slow")
	fs.StringVar(&cfg.Script, "script", filepath.Join("examples", "soak", "train.py"), "the workload")
	fs.StringVar(&cfg.Dir, "dir", "", "where the jobs' files go, kept after the run (default: a new temporary directory)")
	if err := parseFlags(fs, args); err != nil {
		return nil, false, err
	}
	if fs.NArg() > 0 {
		return nil, false, usageError{fmt.Errorf("rover soak takes no arguments, got %q", fs.Args())}
	}
	var errs []error
	var err error
	if cfg.Faults, err = soak.ParseKinds(*faults); err != nil {
		errs = append(errs, fmt.Errorf("--faults: %w", err))
	}
	if cfg.Script, err = filepath.Abs(cfg.Script); err != nil {
		errs = append(errs, fmt.Errorf("--script: %w", err))
	} else if _, err := os.Stat(cfg.Script); err != nil {
		errs = append(errs, fmt.Errorf("--script: %w (run from the repository's root, or name examples/soak/train.py)", err))
	}
	if cfg.Dir != "" {
		if cfg.Dir, err = filepath.Abs(cfg.Dir); err != nil {
			errs = append(errs, fmt.Errorf("--dir: %w", err))
		}
	}
	if cfg.Python = os.Getenv("PYTHON_EXEC"); cfg.Python == "" {
		cfg.Python = "python3"
	}
	check := cfg
	check.RoverBin, check.Dir = "rover", "dir" // filled in later
	if err := check.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, false, usageError{err}
	}
	return &cfg, *asJSON, nil
}
