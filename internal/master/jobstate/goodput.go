package jobstate

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/roverml/rover/internal/goodput"
	"github.com/roverml/rover/internal/rendezvous"
)

// Goodput is the job's goodput accounting (internal/goodput,
// docs/design/goodput.md): the share of its wall time spent in training
// steps that were kept, and where the rest went. Apply feeds it the events
// the journal holds (the job's launch, rounds formed and stopped, worker
// failures, nodes stopped, the node check, the job's end, waiting for
// nodes), so a replay rebuilds that part exactly; the launch is the job's
// first configuration. What the agents' heartbeats
// say (progress, workers started, restores, checkpoint saves) and the hang
// timer's verdicts come between events and are not journaled one by one:
// they mark the state Dirty, and the driver journals the whole state
// (EventGoodput) before the next journaled event that changes it and
// periodically. A replayed EventGoodput replaces the state with the one it
// carries; applied live it changes nothing (the live state already is it).
type Goodput struct {
	m        *goodput.Machine
	launched bool
	round    int64    // the round formed last: the one the machine follows
	world    []string // its nodes, sorted

	// stopping is the nodes of the last stopped round whose workers are not
	// known to be stopped yet; waiting says WaitingForNodes is in force.
	stopping map[string]bool
	waiting  bool

	dirty   bool  // changed by an input outside the journal since Marshal
	moved   bool  // and its milestone moved: journal it now (Urgent)
	logged  int64 // restarts counted when the last completed one was taken
	pending bool  // a restart may be waiting for its first step
}

// NewGoodput returns the accounting of a job not launched yet.
func NewGoodput() *Goodput {
	m, _ := goodput.New(goodput.Config{}) // the default configuration is valid
	return &Goodput{m: m}
}

// RestoreGoodput returns the accounting that Marshal wrote.
func RestoreGoodput(b []byte) (*Goodput, error) {
	var g Goodput
	if err := g.restore(b); err != nil {
		return nil, err
	}
	return &g, nil
}

// goodputJSON is the accounting's encoding: the machine's own, and what
// the driver keeps beside it.
type goodputJSON struct {
	Machine  json.RawMessage `json:"machine"`
	World    []string        `json:"world,omitempty"`
	Stopping []string        `json:"stopping,omitempty"`
	Waiting  bool            `json:"waiting,omitempty"`
}

func (g *Goodput) restore(b []byte) error {
	var s goodputJSON
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("goodput: decode: %w", err)
	}
	m, err := goodput.Restore(s.Machine)
	if err != nil {
		return fmt.Errorf("goodput: %w", err)
	}
	v := m.View(time.Time{})
	*g = Goodput{m: m, launched: v.Phase != "idle", round: v.Round, world: s.World, waiting: s.Waiting, logged: v.Restarts}
	if n := len(v.Latest); n > 0 && !v.Latest[n-1].Done && v.Restarts > 0 {
		// The latest restart was still open: it is logged when it
		// completes, under this master.
		g.logged, g.pending = v.Restarts-1, true
	}
	if len(s.Stopping) > 0 {
		g.stopping = map[string]bool{}
		for _, n := range s.Stopping {
			g.stopping[n] = true
		}
	}
	return nil
}

// Marshal is the accounting's whole state, for the snapshot and
// EventGoodput; nil before the job's launch. It clears Dirty.
func (g *Goodput) Marshal() ([]byte, error) {
	if !g.launched {
		return nil, nil
	}
	m, err := g.m.MarshalState()
	if err != nil {
		return nil, fmt.Errorf("goodput: %w", err)
	}
	s := goodputJSON{Machine: m, World: g.world, Waiting: g.waiting}
	for n := range g.stopping {
		s.Stopping = append(s.Stopping, n)
	}
	slices.Sort(s.Stopping)
	b, err := json.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("goodput: encode: %w", err)
	}
	g.dirty, g.moved = false, false
	return b, nil
}

// Dirty says inputs outside the journal changed the state since the last
// Marshal.
func (g *Goodput) Dirty() bool { return g.dirty }

// Urgent reports whether an input outside the journal moved the machine's
// milestone (a phase ended, a restart completed, a hang began or ended)
// since Marshal: the driver journals the state without waiting, since
// the agents do not send that input again to a restarted master.
func (g *Goodput) Urgent() bool { return g.moved }

// outside applies an input that is not journaled, noting whether it moved
// the milestone.
func (g *Goodput) outside(apply func()) {
	g.dirty = true
	before := g.m.Milestone()
	apply()
	if g.m.Milestone() != before {
		g.moved = true
	}
}

// MarkDirty says the state last marshalled was not journaled after all.
func (g *Goodput) MarkDirty() { g.dirty, g.moved = g.launched, g.launched }

// Launched reports whether the job's launch started the accounting.
func (g *Goodput) Launched() bool { return g.launched }

// View is the accounting as of now.
func (g *Goodput) View(now time.Time) goodput.View { return g.m.View(now) }

// Round is the round the accounting follows: the one formed last.
func (g *Goodput) Round() int64 { return g.round }

// Launch starts the job's wall time at its launch (Apply: the job's first
// configuration); later calls do nothing.
func (g *Goodput) Launch(at time.Time) {
	g.m.Launched(at)
	g.launched = true
}

// The inputs outside the journal. The driver moves the agents' times into
// its own clock before calling them.

// Progress: node's worker rank reported step at at.
func (g *Goodput) Progress(node string, round int64, rank int, step int64, at time.Time) {
	g.outside(func() { g.m.Progress(goodput.Progress{Round: round, Node: node, Rank: rank, Step: step, At: at}) })
}

// NodeEventKind is a moment of a node's workers that its agent reports.
type NodeEventKind int

// Node event kinds.
const (
	WorkersStarted NodeEventKind = iota + 1
	RestoreStarted
	Resumed
	CheckpointSaved
	// LastStep: the node's workers of the round all exited, the newest
	// having completed Step at At (read from their step slots).
	LastStep
)

// NodeEvent is one moment of a node's workers, in the master's clock.
type NodeEvent struct {
	Kind     NodeEventKind
	Round    int64
	At       time.Time
	Step     int64          // Resumed: the step restored (-1: none loaded, unknown); CheckpointSaved: the step saved; LastStep: the newest completed
	From     goodput.Source // Resumed
	Blocking time.Duration  // CheckpointSaved
	Durable  bool           // CheckpointSaved
	// Resumed: the node the agent fetched the step from (From FromPeer or
	// FromBackup) and how long that took, and how long the workers' load
	// took.
	Peer        string
	Fetch, Load time.Duration
}

// Event applies a node's event.
func (g *Goodput) Event(node string, e NodeEvent) {
	g.outside(func() { g.event(node, e) })
}

func (g *Goodput) event(node string, e NodeEvent) {
	switch e.Kind {
	case WorkersStarted:
		g.m.WorkersStarted(e.Round, node, e.At)
	case RestoreStarted:
		g.m.RestoreStarted(e.Round, node, e.At)
	case Resumed:
		// Step -1: the workers loaded no Rover checkpoint. The script may
		// restore one of its own (torch.save), so the step stays unknown:
		// the round's first report implies it.
		if e.Step >= 0 {
			g.m.Resumed(e.Round, node, e.Step, e.From, e.At)
			g.m.NodeRestored(e.Round, node, goodput.NodeRestore{Step: e.Step, From: e.From, Peer: e.Peer, Fetch: e.Fetch, Load: e.Load})
		}
	case CheckpointSaved:
		g.m.CheckpointSaved(goodput.Save{Round: e.Round, Node: node, Step: e.Step, Blocking: max(e.Blocking, 0), Durable: e.Durable, At: e.At})
	case LastStep:
		g.m.LastStep(goodput.Progress{Round: e.Round, Node: node, Step: e.Step, At: e.At})
	}
}

// Hang: the hang timer declared the job hung (on), or its progress
// resumed (off).
func (g *Goodput) Hang(on bool, at time.Time) {
	g.outside(func() {
		if on {
			g.m.HangDetected(at)
		} else {
			g.m.HangEnded(at)
		}
	})
}

// TakeRestart returns the restart that completed (its new round's first
// step) since the last call, once; ok is false if none did.
func (g *Goodput) TakeRestart(now time.Time) (goodput.Restart, bool) {
	if !g.pending {
		return goodput.Restart{}, false
	}
	v := g.m.View(now)
	if n := len(v.Latest); n > 0 && v.Latest[n-1].Done && v.Restarts > g.logged {
		g.logged, g.pending = v.Restarts, false
		return v.Latest[n-1], true
	}
	return goodput.Restart{}, false
}

// follow feeds the accounting what an applied event changed (see
// goodputChange). The order is the machine's: the failure, the round's
// stop, the nodes stopped, the job's end or the new round, then the
// overlays.
func (g *Goodput) follow(c goodputChange) {
	before, after, at := c.before, c.after, c.at
	if !g.Launched() {
		if !c.formed() {
			return
		}
		// A job whose state predates goodput is accounted from its next
		// round on.
		g.Launch(at)
	}
	if c.checkBefore && !c.checkAfter {
		g.m.NodeCheckEnded(at)
	}
	stopped := before.Round > 0 && !before.Open && before.Job == rendezvous.Running && after.Round > before.Round
	if c.fail != nil && (stopped || after.Job == rendezvous.Failed && before.Job == rendezvous.Running) {
		g.m.WorkerFailed(goodput.Failure{Round: int64(before.Round), Node: c.fail.Node, Cause: c.fail.Cause, DiedAt: c.fail.DiedAt, At: at})
		g.pending = true
	}
	if stopped {
		why := goodput.StopMembership
		if c.fail != nil {
			why = goodput.StopFailure
		}
		g.m.RoundStopped(int64(before.Round), why, at)
		g.pending = true
		g.stopping = map[string]bool{}
		for _, n := range g.world {
			g.stopping[n] = true
		}
	}
	for _, n := range c.stopped {
		g.m.WorkersStopped(g.round, n, at)
		delete(g.stopping, n)
	}
	if after.Job != rendezvous.Running && before.Job == rendezvous.Running {
		if after.Job == rendezvous.Succeeded {
			g.m.RoundStopped(int64(before.Round), goodput.StopSuccess, at)
		}
		g.m.Ended(after.Job == rendezvous.Succeeded, at)
		return
	}
	if c.formed() {
		g.round, g.world, g.stopping = int64(after.Round), c.world(), nil
		g.m.RoundFormed(g.round, g.world, at)
		g.waiting = false
	}
	if !c.checkBefore && c.checkAfter {
		g.m.NodeCheckStarted(at)
	}
	// Waiting for nodes: a restart round open below its minimum once every
	// node of the old world is stopped (before, the round waits for them).
	waiting := after.Job == rendezvous.Running && after.Open && after.Round > 1 && len(g.stopping) == 0 && c.short()
	if waiting != g.waiting {
		g.waiting = waiting
		if waiting {
			g.m.WaitingForNodes(at)
		} else {
			g.m.NodesJoined(at)
		}
	}
}

// goodputChange is what follow needs of an applied event: before and after
// are the rendezvous's status around it, fail the failure it reported (nil
// for other events), stopped the nodes whose workers it showed stopped (a
// join of the next round, a loss, an exclusion), checkBefore and checkAfter
// whether a node check ran; world and short read the rendezvous after it.
type goodputChange struct {
	at                      time.Time
	before, after           rendezvous.Status
	fail                    *goodputFailure
	stopped                 []string
	checkBefore, checkAfter bool
	world                   func() []string // the closed round's members, sorted
	short                   func() bool     // the open round has too few nodes for a world
}

// goodputFailure is the worker failure an event reported: its node, its
// diagnosis' cause and when the worker died (zero: unknown).
type goodputFailure struct {
	Node   string
	Cause  string
	DiedAt time.Time
}

func (c goodputChange) formed() bool {
	return c.after.Job == rendezvous.Running && !c.after.Open && (c.before.Open || c.after.Round != c.before.Round)
}

// followGoodput feeds the goodput accounting what event e changed.
func (s *State) followGoodput(e *Event, before rendezvous.Status, checkBefore bool, fail *goodputFailure) {
	if !s.Members.Configured() {
		return
	}
	c := goodputChange{at: e.Time, before: before, after: s.Members.Status(), fail: fail,
		stopped: s.stopped, checkBefore: checkBefore, checkAfter: s.checkRunning()}
	s.stopped = nil
	switch e.Type {
	case EventJoin:
		c.stopped = append(c.stopped, e.Join.NodeID)
	case EventNodeLost:
		c.stopped = append(c.stopped, e.Node)
	}
	rdzv := s.Members.Rendezvous()
	c.world = func() []string {
		w := rdzv.Snapshot().World
		ids := make([]string, len(w))
		for i, m := range w {
			ids[i] = m.NodeID
		}
		slices.Sort(ids)
		return ids
	}
	c.short = func() bool {
		snap := rdzv.Snapshot()
		return len(snap.Joined) < snap.Config.MinNodes
	}
	s.Goodput.follow(c)
}

// checkRunning reports whether a node check runs.
func (s *State) checkRunning() bool {
	if s.Check == nil {
		return false
	}
	_, ok := s.Check.Machine().Running()
	return ok
}

// restoreGoodput applies a replayed EventGoodput: the state it carries
// replaces the accounting. Applied live it changes nothing.
func (s *State) restoreGoodput(b []byte) error {
	if s.Live || len(b) == 0 {
		return nil
	}
	g, err := RestoreGoodput(b)
	if err != nil {
		return err
	}
	s.Goodput = g
	return nil
}
