package nodemanager

import (
	"slices"
	"time"

	"github.com/roverml/rover/internal/platform"
)

// Status is a snapshot for `rover status` and logs.
type Status struct {
	Job        string
	Failed     bool
	Reason     string // why the job failed; empty while it has not
	Relaunches int    // the relaunches spent of Budget: a scaling move (rescale, migration) is none    // over the whole job
	// RelaunchCauses counts Relaunches by cause (only causes seen; nil
	// for none).
	RelaunchCauses map[RelaunchCause]int
	BadHosts       []string
	Nodes          []NodeStatus // by group (spec order), then rank
}

// NodeStatus is one rank of one group.
type NodeStatus struct {
	Group      string
	Rank       int
	NodeID     string // the current node, or the last one of a Failed rank
	State      NodeState
	Relaunches int
	Budget     int // the rank's relaunch budget
	Critical   bool
	Host       string
	Since      time.Time // when the node entered State (Pending: when it was created)
	LastExit   string    // how the previous node of this rank ended, in words
	Reason     string    // the latest decision about this rank
	// RightSize is what the rank's workers used and what its next node
	// would ask for; nil unless Spec.RightSize is on and the rank has a
	// usage record.
	RightSize *RightSizeStatus
	// MilliCPU is the CPU the rank's nodes ask for: a migration's, else
	// the group's request (0: none known).
	MilliCPU int64
}

// RightSizeStatus is a rank's right-sizing: what its workers were seen to
// use, and what its next node (a relaunch) would ask for, and why.
type RightSizeStatus struct {
	Observed
	// Next is the request of the rank's next node (the template's values
	// filled in; zero fields: none asked for).
	Next platform.Resources
	// Why says what right-sizing would change; "" when the next node asks
	// for what is configured.
	Why string
}

// Status returns a snapshot; it shares nothing with the manager.
func (m *Manager) Status() Status {
	st := Status{Job: m.spec.Job, Relaunches: m.relaunches, BadHosts: slices.Clone(m.badHosts)}
	st.RelaunchCauses = m.causeCounts()
	if m.fail != nil {
		st.Failed, st.Reason = true, m.fail.reason
	}
	for gi, slots := range m.slots { // none before Start
		g := m.spec.Groups[gi]
		for _, s := range slots {
			st.Nodes = append(st.Nodes, NodeStatus{
				Group: g.name(), Rank: s.rank, NodeID: s.id, State: s.state, Relaunches: s.relaunches(),
				Budget: g.budget(s.rank), Critical: g.critical(s.rank), Host: s.host, Since: s.since,
				LastExit: s.lastExit, Reason: s.reason, RightSize: m.rightSizeStatus(s), MilliCPU: m.cpuRequest(s),
			})
		}
	}
	return st
}

// causeCounts copies the relaunches by cause, the causes seen only; nil
// for none.
func (m *Manager) causeCounts() map[RelaunchCause]int {
	var out map[RelaunchCause]int
	for c, n := range m.causes {
		if n > 0 {
			if out == nil {
				out = make(map[RelaunchCause]int)
			}
			out[c] = n
		}
	}
	return out
}

// rightSizeStatus is slot s's RightSizeStatus; nil without a usage record.
func (m *Manager) rightSizeStatus(s *slot) *RightSizeStatus {
	if !m.spec.RightSize || s.usage == nil || (s.usage.peak == 0 && len(s.usage.cpu) == 0) {
		return nil
	}
	sz := m.resources(s)
	return &RightSizeStatus{Observed: sz.seen, Next: sz.full, Why: sz.why}
}
