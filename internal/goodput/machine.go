package goodput

import (
	"slices"
	"time"
)

// Machine is the goodput accounting of one job. Its methods are events;
// each takes the time it happened at. An event older than the newest one
// seen is taken as happening at the newest time (time never runs back), an
// event of another round than the current one is ignored, and so is an event
// before [Machine.Launched] or after [Machine.Ended]. Not safe for
// concurrent use.
type Machine struct {
	cfg Config

	launched bool
	launchAt time.Time
	at       time.Time // every instant up to at is attributed
	phase    phase
	phaseAcc time.Duration // time attributed to the phase's own cause in it so far
	done     bool          // ended
	round    int64
	nodes    map[string]bool // the current round's nodes
	reported map[string]bool // nodes that ended the current phase

	// Overlays: causes in force whatever the phase (see attribution).
	nodeCheck, hung, waiting bool

	goodput time.Duration            // credited step time
	pending time.Duration            // training time since the last new step
	badput  [NumCauses]time.Duration // attributed badput
	tail    *tail                    // a failed round's unsettled last steps

	frontier    int64 // newest step completed (kept) so far
	hasFrontier bool
	stepTime    time.Duration // of the latest steps, per step
	roundBase   time.Duration // goodput when the round's first step completed
	samples     []sample      // since the last durable checkpoint, step ascending
	durable     int64         // step of the last durable checkpoint
	hasDurable  bool
	// blocks are the latest saves' blocking counted, oldest first: the
	// job's blocking for a save is the largest any node reports, and the
	// nodes' reports of a save come apart (each heartbeat carries one
	// node's saves of the last second).
	blocks []saveBlock

	restarts  []Restart // the latest, oldest first; the last may be open
	open      bool      // restarts[len-1] is in progress
	failures  map[string]int64
	nRestarts int64
	lostSteps int64
	saves     int64
}

// tail is the training time of a failed round after its last reported
// step: steps completed but not yet reported, and the step interrupted. The
// resumed step decides how much of it was kept.
type tail struct {
	dur   time.Duration
	step  int64 // the round's last reported step
	round int64 // the failed round
}

// sample is the credited goodput when the job had completed step.
type sample struct {
	step int64
	good time.Duration
}

type saveKey struct{ round, step int64 }

// saveBlock is the blocking counted for a save.
type saveBlock struct {
	key   saveKey
	block time.Duration
}

// maxSaveBlocks bounds the saves whose blocking is remembered; a node's
// report of a save older than those counts as a new save.
const maxSaveBlocks = 32

// New returns a machine for a job not launched yet.
func New(cfg Config) (*Machine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Machine{cfg: cfg.withDefaults(), failures: map[string]int64{}}, nil
}

// Failure is a worker failure as the master learned of it.
type Failure struct {
	Round int64
	Node  string
	// Cause is the diagnosis' cause ("oom", "signal", ...), counted in
	// View.Failures.
	Cause string
	// DiedAt is when the worker died, as its agent saw it (zero: unknown,
	// taken as At); At is when the master learned of it. The time between is
	// failure detection.
	DiedAt, At time.Time
}

// Progress is a progress report: Node's worker Rank had completed Step of
// Round at At. The job's step is the highest any rank of the round
// reported (ranks of a synchronous job are within a step of each other), so
// Rank does not change the accounting.
type Progress struct {
	Round int64
	Node  string
	Rank  int
	Step  int64
	At    time.Time
}

// Save is a checkpoint save that the workers of Node reported.
type Save struct {
	Round int64
	Node  string
	Step  int64
	// Blocking is how long the save blocked training; the job's blocking
	// for a step is the largest any node reports.
	Blocking time.Duration
	// Durable: the checkpoint is on storage (a restart never resumes below
	// it); otherwise in memory only.
	Durable bool
	At      time.Time
}

// Launched starts the job's wall time: its launch.
func (m *Machine) Launched(at time.Time) {
	if m.launched {
		return
	}
	at = at.Round(0) // wall time only: see advance
	m.launched, m.launchAt, m.at, m.phase = true, at, at, startup
}

// RoundFormed: the rendezvous formed round (higher than any before) with
// nodes. It ends the rendezvous of a restart (and any wait for nodes, and
// a hang) and starts its workers' spawn.
func (m *Machine) RoundFormed(round int64, nodes []string, at time.Time) {
	if !m.live() || round <= m.round {
		return
	}
	m.advance(at)
	if m.phase != startup && m.phase != detect && m.phase != stop && m.phase != rendezvous {
		m.beginRestart(StopMembership.String()) // stopped without telling
	}
	m.round, m.nodes, m.hung, m.waiting = round, map[string]bool{}, false, false // a formed round has its nodes
	for _, n := range nodes {
		m.nodes[n] = true
	}
	if m.open {
		m.restarts[len(m.restarts)-1].NewRound = round
	}
	if m.phase != startup {
		m.setPhase(spawn)
	}
	m.reported = nil
}

// WorkerFailed: a worker of f.Round failed. It ends failure detection and
// starts stopping the round. A failure while the round is stopping anyway
// (a second worker, another node) is part of the same restart.
func (m *Machine) WorkerFailed(f Failure) {
	if !m.live() || f.Round != m.round || !m.phase.running() {
		return
	}
	died := f.DiedAt
	if died.IsZero() || died.After(f.At) {
		died = f.At
	}
	m.advance(died)
	m.countFailure(f.Cause)
	m.beginRestart(f.Cause)
	m.setPhase(detect)
	m.advance(f.At)
	m.setPhase(stop)
}

// RoundStopped: the master stopped round for why. After a failure it is
// part of the restart WorkerFailed began; otherwise (membership, or a
// failure not reported) it begins one. After success the job is stopping,
// since its last reported step: see [Machine.Ended].
func (m *Machine) RoundStopped(round int64, why StopReason, at time.Time) {
	if !m.live() || round != m.round {
		return
	}
	m.advance(at)
	switch {
	case why == StopSuccess && m.phase == training:
		m.stopAfterSuccess()
		m.setPhase(stop)
	case m.phase == detect:
		m.setPhase(stop)
	case m.phase.running() && why != StopSuccess:
		m.beginRestart(why.String())
		m.setPhase(stop)
	}
}

// WorkersStopped: node's workers of round are stopped. Once every node of
// the round said so, stopping ends and the rendezvous begins.
func (m *Machine) WorkersStopped(round int64, node string, at time.Time) {
	if m.nodeDone(round, node, stop, at) {
		m.setPhase(rendezvous)
	}
}

// WorkersStarted: node's workers of round are running. Once every node
// said so, the spawn ends and the workers' init begins.
func (m *Machine) WorkersStarted(round int64, node string, at time.Time) {
	if m.nodeDone(round, node, spawn, at) {
		m.setPhase(initing)
	}
}

// RestoreStarted: node's workers of round began loading a checkpoint. The
// first ends the init.
func (m *Machine) RestoreStarted(round int64, node string, at time.Time) {
	if !m.live() || round != m.round || !m.nodes[node] || (m.phase != spawn && m.phase != initing) {
		return
	}
	m.advance(at)
	m.setPhase(restoring)
}

// Resumed: node's workers of round resumed after step (0 and FromNothing:
// from the start). A step below the newest completed one is a rollback:
// the steps after it are lost progress, once. When every node resumed the
// restore ends and the first step begins.
func (m *Machine) Resumed(round int64, node string, step int64, from Source, at time.Time) {
	if !m.live() || round != m.round || !m.nodes[node] || step < 0 || m.phase < spawn && m.phase != startup || m.phase > firstStep {
		return
	}
	if !from.valid() {
		from = FromNothing
	}
	m.advance(at)
	m.resolve(step, from)
	if m.phase == startup {
		return
	}
	if m.phase != firstStep && m.phase != restoring {
		m.setPhase(restoring) // spawn and init end with a restore
	}
	if m.nodeDone(round, node, restoring, at) {
		m.setPhase(firstStep)
	}
}

// Progress: a worker reports its newest completed step. The first of a
// round ends its first step; later new steps are goodput. Reports of steps
// not above the newest, of another round or a node not in it are ignored.
func (m *Machine) Progress(p Progress) {
	if !m.live() || p.Round != m.round || !m.nodes[p.Node] || p.Step < 0 || !m.phase.running() {
		return
	}
	if m.phase == training && (!m.hasFrontier || p.Step > m.frontier) {
		m.advance(p.At)
		m.credit(p.Step)
		return
	}
	if m.phase != training {
		m.advance(p.At)
		m.firstStepDone(p.Step)
	}
}

// LastStep: node's agent vouches that the workers of p.Round completed at
// most p.Step, read after they all exited (a worker's last steps before a
// kill are in no progress report: reports go at most once a second, and a
// killed worker sends nothing). In the current round's training it is a
// progress report. For a failed round whose tail is not settled yet (from
// its failure or stop until the next round's resume or first step: the
// report races the node's join of the next round) it raises the failed
// round's frontier: the steps between its last report and p.Step are
// priced from the tail (the round's training time after its last report)
// at the latest step time, never more than the tail holds, so the resume
// counts them lost, or kept, like any other. A step not above the
// frontier, of another round, or of a node not in the current round (the
// failed one, or the one that formed after it) changes nothing, so a
// duplicate is harmless.
func (m *Machine) LastStep(p Progress) {
	if !m.live() || !m.nodes[p.Node] || p.Step < 0 {
		return
	}
	if p.Round == m.round && m.phase.running() {
		m.Progress(p)
		return
	}
	t := m.tail
	if t == nil || t.round != p.Round || (m.hasFrontier && p.Step <= m.frontier) {
		return
	}
	kept := t.dur
	if m.stepTime > 0 {
		kept = min(t.dur, mulSat(m.stepTime, p.Step-max(t.step, 0)))
	}
	t.dur -= kept
	t.step = p.Step
	m.goodput = addSat(m.goodput, kept)
	m.frontier, m.hasFrontier = p.Step, true
	m.addSample(m.frontier, m.goodput)
}

// CheckpointSaved: a node's workers saved a checkpoint of s.Step. Its
// blocking time is moved from step time to checkpoint badput; a durable
// save lets the samples below it go. A save in training of a step above
// the newest reported one is that step's report, at the save's time: the
// step completed before its save (a progress report comes up to a second
// later, and a worker's last steps before a failure or its exit may come
// in no report). A durable save is not: it is timed at its persistence,
// which may be long after the step.
func (m *Machine) CheckpointSaved(s Save) {
	if !m.live() || s.Round != m.round || !m.nodes[s.Node] || s.Step < 0 {
		return
	}
	m.advance(s.At)
	if m.phase == training && !s.Durable && s.Step > m.frontier {
		m.credit(s.Step)
	}
	if s.Durable && (!m.hasDurable || s.Step > m.durable) {
		m.durable, m.hasDurable = s.Step, true
		m.prune()
	}
	key := saveKey{s.Round, s.Step}
	i := slices.IndexFunc(m.blocks, func(b saveBlock) bool { return b.key == key })
	if i < 0 {
		m.saves++
		if len(m.blocks) >= maxSaveBlocks {
			m.blocks = slices.Delete(m.blocks, 0, len(m.blocks)-maxSaveBlocks+1)
		}
		m.blocks = append(m.blocks, saveBlock{key: key})
		i = len(m.blocks) - 1
	}
	if b := &m.blocks[i]; s.Blocking > b.block && m.phase == training {
		m.block(s.Blocking - b.block)
		b.block = s.Blocking
	}
}

// NodeCheckStarted and NodeCheckEnded bracket the pre-flight node check.
func (m *Machine) NodeCheckStarted(at time.Time) { m.overlay(&m.nodeCheck, true, at) }
func (m *Machine) NodeCheckEnded(at time.Time)   { m.overlay(&m.nodeCheck, false, at) }

// WaitingForNodes and NodesJoined bracket an open round's wait for enough
// nodes for a world.
func (m *Machine) WaitingForNodes(at time.Time) { m.overlay(&m.waiting, true, at) }
func (m *Machine) NodesJoined(at time.Time)     { m.overlay(&m.waiting, false, at) }

// HangDetected: the job was declared hung. The training time since its last
// new step is hang badput, and so is the time until HangEnded, a new step,
// a restart or a new round.
func (m *Machine) HangDetected(at time.Time) {
	if !m.live() || m.hung {
		return
	}
	m.advance(at)
	m.hung = true
	m.badput[Hang] = addSat(m.badput[Hang], m.pending)
	m.pending = 0
}

// HangEnded: the hang is over.
func (m *Machine) HangEnded(at time.Time) { m.overlay(&m.hung, false, at) }

// Ended: the job ended (succeeded or not). Wall time stops. Training time
// since the last reported step is stopping if the job succeeded (the
// workers' teardown: their last steps are reported before it as a rule,
// and a step not reported is one no report shows), lost otherwise.
func (m *Machine) Ended(succeeded bool, at time.Time) {
	if !m.live() {
		return
	}
	m.advance(at)
	if m.phase == training && succeeded {
		m.stopAfterSuccess()
	}
	m.lose(m.pending)
	m.pending = 0
	if m.tail != nil {
		m.lose(m.tail.dur)
		m.tail = nil
	}
	m.open = false
	m.done = true
	m.setPhase(ended)
}

func (m *Machine) live() bool { return m.launched && !m.done }

// stopAfterSuccess counts the training time since the last reported step
// of a job that succeeded as stopping: the workers' teardown after their
// last step (a checkpoint's wait, the process group's end, the exit), not
// step time. (The soak saw 0.7 s of it counted as goodput per job.)
func (m *Machine) stopAfterSuccess() {
	m.badput[Stopping] = addSat(m.badput[Stopping], m.pending)
	m.pending = 0
	m.hung = false
}

func (m *Machine) overlay(flag *bool, on bool, at time.Time) {
	if !m.live() || *flag == on {
		return
	}
	m.advance(at)
	*flag = on
}

// nodeDone records that node ended phase p of round at; it reports whether
// every node of the round has.
func (m *Machine) nodeDone(round int64, node string, p phase, at time.Time) bool {
	if !m.live() || round != m.round || m.phase != p || !m.nodes[node] {
		return false
	}
	m.advance(at)
	if m.reported == nil {
		m.reported = map[string]bool{}
	}
	m.reported[node] = true
	return len(m.reported) >= len(m.nodes)
}

func (m *Machine) setPhase(p phase) {
	m.phase, m.reported, m.phaseAcc = p, nil, 0
}

func (m *Machine) countFailure(cause string) {
	if len(cause) > MaxCauseLen {
		cause = cause[:MaxCauseLen]
	}
	if _, ok := m.failures[cause]; !ok && len(m.failures) >= MaxFailureCauses {
		cause = OtherCause
	}
	m.failures[cause]++
}

// beginRestart opens a restart record for the current round and holds its
// uncredited training time as the tail.
func (m *Machine) beginRestart(reason string) {
	if m.phase == training {
		m.tail = &tail{dur: m.pending, step: m.frontier, round: m.round}
		m.pending = 0
	}
	m.hung = false
	m.nRestarts++
	if len(reason) > MaxCauseLen {
		reason = reason[:MaxCauseLen]
	}
	m.restarts = append(m.restarts, Restart{Round: m.round, Reason: reason})
	if len(m.restarts) > m.cfg.KeepRestarts {
		m.restarts = slices.Delete(m.restarts, 0, len(m.restarts)-m.cfg.KeepRestarts)
	}
	m.open = true
}

// Milestone is where the machine stands: its phase, round, restarts, the
// nodes that ended the phase and the overlays in force. Steps within a
// phase leave it unchanged. A driver that keeps the state outside its
// journal writes the state when the milestone moves: what moved it (a
// node's lifecycle event) is not sent again after a restart of the driver.
type Milestone struct {
	Phase, Reported int
	Round, Restarts int64
	// TailStep is the failed round's last step while its tail is
	// unsettled (-1 without one): a LastStep moves it.
	TailStep                      int64
	Launched, Done                bool
	NodeCheck, Hung, WaitForNodes bool
}

// Milestone returns the machine's milestone.
func (m *Machine) Milestone() Milestone {
	tailStep := int64(-1)
	if m.tail != nil {
		tailStep = m.tail.step
	}
	return Milestone{Phase: int(m.phase), Reported: len(m.reported), Round: m.round, Restarts: m.nRestarts, TailStep: tailStep,
		Launched: m.launched, Done: m.done, NodeCheck: m.nodeCheck, Hung: m.hung, WaitForNodes: m.waiting}
}
