package goodput

import (
	"cmp"
	"maps"
	"slices"
	"time"
)

// Restart is one restart's phases: where the time from a failure (or a
// stop) to the first step of the next round went. Phases are wall time in
// the phase, overlays (a node check, waiting for nodes) included.
type Restart struct {
	Round    int64  `json:"round"`               // the round that stopped
	NewRound int64  `json:"new_round,omitempty"` // the round that replaced it, once formed
	Reason   string `json:"reason"`              // the failure's cause, or the stop reason

	Detect     time.Duration `json:"detect_ns"`     // death to the master's knowing
	Stop       time.Duration `json:"stop_ns"`       // to the workers stopped
	Rendezvous time.Duration `json:"rendezvous_ns"` // to the new round formed
	Spawn      time.Duration `json:"spawn_ns"`      // to the workers started
	Init       time.Duration `json:"init_ns"`       // to their restore begun (imports, process group)
	Restore    time.Duration `json:"restore_ns"`    // to the checkpoint loaded
	FirstStep  time.Duration `json:"first_step_ns"` // to the first step completed

	Resumed     bool          `json:"resumed,omitempty"` // ResumedStep is known
	ResumedStep int64         `json:"resumed_step"`
	From        Source        `json:"from"`
	LostSteps   int64         `json:"lost_steps"` // steps rolled back
	Lost        time.Duration `json:"lost_ns"`    // lost progress, rollback and interrupted steps
	Done        bool          `json:"done,omitempty"`
	// Nodes says where each node's workers resumed from, in node order
	// (at most MaxRestoreNodes), and MoreNodes how many more resumed.
	Nodes     []NodeRestore `json:"nodes,omitempty"`
	MoreNodes int           `json:"more_nodes,omitempty"`
}

// Downtime is the restart's time from the failure to the first new step.
func (r Restart) Downtime() time.Duration {
	return r.Detect + r.Stop + r.Rendezvous + r.Spawn + r.Init + r.Restore + r.FirstStep
}

func (r *Restart) add(p phase, d time.Duration) {
	var f *time.Duration
	switch p {
	case detect:
		f = &r.Detect
	case stop:
		f = &r.Stop
	case rendezvous:
		f = &r.Rendezvous
	case spawn:
		f = &r.Spawn
	case initing:
		f = &r.Init
	case restoring:
		f = &r.Restore
	case firstStep:
		f = &r.FirstStep
	default:
		return
	}
	*f = addSat(*f, d)
}

// View is the job's goodput so far. Goodput + the sum of Badput == Wall.
// Training time since the last reported step is goodput, and a failed
// round's unsettled steps lost progress, until a resume settles them.
type View struct {
	Phase    string        // where the job stands: startup, training, detect, ...
	Round    int64         // the current round
	Wall     time.Duration // from launch to now (or the end)
	Goodput  time.Duration
	Ratio    float64 // Goodput / Wall, 0..1 (0 before any wall time)
	Badput   [NumCauses]time.Duration
	Step     int64            // newest kept step
	Restarts int64            // restarts so far
	Failures map[string]int64 // worker failures that began a restart, by cause
	Saves    int64            // checkpoint saves
	Lost     int64            // steps rolled back, in all
	Latest   []Restart        // the latest restarts, oldest first
}

// CauseTime is one cause's badput.
type CauseTime struct {
	Cause Cause
	Time  time.Duration
}

// Largest is the n largest non-zero badput causes, largest first.
func (v View) Largest(n int) []CauseTime {
	var out []CauseTime
	for c, d := range v.Badput {
		if d > 0 {
			out = append(out, CauseTime{Cause(c), d})
		}
	}
	slices.SortStableFunc(out, func(a, b CauseTime) int { return cmp.Compare(b.Time, a.Time) })
	return out[:min(n, len(out))]
}

// View is the accounting as of now (a time before the newest event counts
// as the newest). It changes nothing.
func (m *Machine) View(now time.Time) View {
	c := *m
	c.restarts = slices.Clone(m.restarts)
	if c.live() {
		c.advance(now)
	}
	v := View{
		Phase: c.phase.String(), Round: c.round, Goodput: addSat(c.goodput, c.pending),
		Badput: c.badput, Step: c.frontier, Restarts: c.nRestarts,
		Failures: maps.Clone(c.failures), Saves: c.saves, Lost: c.lostSteps, Latest: c.restarts,
	}
	if c.tail != nil {
		v.Badput[LostProgress] = addSat(v.Badput[LostProgress], c.tail.dur)
	}
	v.Wall = v.Goodput
	for _, d := range v.Badput {
		v.Wall = addSat(v.Wall, d)
	}
	if v.Wall > 0 {
		v.Ratio = min(max(float64(v.Goodput)/float64(v.Wall), 0), 1)
	}
	return v
}
