package soak

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// Event is one line of a worker's step log (examples/soak/train.py): a
// life's start (ready to train after Step) or a completed step.
type Event struct {
	Start bool // "start"; else "step"
	Rank  int
	Pid   int
	Step  int64
	At    time.Time
	// Save is how long the step's checkpoint save blocked training (the
	// step line's save=NS; 0: no save, or a log that does not say).
	Save time.Duration
}

// ParseStepLog reads a step log. Lines that do not parse (a line a killed
// worker left half written) are skipped and counted.
func ParseStepLog(r io.Reader) (events []Event, skipped int, err error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		var kind string
		var e Event
		var ns int64
		if _, err := fmt.Sscanf(sc.Text(), "%s rank=%d pid=%d step=%d t=%d", &kind, &e.Rank, &e.Pid, &e.Step, &ns); err != nil ||
			(kind != "start" && kind != "step") {
			skipped++
			continue
		}
		e.Start, e.At = kind == "start", time.Unix(0, ns)
		if _, rest, ok := strings.Cut(sc.Text(), " save="); ok {
			var save int64
			if _, err := fmt.Sscanf(rest, "%d", &save); err == nil && save > 0 {
				e.Save = time.Duration(save)
			}
		}
		events = append(events, e)
	}
	if err := sc.Err(); err != nil {
		return nil, skipped, fmt.Errorf("read step log: %w", err)
	}
	return events, skipped, nil
}

// Life is one process of one rank: where it resumed and what it completed.
type Life struct {
	Rank    int
	Pid     int
	Resumed int64     // the step it resumed after (0: from scratch)
	Ready   time.Time // its start line: ready to train
	Steps   []time.Time
	Saves   []time.Duration // each step's save blocking, beside Steps
	First   int64           // the step of Steps[0]
}

// High is the highest step the life completed (Resumed when none).
func (l Life) High() int64 { return l.Resumed + int64(len(l.Steps)) }

// Goodput is the offline account of one job from its workers' step logs,
// by the definitions the master's accounting uses (docs/design/goodput.md).
// Each rank's wall time, from the launch to the end, splits exactly into
// startup (launch to its first life's first step), kept steps, lost steps
// (computed and then computed again by a later life), checkpoint blocking
// (the time a step's save blocked training: badput, not step time),
// restart gaps (a life's last step to the next life's first step: a life's
// first step is warm-up, lazy init and the first batch, as the master counts
// it in the restart's first_step) and the tail (its last step to the end);
// the job's figures are the mean over its ranks.
type Goodput struct {
	Ranks        int     `json:"ranks"`
	WallSeconds  float64 `json:"wall_seconds"`
	Ratio        float64 `json:"ratio"`
	GoodSeconds  float64 `json:"goodput_seconds"`
	Startup      float64 `json:"startup_seconds"`
	LostSeconds  float64 `json:"lost_progress_seconds"`
	Checkpoint   float64 `json:"checkpoint_seconds"`
	Restarts     float64 `json:"restart_seconds"`
	Tail         float64 `json:"tail_seconds"`
	LostSteps    int64   `json:"lost_steps"` // the most any rank computed again
	FinalStep    int64   `json:"final_step"` // the lowest final step over the ranks
	Generations  int     `json:"generations"`
	MeanStepSecs float64 `json:"mean_kept_step_seconds"`
	// Downtimes are the restarts' downtimes: the previous generation's last
	// step on any rank to the new generation's first step on every rank.
	Downtimes []float64 `json:"restart_downtime_seconds"`
}

// Lives groups events into lives by pid, per rank, in start order. Steps a
// life logs out of order (not Resumed+1, +2, ...) end it: nothing after them
// is counted.
func Lives(events []Event) map[int][]Life {
	byPid := map[int]*Life{}
	var order []*Life
	for _, e := range events {
		l, ok := byPid[e.Pid]
		if !ok {
			l = &Life{Rank: e.Rank, Pid: e.Pid, Resumed: e.Step, Ready: e.At, First: e.Step + 1}
			byPid[e.Pid] = l
			order = append(order, l)
			if !e.Start { // its start line was lost: time its first step from itself
				l.Resumed, l.First = e.Step-1, e.Step
			}
		}
		if e.Start {
			continue
		}
		if e.Step == l.High()+1 {
			l.Steps = append(l.Steps, e.At)
			l.Saves = append(l.Saves, e.Save)
		}
	}
	out := map[int][]Life{}
	for _, l := range order {
		out[l.Rank] = append(out[l.Rank], *l)
	}
	for r := range out {
		slices.SortStableFunc(out[r], func(a, b Life) int { return a.Ready.Compare(b.Ready) })
	}
	return out
}

// Compute is the job's offline goodput over [launch, end]. A step computed
// by a life and computed again by a later life of the same rank is lost
// once per computation that was redone: the last computation is kept.
func Compute(events []Event, launch, end time.Time) Goodput {
	lives := Lives(events)
	g := Goodput{Ranks: len(lives), WallSeconds: end.Sub(launch).Seconds()}
	if g.Ranks == 0 || g.WallSeconds <= 0 {
		return g
	}
	g.FinalStep = -1
	var kept int64
	for _, ls := range lives {
		var lost int64
		for i, l := range ls {
			// The lowest step any later life resumed after: this life's
			// steps above it are computed again.
			redo := l.High()
			for _, later := range ls[i+1:] {
				redo = min(redo, later.Resumed)
			}
			// The gap before the life's first step (its first step
			// included) is startup or the restart's.
			gap := &g.Restarts
			prev := lastAt(ls[max(i-1, 0)])
			if i == 0 {
				gap, prev = &g.Startup, launch
			}
			for j, at := range l.Steps {
				d := sec(at.Sub(prev))
				redone := l.First+int64(j) > redo
				if redone {
					lost++
				}
				switch {
				case j == 0:
					*gap += d
				default:
					block := min(sec(l.Saves[j]), d)
					g.Checkpoint += block
					if redone {
						g.LostSeconds += d - block
					} else {
						g.GoodSeconds += d - block
						kept++
					}
				}
				prev = at
			}
			if len(l.Steps) == 0 {
				*gap += sec(l.Ready.Sub(prev))
			}
		}
		g.Tail += sec(end.Sub(lastAt(ls[len(ls)-1])))
		g.LostSteps = max(g.LostSteps, lost)
		g.Generations = max(g.Generations, len(ls))
		if final := ls[len(ls)-1].High(); g.FinalStep < 0 || final < g.FinalStep {
			g.FinalStep = final
		}
	}
	n := float64(g.Ranks)
	g.GoodSeconds, g.Startup, g.LostSeconds, g.Restarts, g.Tail = g.GoodSeconds/n, g.Startup/n, g.LostSeconds/n, g.Restarts/n, g.Tail/n
	g.Checkpoint /= n
	g.Ratio = min(max(g.GoodSeconds/g.WallSeconds, 0), 1)
	if kept > 0 {
		g.MeanStepSecs = g.GoodSeconds * n / float64(kept)
	}
	g.Downtimes = downtimes(lives)
	return g
}

// downtimes times each restart: from the last step of generation k-1 on any
// rank to the first step of generation k on every rank (k from 1).
func downtimes(lives map[int][]Life) []float64 {
	var out []float64
	for k := 1; ; k++ {
		var last, first time.Time
		for _, ls := range lives {
			if len(ls) <= k {
				return out
			}
			if at := lastAt(ls[k-1]); at.After(last) {
				last = at
			}
			if len(ls[k].Steps) == 0 {
				return out
			}
			if at := ls[k].Steps[0]; at.After(first) {
				first = at
			}
		}
		if len(lives) == 0 {
			return out
		}
		out = append(out, sec(first.Sub(last)))
	}
}

// lastAt is when the life last did something: its last step, or its start.
func lastAt(l Life) time.Time {
	if len(l.Steps) > 0 {
		return l.Steps[len(l.Steps)-1]
	}
	return l.Ready
}

// sec is d in seconds, never negative (clocks of one machine, but a log's
// lines may be a hair apart from the launch's).
func sec(d time.Duration) float64 { return max(d.Seconds(), 0) }
