package soak

import (
	"fmt"
	"io"
	"strings"

	roverv1 "github.com/roverml/rover/api/rover/v1"
)

// Report is what a soak run found.
type Report struct {
	DurationSeconds float64  `json:"duration_seconds"` // each job's ideal training time
	Steps           int      `json:"steps"`
	StepSeconds     float64  `json:"step_seconds"` // the ideal step time
	FaultRate       float64  `json:"fault_rate_per_minute"`
	Faults          []Kind   `json:"faults"`
	Rover           Job      `json:"rover"`
	Baseline        *Job     `json:"baseline,omitempty"`
	RatioVsBaseline *float64 `json:"rover_over_baseline,omitempty"` // the offline goodputs' ratio
	Dir             string   `json:"dir"`
}

// Job is one job's figures.
type Job struct {
	Launcher string    `json:"launcher"`
	Note     string    `json:"note,omitempty"`
	Offline  Goodput   `json:"offline"` // from the workers' step logs
	Faults   []Fault   `json:"faults_injected"`
	Observed int       `json:"faults_observed"`
	Reported *Reported `json:"reported,omitempty"` // the Rover master's own account
	// AccountingError is the reported ratio less the offline one, in
	// percentage points.
	AccountingError *float64 `json:"accounting_error_points,omitempty"`
	Restarts        int      `json:"restarts"` // the launcher's restarts (-1: unknown)
	Error           string   `json:"error,omitempty"`
}

// Reported is the master's goodput, as GetJob returns it.
type Reported struct {
	Ratio       float64          `json:"ratio"`
	WallSeconds float64          `json:"wall_seconds"`
	GoodSeconds float64          `json:"goodput_seconds"`
	Badput      []Cause          `json:"badput"`
	Restarts    int64            `json:"restarts"`
	LostSteps   int64            `json:"lost_steps"`
	Phase       string           `json:"phase"`
	Step        int64            `json:"step"`
	Failures    map[string]int64 `json:"failures,omitempty"`
	Latest      []RestartPhases  `json:"latest_restarts,omitempty"`
}

// Cause is a badput cause and its seconds.
type Cause struct {
	Cause   string  `json:"cause"`
	Seconds float64 `json:"seconds"`
}

// RestartPhases is one restart as the master timed it.
type RestartPhases struct {
	Round      string  `json:"round"` // old->new
	Reason     string  `json:"reason"`
	Downtime   float64 `json:"downtime_seconds"`
	Detect     float64 `json:"detect_seconds"`
	Stop       float64 `json:"stop_seconds"`
	Rendezvous float64 `json:"rendezvous_seconds"`
	Spawn      float64 `json:"spawn_seconds"`
	Init       float64 `json:"init_seconds"`
	Restore    float64 `json:"restore_seconds"`
	FirstStep  float64 `json:"first_step_seconds"`
	Resumed    int64   `json:"resumed_step"`
	Source     string  `json:"source"`
	LostSteps  int64   `json:"lost_steps"`
}

func reported(g *roverv1.JobGoodput) *Reported {
	if g == nil {
		return nil
	}
	r := &Reported{Ratio: g.GetRatio(), WallSeconds: g.GetWallSeconds(), GoodSeconds: g.GetGoodputSeconds(),
		Restarts: g.GetRestarts(), LostSteps: g.GetLostSteps(), Phase: g.GetPhase(), Step: g.GetStep(), Failures: g.GetFailures()}
	for _, c := range g.GetBadput() {
		r.Badput = append(r.Badput, Cause{Cause: c.GetCause(), Seconds: c.GetSeconds()})
	}
	for _, p := range g.GetLatestRestarts() {
		r.Latest = append(r.Latest, RestartPhases{Round: fmt.Sprintf("%d->%d", p.GetRound(), p.GetNewRound()), Reason: p.GetReason(),
			Downtime: p.GetDowntimeSeconds(), Detect: p.GetDetectSeconds(), Stop: p.GetStopSeconds(),
			Rendezvous: p.GetRendezvousSeconds(), Spawn: p.GetSpawnSeconds(), Init: p.GetInitSeconds(),
			Restore: p.GetRestoreSeconds(), FirstStep: p.GetFirstStepSeconds(), Resumed: p.GetResumedStep(),
			Source: strings.ToLower(strings.TrimPrefix(p.GetSource().String(), "CHECKPOINT_SOURCE_")), LostSteps: p.GetLostSteps()})
	}
	return r
}

// WriteText writes the report for people.
func (r Report) WriteText(w io.Writer) {
	fmt.Fprintf(w, "soak: %d steps of %.0f ms ideal (%.0fs) per job, %.2g faults a minute (%s), files in %s\n",
		r.Steps, r.StepSeconds*1000, r.DurationSeconds, r.FaultRate, kindList(r.Faults), r.Dir)
	r.Rover.writeText(w, "rover")
	if r.Baseline != nil {
		r.Baseline.writeText(w, "baseline")
	}
	if r.RatioVsBaseline != nil {
		fmt.Fprintf(w, "\nrover/baseline goodput: %.3f (offline %.3f against %.3f)\n", *r.RatioVsBaseline, r.Rover.Offline.Ratio, r.Baseline.Offline.Ratio)
	}
}

func (j Job) writeText(w io.Writer, name string) {
	o := j.Offline
	fmt.Fprintf(w, "\n%s (%s)\n", name, j.Launcher)
	if j.Note != "" {
		fmt.Fprintf(w, "  note: %s\n", j.Note)
	}
	if j.Error != "" {
		fmt.Fprintf(w, "  ERROR: %s\n", j.Error)
	}
	fmt.Fprintf(w, "  goodput (offline, step logs): %.4f of %.1fs; final step %d, %d generations, mean kept step %.1f ms\n",
		o.Ratio, o.WallSeconds, o.FinalStep, o.Generations, o.MeanStepSecs*1000)
	fmt.Fprintf(w, "  badput (offline): startup %.2fs, restarts %.2fs, lost_progress %.2fs (%d steps), checkpoint %.2fs, tail %.2fs\n",
		o.Startup, o.Restarts, o.LostSeconds, o.LostSteps, o.Checkpoint, o.Tail)
	if r := j.Reported; r != nil {
		fmt.Fprintf(w, "  goodput (reported by the master): %.4f of %.1fs, %d restarts, %d steps lost, phase %s at step %d\n",
			r.Ratio, r.WallSeconds, r.Restarts, r.LostSteps, r.Phase, r.Step)
		var causes []string
		for _, c := range r.Badput {
			causes = append(causes, fmt.Sprintf("%s %.2fs", c.Cause, c.Seconds))
		}
		fmt.Fprintf(w, "  badput (reported): %s\n", strings.Join(causes, ", "))
		if j.AccountingError != nil {
			fmt.Fprintf(w, "  accounting error (reported - offline): %+.2f points\n", *j.AccountingError)
		}
	}
	fmt.Fprintf(w, "  faults: %d injected, %d observed\n", len(j.Faults), j.Observed)
	for i, f := range j.Faults {
		as := ""
		if f.Injected != f.Kind {
			as = " as " + string(f.Injected)
		}
		fmt.Fprintf(w, "    %2d %6.1fs %s%s rank %d after step %d, observed %v", i+1, f.AtSeconds, f.Kind, as, f.Rank, f.AfterStep, f.Observed)
		if f.Note != "" {
			fmt.Fprintf(w, " (%s)", f.Note)
		}
		fmt.Fprintln(w)
	}
	var downs []string
	for _, d := range o.Downtimes {
		downs = append(downs, fmt.Sprintf("%.2f", d))
	}
	fmt.Fprintf(w, "  restart downtimes (last step to every rank's first new step), s: %s\n", strings.Join(downs, " "))
	if r := j.Reported; r != nil && len(r.Latest) > 0 {
		fmt.Fprintf(w, "  restarts by phase (master), s: round reason downtime = detect stop rendezvous spawn init restore first_step; resumed\n")
		for _, p := range r.Latest {
			fmt.Fprintf(w, "    %s %s %.2f = %.2f %.2f %.2f %.2f %.2f %.2f %.2f; step %d (%s), lost %d\n", p.Round, p.Reason, p.Downtime,
				p.Detect, p.Stop, p.Rendezvous, p.Spawn, p.Init, p.Restore, p.FirstStep, p.Resumed, p.Source, p.LostSteps)
		}
	}
}

func kindList(ks []Kind) string {
	s := make([]string, len(ks))
	for i, k := range ks {
		s[i] = string(k)
	}
	return strings.Join(s, ",")
}
