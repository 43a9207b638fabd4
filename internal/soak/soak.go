package soak

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	roverv1 "github.com/roverml/rover/api/rover/v1"
)

// Run runs the Rover job and then, with cfg.Baseline, the baseline, one
// after the other on this machine (each has its cores to itself), and
// returns their figures. An error of one job is in its Job.Error and in the
// returned error; the report is still filled as far as the job got.
func Run(ctx context.Context, cfg Config) (Report, error) {
	if err := cfg.Validate(); err != nil {
		return Report{}, err
	}
	r := Report{DurationSeconds: cfg.Duration.Seconds(), Steps: cfg.Steps(), StepSeconds: cfg.StepTime.Seconds(),
		FaultRate: cfg.FaultRate, Faults: cfg.Faults, Dir: cfg.Dir}
	var errs []error
	progressf(cfg, "rover job: %d steps, files in %s", cfg.Steps(), filepath.Join(cfg.Dir, "rover"))
	rj, err := runRover(ctx, cfg, filepath.Join(cfg.Dir, "rover"))
	r.Rover = rj
	if err != nil {
		errs = append(errs, fmt.Errorf("rover job: %w", err))
	}
	if cfg.Baseline && ctx.Err() == nil {
		progressf(cfg, "baseline job: %d steps, files in %s", cfg.Steps(), filepath.Join(cfg.Dir, "baseline"))
		bj, err := runBaseline(ctx, cfg, filepath.Join(cfg.Dir, "baseline"))
		r.Baseline = &bj
		if err != nil {
			errs = append(errs, fmt.Errorf("baseline job: %w", err))
		}
		if bj.Offline.Ratio > 0 {
			ratio := r.Rover.Offline.Ratio / bj.Offline.Ratio
			r.RatioVsBaseline = &ratio
		}
	}
	return r, errors.Join(errs...)
}

func runRover(ctx context.Context, cfg Config, dir string) (Job, error) {
	j := newRoverJob(cfg, dir)
	out := Job{Launcher: "rover master + rover run (2 nodes of 1 worker)", Restarts: -1}
	defer j.kill()
	if err := j.start(ctx); err != nil {
		out.Error = err.Error()
		return out, err
	}
	launch := time.Now()
	tail := &stepTail{path: j.stepLog()}
	faults, err := injectFaults(ctx, cfg, j, tail, launch, roverNodes)
	if err == nil {
		err = waitFinished(ctx, j)
	}
	end := time.Now()
	if err == nil {
		var g *roverv1.JobGoodput
		g, err = j.result(ctx)
		out.Reported = reported(g)
	}
	err = errors.Join(err, finish(&out, cfg, tail, faults, launch, end))
	if out.Reported != nil && out.Offline.WallSeconds > 0 {
		e := (out.Reported.Ratio - out.Offline.Ratio) * 100
		out.AccountingError = &e
		out.Restarts = int(out.Reported.Restarts)
	}
	if err != nil {
		out.Error = err.Error()
	}
	return out, err
}

func runBaseline(ctx context.Context, cfg Config, dir string) (Job, error) {
	j := newBaselineJob(cfg, dir)
	out := Job{Restarts: -1}
	defer j.kill()
	launch, err := j.start(ctx)
	out.Launcher = j.launcher
	if j.reason != "" {
		out.Note = "torch.distributed.run failed: " + j.reason
	}
	if err != nil {
		out.Error = err.Error()
		return out, err
	}
	tail := &stepTail{path: j.stepLog()}
	faults, err := injectFaults(ctx, cfg, j, tail, launch, baselineWorkers)
	if err == nil {
		err = waitFinished(ctx, j)
	}
	end := time.Now()
	if err == nil {
		out.Restarts, err = j.result()
	}
	err = errors.Join(err, finish(&out, cfg, tail, faults, launch, end))
	if err != nil {
		out.Error = err.Error()
	}
	return out, err
}

// finish computes a job's offline figures from its whole step log.
func finish(out *Job, cfg Config, tail *stepTail, faults []Fault, launch, end time.Time) error {
	events, err := tail.poll()
	out.Offline = Compute(events, launch, end)
	observe(faults, Lives(events), cfg.StepTime)
	out.Faults = faults
	for _, f := range faults {
		if f.Observed {
			out.Observed++
		}
	}
	return err
}
