package jobstate

import (
	"encoding/json"

	"github.com/roverml/rover/internal/diagnosis"
	"github.com/roverml/rover/internal/nodemanager"
)

// FleetNotice is one thing the job learned that the node manager must act
// on: a node's agent lost, or a node action a diagnosis calls for.
type FleetNotice struct {
	Lost   bool               // the node's agent is gone (heartbeats, session)
	Node   string             // the node id
	Reason string             // why, in words
	Action nodemanager.Action // when !Lost: a diagnosis action
}

// Fleet is the node manager's side of the job, when the master runs the
// job's nodes: the manager's state as last journaled, the nodes it runs
// (which the rendezvous expects), and the notices queued for it.
type Fleet struct {
	saved   json.RawMessage
	expect  int
	notices []FleetNotice
}

// NewFleet returns the fleet of a job whose node manager journaled nothing.
func NewFleet() *Fleet { return &Fleet{} }

// RestoreFleet returns the fleet whose Saved state a snapshot kept. The
// nodes expected are not kept: the manager journals them again.
func RestoreFleet(saved json.RawMessage) *Fleet { return &Fleet{saved: saved} }

// Save applies a fleet event: the manager's state, and the nodes it runs
// (0: unchanged). It reports whether the rendezvous must expect them.
func (f *Fleet) Save(state json.RawMessage, nodes int) bool {
	f.saved = state
	if nodes <= 0 {
		return false
	}
	f.expect = nodes
	return true
}

// Saved is the manager's journaled state (nil: none yet).
func (f *Fleet) Saved() json.RawMessage { return f.saved }

// Expect is the nodes the manager runs, 0 before it said.
func (f *Fleet) Expect() int { return f.expect }

// Notice queues n for the node manager.
func (f *Fleet) Notice(n FleetNotice) { f.notices = append(f.notices, n) }

// TakeNotices returns the queued notices and empties the queue.
func (f *Fleet) TakeNotices() []FleetNotice {
	n := f.notices
	f.notices = nil
	return n
}

// DiagnosisNotices are the node actions a failed round's diagnosis d calls
// for, if any. fs are the round's failures; the root failure's node is the
// one among them at the root's node rank. The host comes first: the
// node's replacement must avoid it.
func DiagnosisNotices(d diagnosis.Decision, fs []Failure) []FleetNotice {
	if d.FailFast {
		return nil
	}
	var node, host string
	for _, f := range fs {
		if f.NodeRank == d.Root.NodeRank && f.NodeID != "" {
			node, host = f.NodeID, f.Host
			break
		}
	}
	if node == "" {
		return nil
	}
	var out []FleetNotice
	if d.MarkHostBad && host != "" {
		out = append(out, FleetNotice{Node: node, Reason: d.Reason, Action: nodemanager.Action{Kind: nodemanager.MarkHostBad, Host: host, Reason: d.Reason}})
	}
	switch d.Action {
	case diagnosis.RelaunchNode:
		out = append(out, FleetNotice{Node: node, Reason: d.Reason, Action: nodemanager.Action{Kind: nodemanager.RelaunchNode, NodeID: node, Reason: d.Reason}})
	case diagnosis.RelaunchWithMoreMemory:
		out = append(out, FleetNotice{Node: node, Reason: d.Reason, Action: nodemanager.Action{Kind: nodemanager.RelaunchWithMoreMemory, NodeID: node, MemoryBytes: d.Memory, Reason: d.Reason}})
	}
	return out
}
