package nodemanager

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/roverml/rover/internal/platform"
)

// NodeState is where the node of one rank stands.
type NodeState int

// Node states. Pending and Running nodes are live; Succeeded and Failed are
// final for the rank.
const (
	Pending   NodeState = iota + 1 // created, not yet running
	Running                        // the platform reports it running
	Succeeded                      // exited 0; not relaunched
	Failed                         // ended, and its relaunch budget (or the job's) is used up
	Removed                        // scaled away ([Manager.Scale]); a later scale up brings the rank back
)

var stateNames = [...]string{Pending: "Pending", Running: "Running", Succeeded: "Succeeded", Failed: "Failed", Removed: "Removed"}

func (s NodeState) String() string {
	if s >= Pending && s <= Removed {
		return stateNames[s]
	}
	return fmt.Sprintf("NodeState(%d)", int(s))
}

func (s NodeState) live() bool { return s == Pending || s == Running }

// slot is one rank of one group: the node that holds it now, and its history.
type slot struct {
	group    int // index in spec.Groups
	rank     int
	relaunch int    // the current node's NodeSpec.Relaunch: relaunches plus rescales
	rescaled int    // nodes created by scaling the rank back up; not relaunches
	id       string // current node id
	state    NodeState
	host     string
	since    time.Time // when the current node was created, or last changed state
	timedOut bool      // pending past the timeout (reported once)
	held     bool      // the platform may still hold id (no Deleted seen)
	memory   int64     // memory override from RelaunchWithMoreMemory; 0: the group's
	milliCPU int64     // CPU override from MigrateNode; 0: the group's
	// migrating: the current node is being deleted for MigrateNode; its
	// successor is created once it is gone.
	migrating bool
	lastExit  string // how the previous or current node ended
	reason    string // the latest decision about this rank
	// seen: the platform has reported the current node (any event), so
	// it no longer counts against startWindow. Not persisted: a restored
	// manager sees its nodes again in the platform's first report.
	seen bool
	// usage is what the rank's nodes used, for right-sizing (rightsize.go).
	usage *rankUsage
}

// startWindow bounds the nodes asked of the platform and not yet reported
// by it. A group's ranks are created as the platform takes the earlier
// ones, not all at Start: a job of a million replicas holds 64 slots, not
// a million, before its first node starts, and a job stopped while its
// nodes start has few creates left to skip.
const startWindow = 64

// Manager is the node manager of one job. It is not safe for concurrent use;
// the master's driver serialises calls.
type Manager struct {
	spec    Spec
	started bool
	slots   [][]*slot // by group index, then rank; ranks ever created
	// desired is, by group index, the ranks wanted: 0..desired-1 (Scale),
	// MaxNodes at most, less the ranks given up pending (Removed below
	// it; see wanted).
	desired    []int
	byID       map[string]*slot      // current node ids only
	retired    map[string]bool       // replaced node ids; their events are ignored
	badHosts   []string              // sorted
	relaunches int                   // over the whole job
	causes     map[RelaunchCause]int // relaunches by cause; they sum to relaunches
	fail       *failure
	ended      bool // the job is over: nodes are no longer replaced
	// capacity is, by group index, what the platform showed it can
	// place when the group's nodes last timed out pending
	// ([Manager.Capacity]).
	capacity []capacity
}

// New returns a manager for spec that has created nothing yet; call
// [Manager.Start].
func New(spec Spec) (*Manager, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	m := &Manager{spec: spec, byID: make(map[string]*slot), retired: make(map[string]bool), causes: make(map[RelaunchCause]int)}
	for _, g := range spec.Groups {
		m.desired = append(m.desired, g.nodes())
		m.capacity = append(m.capacity, capacity{nodes: -1})
	}
	return m, nil
}

// Err is nil unless the job failed; then it says why and wraps
// [ErrTooFewNodes], [ErrCriticalNode] or [ErrPendingTimeout].
func (m *Manager) Err() error {
	if m.fail == nil {
		return nil
	}
	return m.fail
}

// Start creates every group's nodes (GroupSpec.Nodes, else MaxNodes), ranks
// 0 and up. Later calls return nothing.
func (m *Manager) Start(now time.Time) []Command {
	if m.started {
		return nil
	}
	m.started = true
	m.slots = make([][]*slot, len(m.spec.Groups))
	return m.fill(now, nil)
}

// fill creates the ranks below each group's desired count that have no
// slot yet, while fewer than startWindow nodes wait for the platform to
// report them. why gives each create's reason (nil: the group starting).
func (m *Manager) fill(now time.Time, why func(g GroupSpec, rank int) string) []Command {
	if !m.started || m.fail != nil || m.ended {
		return nil
	}
	unseen := 0
	for _, g := range m.slots {
		for _, s := range g {
			if s.state == Pending && !s.seen {
				unseen++
			}
		}
	}
	var cmds []Command
	for gi, g := range m.spec.Groups {
		for r := len(m.slots[gi]); r < m.desired[gi] && unseen < startWindow; r++ {
			reason := fmt.Sprintf("start %s rank %d of %d", g.name(), r, m.desired[gi])
			if why != nil {
				reason = why(g, r)
			}
			s := &slot{group: gi, rank: r}
			m.slots[gi] = append(m.slots[gi], s)
			cmds = append(cmds, m.create(s, now, reason))
			unseen++
		}
	}
	return cmds
}

// uncreated counts the ranks of group gi that are wanted and have no slot
// yet (fill creates them): they count as usable and expected.
func (m *Manager) uncreated(gi int) int {
	if !m.started {
		return 0
	}
	return max(0, m.desired[gi]-len(m.slots[gi]))
}

// create points s at a new node (its current relaunch) and asks for it.
func (m *Manager) create(s *slot, now time.Time, reason string) Command {
	g := m.spec.Groups[s.group]
	s.id = nodeID(m.spec.Job, g.name(), s.rank, s.relaunch)
	m.byID[s.id] = s
	spec := platform.NodeSpec{
		Job: m.spec.Job, Group: g.name(), Rank: s.rank, Relaunch: s.relaunch, ID: s.id,
		Argv: slices.Clone(g.Argv), Env: maps.Clone(g.Env), Image: g.Image,
		AvoidHosts: slices.Clone(m.badHosts),
	}
	sz := m.resources(s)
	spec.Resources = sz.r
	if sz.why != "" {
		reason += "; " + sz.why
	}
	if m.spec.RightSize {
		if s.usage == nil {
			s.usage = &rankUsage{}
		}
		s.usage.nodeStarted(sz.milliCPU)
	}
	s.state, s.host, s.since, s.timedOut, s.held, s.reason, s.seen = Pending, "", now, false, true, reason, false
	return Command{Kind: CreateNode, Spec: spec, NodeID: s.id, Reason: reason, RightSized: sz.changes}
}

// current returns the slot whose current node is id, or nil for an unknown,
// replaced or final node, or once the job failed (unless it ended: then
// events still record how nodes end).
func (m *Manager) current(id string) *slot {
	if m.fail != nil && !m.ended {
		return nil
	}
	s := m.byID[id]
	if s == nil || !s.state.live() {
		return nil
	}
	return s
}

// Observe applies a platform event. Events for unknown or replaced node ids,
// repeats, and events after the job failed change nothing. A node the
// platform reports makes room for the next rank still to be created.
func (m *Manager) Observe(ev platform.Event, now time.Time) []Command {
	cmds := m.observe(ev, now)
	// A node that came may let the group give up one that waits
	// (PendingSkip keeps waiting while the group needs it).
	cmds = append(cmds, m.expire(now)...)
	return append(cmds, m.fill(now, nil)...)
}

func (m *Manager) observe(ev platform.Event, now time.Time) []Command {
	cmds := m.expire(now)
	s := m.current(ev.NodeID)
	if s == nil {
		return cmds
	}
	s.seen = true
	if ev.Host != "" {
		s.host = ev.Host
	}
	if s.migrating && (ev.Kind == platform.Exited || ev.Kind == platform.Deleted) {
		// The migrated node is gone: its successor takes the rank now,
		// not before, so that it never runs beside it (a PS's address
		// is the rank's).
		return append(cmds, m.finishMigration(s, ev, now)...)
	}
	switch ev.Kind {
	case platform.Running:
		if s.state == Pending {
			s.state, s.since, s.timedOut = Running, now, false
			s.reason = fmt.Sprintf("node %s is running", s.id)
		}
	case platform.Exited:
		if !ev.Failed() {
			s.state, s.since, s.lastExit = Succeeded, now, ev.Describe()
			s.reason = fmt.Sprintf("node %s %s: succeeded, not relaunched", s.id, ev.Describe())
			return append(cmds, m.decided(s.group)...)
		}
		cause := ev.Describe()
		if ev.Reason == platform.ReasonOOMKilled && !m.ended {
			// DLRover's rule: a node killed for memory comes back with more.
			if next := m.oomMemory(s); next > 0 {
				s.memory = next
				cause = fmt.Sprintf("%s; memory raised to %d bytes", cause, next)
			}
		}
		return append(cmds, m.replace(s, eventCause(ev), cause, now)...)
	case platform.Deleted:
		s.held = false
		return append(cmds, m.replace(s, eventCause(ev), ev.Describe(), now)...)
	}
	return cmds
}

// Lost applies the master's finding that a node's agent is gone (heartbeat or
// session expired; see internal/liveness), with cause in words. The node is
// replaced like a failed one.
func (m *Manager) Lost(nodeID, cause string, now time.Time) []Command {
	cmds := m.expire(now)
	if s := m.current(nodeID); s != nil {
		cmds = append(cmds, m.replace(s, CauseNodeLost, "was lost: "+cause, now)...)
	}
	return cmds
}

// Act applies a diagnosis action. Actions naming an unknown, replaced or final
// node change nothing; so does asking for less memory than the node has.
func (m *Manager) Act(a Action, now time.Time) []Command {
	cmds := m.expire(now)
	if a.Kind == MarkHostBad {
		if a.Host != "" && !slices.Contains(m.badHosts, a.Host) {
			m.badHosts = append(m.badHosts, a.Host)
			slices.Sort(m.badHosts)
		}
		return cmds
	}
	s := m.current(a.NodeID)
	if s == nil {
		return cmds
	}
	if a.Kind == MigrateNode {
		return append(cmds, m.migrate(s, a, now)...)
	}
	cause := "diagnosis: " + a.Reason
	if a.Kind == RelaunchWithMoreMemory {
		if a.MemoryBytes <= m.memory(s) {
			return cmds
		}
		s.memory = a.MemoryBytes
		cause = fmt.Sprintf("diagnosis: %s; memory raised to %d bytes", a.Reason, a.MemoryBytes)
	} else if a.Kind != RelaunchNode {
		return cmds
	}
	return append(cmds, m.replace(s, actionCause(a), cause, now)...)
}

func (m *Manager) memory(s *slot) int64 {
	if s.memory > 0 {
		return s.memory
	}
	return m.spec.Groups[s.group].Memory()
}

// decided returns SucceedJob once every wanted node of group gi has
// succeeded, when the group decides the job (GroupSpec.DecidesJob).
func (m *Manager) decided(gi int) []Command {
	g := m.spec.Groups[gi]
	if !g.DecidesJob || m.ended || m.fail != nil || m.uncreated(gi) > 0 {
		return nil
	}
	n := 0
	for _, s := range m.slots[gi] {
		switch s.state {
		case Succeeded:
			n++
		case Removed:
		default:
			return nil
		}
	}
	if n == 0 {
		return nil
	}
	return []Command{{Kind: SucceedJob, Reason: fmt.Sprintf("all %d %s nodes succeeded: the %s group decides the job's outcome", n, g.name(), g.name())}}
}

// End records that the job is over (it succeeded, or failed for a reason
// outside the manager): from now on events record how nodes end, but no
// node is relaunched, and a failed node fails nothing more.
func (m *Manager) End() { m.ended = true }

// replace handles a live node that ended without success: relaunch it while
// its budget and the job's last, else mark the rank Failed and fail the job
// if it cannot go on. rc is the relaunch's cause, cause the same in words.
func (m *Manager) replace(s *slot, rc RelaunchCause, cause string, now time.Time) []Command {
	g := m.spec.Groups[s.group]
	var cmds []Command
	old := s.id
	who := fmt.Sprintf("node %s (%s rank %d)", old, g.name(), s.rank)
	if s.held {
		why := "removing it before its replacement"
		if m.ended {
			why = "removing it: the job is over"
		}
		cmds = append(cmds, Command{Kind: DeleteNode, NodeID: old, Reason: fmt.Sprintf("%s %s; %s", who, cause, why)})
	}
	delete(m.byID, old)
	m.retired[old] = true
	s.lastExit = cause
	if m.ended {
		s.state, s.since, s.timedOut = Failed, now, false
		s.reason = fmt.Sprintf("%s %s after the job ended; not relaunched", who, cause)
		return cmds
	}
	budget := g.budget(s.rank)
	jobLeft := m.spec.MaxRelaunches == 0 || m.relaunches < m.spec.MaxRelaunches
	if s.relaunches() < budget && jobLeft {
		s.relaunch++
		m.relaunches++
		m.causes[rc]++
		reason := fmt.Sprintf("%s %s; relaunching it as %s (relaunch %d of %d)",
			who, cause, nodeID(m.spec.Job, g.name(), s.rank, s.relaunch), s.relaunches(), budget)
		c := m.create(s, now, reason)
		c.Cause = rc
		return append(cmds, c)
	}
	s.state, s.since, s.timedOut = Failed, now, false
	why := fmt.Sprintf("its relaunch budget of %d is used up", budget)
	if !jobLeft && s.relaunches() < budget {
		why = fmt.Sprintf("the job's relaunch budget of %d is used up", m.spec.MaxRelaunches)
	}
	s.reason = fmt.Sprintf("%s %s after %d relaunches; not relaunched: %s", who, cause, s.relaunches(), why)
	switch usable := m.usable(s.group); {
	case g.critical(s.rank):
		cmds = append(cmds, m.failJob(ErrCriticalNode, fmt.Sprintf("critical %s", s.reason)))
	case usable < g.MinNodes:
		cmds = append(cmds, m.failJob(ErrTooFewNodes, fmt.Sprintf("%s; %s has %s left, fewer than its minimum %d", s.reason, g.name(), nodes(usable), g.MinNodes)))
	}
	return cmds
}

// usable counts the group's nodes that are live or succeeded, or yet to
// be created.
func (m *Manager) usable(gi int) int {
	n := m.uncreated(gi)
	for _, s := range m.slots[gi] {
		if s.state != Failed && s.state != Removed {
			n++
		}
	}
	return n
}

func (m *Manager) failJob(kind error, reason string) Command {
	m.fail = &failure{kind: kind, reason: reason}
	return Command{Kind: FailJob, Reason: reason}
}

// nodes is "1 usable node" or "n usable nodes".
func nodes(n int) string {
	if n == 1 {
		return "1 usable node"
	}
	return fmt.Sprintf("%d usable nodes", n)
}
