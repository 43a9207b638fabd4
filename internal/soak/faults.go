package soak

import (
	"context"
	"fmt"
	"math/rand"
	"syscall"
	"time"
)

// Fault is one injected fault.
type Fault struct {
	Kind      Kind      `json:"kind"`        // what the schedule asked for
	Injected  Kind      `json:"injected_as"` // what was done (the baseline maps what it cannot have)
	Note      string    `json:"note,omitempty"`
	AtSeconds float64   `json:"at_seconds"` // since the job's launch
	Rank      int       `json:"rank"`       // the victim's rank; -1 for the master
	AfterStep int64     `json:"after_step"` // the victim's newest completed step
	Observed  bool      `json:"observed"`   // the job showed its effect (see observe)
	at, end   time.Time // when it was injected, and when the injection ended
}

// restarts reports whether the fault restarts the workers.
func (f Fault) restarts() bool { return f.Injected != Master && f.Injected != Slow }

// target is a running job that faults are injected into.
type target interface {
	// inject does f.Injected to the job, given its workers' newest lives.
	inject(ctx context.Context, f *Fault, lives map[int][]Life) error
	// finished reports whether the job has ended.
	finished() bool
	// mapFault is what the job does for a scheduled kind it cannot have.
	mapFault(k Kind) (Kind, string)
}

// injectFaults injects cfg's faults into j in turn, one per interval from
// launch, until the job ends. A fault waits until the job trains again
// after the previous one (every rank completed a step since, in a new life
// if it restarted the workers) and is skipped near the job's end.
func injectFaults(ctx context.Context, cfg Config, j target, tail *stepTail, launch time.Time, ranks int) ([]Fault, error) {
	every := cfg.interval()
	if every == 0 {
		return nil, waitFinished(ctx, j)
	}
	rng := rand.New(rand.NewSource(cfg.Seed))
	var faults []Fault
	next := launch.Add(every)
	for {
		var lives map[int][]Life
		for {
			if j.finished() {
				return faults, nil
			}
			if err := ctx.Err(); err != nil {
				return faults, err
			}
			events, err := tail.poll()
			if err != nil {
				return faults, err
			}
			lives = Lives(events)
			if !time.Now().Before(next) && training(lives, ranks, faults, cfg.Steps()) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		kind := cfg.Faults[len(faults)%len(cfg.Faults)]
		f := Fault{Kind: kind, Injected: kind, Rank: rng.Intn(ranks), at: time.Now()}
		f.Injected, f.Note = j.mapFault(kind)
		newest := lives[f.Rank][len(lives[f.Rank])-1]
		f.AfterStep, f.AtSeconds = newest.High(), f.at.Sub(launch).Seconds()
		if err := j.inject(ctx, &f, lives); err != nil {
			return faults, fmt.Errorf("inject fault %d (%s): %w", len(faults)+1, f.Injected, err)
		}
		f.end = time.Now()
		if f.Injected == Master {
			f.Rank = -1
		}
		faults = append(faults, f)
		progressf(cfg, "fault %d: %s (as %s) rank %d after step %d at %.1fs", len(faults), f.Kind, f.Injected, f.Rank, f.AfterStep, f.AtSeconds)
		next = next.Add(every)
	}
}

// training reports whether every rank trains after the last fault, and the
// job is not within its last 10% of steps (at least 20): a fault there would
// find the workers already gone.
func training(lives map[int][]Life, ranks int, faults []Fault, steps int) bool {
	if len(lives) < ranks {
		return false
	}
	margin := int64(max(steps/10, 20))
	for _, ls := range lives {
		l := ls[len(ls)-1]
		if len(l.Steps) == 0 || l.High() >= int64(steps)-margin {
			return false
		}
		if len(faults) == 0 {
			continue
		}
		last := faults[len(faults)-1]
		if last.restarts() && !l.Ready.After(last.at) {
			return false
		}
		if !l.Steps[len(l.Steps)-1].After(last.end) {
			return false
		}
	}
	return true
}

func waitFinished(ctx context.Context, j target) error {
	for !j.finished() {
		if err := ctx.Err(); err != nil {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil
}

// observe marks each fault that the workers' lives show: a restart (every
// rank started a new life after it) for the faults that restart the
// workers, a step completed after it for a master restart, and a step of
// the slowed rank at least 1.5 times the ideal step time for a slowdown.
func observe(faults []Fault, lives map[int][]Life, stepTime time.Duration) {
	for i := range faults {
		f := &faults[i]
		switch f.Injected {
		case Master:
			f.Observed = f.Observed && anyStepAfter(lives, f.end)
		case Slow:
			f.Observed = slowStep(lives[f.Rank], f.at, f.end, stepTime)
		default:
			f.Observed = len(lives) > 0
			for _, ls := range lives {
				restarted := false
				for _, l := range ls {
					restarted = restarted || l.Ready.After(f.at)
				}
				f.Observed = f.Observed && restarted
			}
		}
	}
}

func anyStepAfter(lives map[int][]Life, t time.Time) bool {
	for _, ls := range lives {
		for _, l := range ls {
			if len(l.Steps) > 0 && l.Steps[len(l.Steps)-1].After(t) {
				return true
			}
		}
	}
	return false
}

// slowStep reports whether a step of ls that ended in [from, to] took at
// least 1.5 ideal steps.
func slowStep(ls []Life, from, to time.Time, stepTime time.Duration) bool {
	for _, l := range ls {
		prev := l.Ready
		for _, at := range l.Steps {
			if !at.Before(from) && !at.After(to) && at.Sub(prev) >= stepTime*3/2 {
				return true
			}
			prev = at
		}
	}
	return false
}

// slowDown stops and continues pid in bursts (half of each 400 ms stopped)
// for d.
func slowDown(ctx context.Context, pid int, d time.Duration) error {
	end := time.Now().Add(d)
	defer syscall.Kill(pid, syscall.SIGCONT)
	for time.Now().Before(end) && ctx.Err() == nil {
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			return fmt.Errorf("stop pid %d: %w", pid, err)
		}
		time.Sleep(200 * time.Millisecond)
		if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
			return fmt.Errorf("continue pid %d: %w", pid, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	return nil
}

// newestPid is the pid of rank's newest life.
func newestPid(lives map[int][]Life, rank int) int {
	ls := lives[rank]
	return ls[len(ls)-1].Pid
}

func progressf(cfg Config, format string, args ...any) {
	if cfg.Progress != nil {
		fmt.Fprintf(cfg.Progress, "soak: "+format+"\n", args...)
	}
}
