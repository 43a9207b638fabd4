package master

import (
	"encoding/json"

	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/diagnosis"
	"github.com/roverml/rover/internal/master/jobstate"
	"github.com/roverml/rover/internal/nodemanager"
)

// The core's side of the node manager (fleet.go): it journals the
// manager's state (eventFleet), fails the job when the manager says so
// (eventFailNodes), and queues for the fleet what only the core learns: a
// node's agent lost, and the diagnosis of a failed round that calls for a
// node's relaunch.

// fleetNotice is one thing the core learned that the fleet must act on.
type fleetNotice struct {
	lost   bool               // the node's agent is gone (heartbeats, session)
	node   string             // the node id
	reason string             // why, in words
	action nodemanager.Action // when !lost: a diagnosis action
}

// noticeLocked queues n for the fleet, unless the core is replaying its
// journal (the fleet's restored state has seen them) or owns no nodes.
func (c *core) noticeLocked(n fleetNotice) {
	if !c.live || !c.fleetOn {
		return
	}
	c.notices = append(c.notices, n)
	select {
	case c.noticeCh <- struct{}{}:
	default:
	}
}

// takeNotices returns the queued notices and empties the queue.
func (c *core) takeNotices() []fleetNotice {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.notices
	c.notices = nil
	return n
}

// noticeDiagnosisLocked queues the node action a failed round's diagnosis
// calls for, if any. fs are the round's failures; the root failure's node
// is the one among them at the root's node rank.
func (c *core) noticeDiagnosisLocked(d diagnosis.Decision, fs []jobstate.Failure) {
	if d.FailFast {
		return
	}
	var node, host string
	for _, f := range fs {
		if f.NodeRank == d.Root.NodeRank && f.NodeID != "" {
			node, host = f.NodeID, f.Host
			break
		}
	}
	if node == "" {
		return
	}
	// The host first: the node's replacement must avoid it.
	if d.MarkHostBad && host != "" {
		c.noticeLocked(fleetNotice{node: node, reason: d.Reason, action: nodemanager.Action{Kind: nodemanager.MarkHostBad, Host: host, Reason: d.Reason}})
	}
	switch d.Action {
	case diagnosis.RelaunchNode:
		c.noticeLocked(fleetNotice{node: node, reason: d.Reason, action: nodemanager.Action{Kind: nodemanager.RelaunchNode, NodeID: node, Reason: d.Reason}})
	case diagnosis.RelaunchWithMoreMemory:
		c.noticeLocked(fleetNotice{node: node, reason: d.Reason, action: nodemanager.Action{Kind: nodemanager.RelaunchWithMoreMemory, NodeID: node, MemoryBytes: d.Memory, Reason: d.Reason}})
	}
}

// fleetSaved returns the node manager's journaled state (nil: none yet).
func (c *core) fleetSaved() json.RawMessage {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.fleet
}

// setFleetView records what GetJob shows of the managed nodes.
func (c *core) setFleetView(st nodemanager.Status, platform string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.fleetView, c.platform = &st, platform
}

// fleetProtoLocked fills r's managed nodes and each node row's relaunch
// count and host.
func (c *core) fleetProtoLocked(r *roverv1.GetJobResponse) {
	st := c.fleetView
	if st == nil {
		return
	}
	r.Platform = c.platform
	r.Relaunches = int32(st.Relaunches)
	byID := map[string]nodemanager.NodeStatus{}
	for _, n := range st.Nodes {
		byID[n.NodeID] = n
		r.ManagedNodes = append(r.ManagedNodes, &roverv1.ManagedNode{
			Group: n.Group, Rank: int32(n.Rank), NodeId: n.NodeID, State: n.State.String(),
			Relaunches: int32(n.Relaunches), Budget: int32(n.Budget), Host: n.Host, Critical: n.Critical,
			LastExit: n.LastExit, Reason: n.Reason, SinceUnixNanos: unixNanos(n.Since),
		})
	}
	for _, ns := range r.Nodes {
		if n, ok := byID[ns.GetNodeId()]; ok {
			ns.RelaunchCount, ns.Host = int32(n.Relaunches), n.Host
		}
	}
}
