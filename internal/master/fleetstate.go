package master

import (
	"encoding/json"

	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/master/jobstate"
	"github.com/roverml/rover/internal/nodemanager"
)

// The core's side of the node manager (fleet.go): the manager's state is
// journaled (jobstate.EventFleet, kept by jobstate.Fleet), the job fails
// when the manager says so (jobstate.EventFailNodes), and State.Apply
// queues for the fleet what only the job's state learns: a node's agent
// lost, and the diagnosis of a failed round that calls for a node's
// relaunch. Here: taking the notices, and what GetJob shows of the nodes.

// takeNotices returns the queued notices and empties the queue.
func (c *core) takeNotices() []jobstate.FleetNotice {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.st.Fleet.TakeNotices()
}

// fleetSaved returns the node manager's journaled state (nil: none yet).
func (c *core) fleetSaved() json.RawMessage {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.st.Fleet.Saved()
}

// setFleetView records what GetJob shows of the managed nodes.
func (c *core) setFleetView(st nodemanager.Status, platform string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.fleetView, c.platform = &st, platform
	hosts := map[string]string{}
	for _, n := range st.Nodes {
		if _, ok := hosts[n.NodeID]; !ok && n.Host != "" {
			hosts[n.NodeID] = n.Host
		}
	}
	c.st.Hosts = hosts
}

// fleetProtoLocked fills r's managed nodes, its relaunches by cause and
// each node row's relaunch count and host.
func (c *core) fleetProtoLocked(r *roverv1.GetJobResponse) {
	st := c.fleetView
	if st == nil {
		return
	}
	r.Platform = c.platform
	r.Relaunches = int32(st.Relaunches)
	for cause, n := range st.RelaunchCauses {
		if r.RelaunchCauses == nil {
			r.RelaunchCauses = make(map[string]int32, len(st.RelaunchCauses))
		}
		r.RelaunchCauses[string(cause)] = int32(n)
	}
	byID := map[string]nodemanager.NodeStatus{}
	for _, n := range st.Nodes {
		byID[n.NodeID] = n
		r.ManagedNodes = append(r.ManagedNodes, &roverv1.ManagedNode{
			Group: n.Group, Rank: int32(n.Rank), NodeId: n.NodeID, State: n.State.String(),
			Relaunches: int32(n.Relaunches), Budget: int32(n.Budget), Host: n.Host, Critical: n.Critical,
			LastExit: n.LastExit, Reason: n.Reason, SinceUnixNanos: unixNanos(n.Since), RightSize: rightSizeProto(n.RightSize),
		})
	}
	for _, ns := range r.Nodes {
		if n, ok := byID[ns.GetNodeId()]; ok {
			ns.RelaunchCount, ns.Host = int32(n.Relaunches), n.Host
		}
	}
}

// rightSizeProto converts a rank's right-sizing; nil for none.
func rightSizeProto(r *nodemanager.RightSizeStatus) *roverv1.RankRightSize {
	if r == nil {
		return nil
	}
	return &roverv1.RankRightSize{PeakBytes: r.PeakBytes, CpuCores: r.CPUCores, SampledMilliCpu: r.SampledMilliCPU,
		StepSlowdown: r.Slowdown, NextMilliCpu: r.Next.MilliCPU, NextMemoryBytes: r.Next.MemoryBytes, Why: r.Why}
}
