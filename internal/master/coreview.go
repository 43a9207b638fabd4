package master

import (
	"sort"
	"time"

	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/jobconfig/configwire"
	"github.com/roverml/rover/internal/rendezvous"
)

// What the core shows: node views for the push streams, keys, and the
// job's status for GetJob.

// view returns the node's view and a channel closed at the next change.
func (c *core) view(id string) (*roverv1.NodeView, <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v := &roverv1.NodeView{RunId: c.runID}
	if !c.st.Members.Configured() {
		v.JobState = roverv1.JobState_JOB_STATE_RUNNING
		return v, c.views
	}
	s := c.st.Members.Status()
	v.Version = c.version
	v.JobState = jobState(s.Job)
	v.Reason = s.Reason
	v.Round = int64(s.Round)
	v.RoundOpen = s.Open
	v.RestartCount = int32(s.Restarts)
	v.MaxRestarts = int32(s.MaxRestarts)
	if m, round, ok := c.st.Members.Rendezvous().Assignment(id); ok {
		v.Assignment = &roverv1.Assignment{
			Round:          int64(round),
			NodeRank:       int32(m.NodeRank),
			GroupRank:      int32(m.GroupRank),
			GroupWorldSize: int32(s.GroupWorldSize),
			LocalWorldSize: int32(m.LocalWorldSize),
			RankOffset:     int32(m.RankOffset),
			WorldSize:      int32(s.WorldSize),
		}
		if step, ok := c.st.Memory.Step(round); ok {
			v.Assignment.MemoryStep = &step // a copy: views are marshalled after the lock is released
			a := c.st.Memory.Agreement()
			for _, p := range a.Peers(id) {
				v.Assignment.MemoryPeers = append(v.Assignment.MemoryPeers, &roverv1.MemoryPeer{NodeId: p.NodeID, Addr: p.Addr})
			}
			v.Assignment.MemoryFromBackup = a.FromBackup(id)
		}
		if p, ok := c.st.Memory.BackupPeer(id); ok {
			v.Assignment.BackupPeer = &roverv1.MemoryPeer{NodeId: p.NodeID, Addr: p.Addr}
		}
		v.Assignment.BackupOf = c.st.Memory.BackupOf(id)
	}
	c.checkViewLocked(id, v)
	if s.Job != rendezvous.Running {
		v.Failures = failuresProto(c.st.Failures.Records())
	}
	v.Hang = hangNoticeProto(c.st.Progress)
	return v, c.views
}

// key returns a value and a channel closed at the next key change.
func (c *core) key(k string) ([]byte, bool, <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.st.Keys.Get(k)
	return v, ok, c.keys
}

// job returns the job's status for GetJob, its goodput as of its newest
// event.
func (c *core) job() *roverv1.GetJobResponse { return c.jobAt(time.Time{}) }

// jobAt returns the job's status for GetJob, its goodput as of now.
func (c *core) jobAt(now time.Time) *roverv1.GetJobResponse {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := &roverv1.GetJobResponse{RunId: c.runID, JobState: roverv1.JobState_JOB_STATE_RUNNING, CheckpointStep: -1}
	r.Goodput = goodputProto(c.st.Goodput, now)
	if !c.st.Members.Configured() {
		c.fleetProtoLocked(r)
		return r
	}
	s := c.st.Members.Rendezvous().Snapshot()
	r.JobState = jobState(s.Job)
	r.Reason = s.Reason
	r.Round = int64(s.Round)
	r.RoundOpen = s.Open
	r.WorldSize = int32(s.WorldSize)
	r.RestartCount = int32(s.Restarts)
	r.MaxRestarts = int32(s.MaxRestarts)
	r.Failures = failuresProto(c.st.Failures.Records())
	r.Rendezvous = configwire.ToProto(*c.st.Members.Config())
	addrs := c.st.Members.Addrs()
	ids := make([]string, 0, len(addrs))
	for id := range addrs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	// By id: s.Member is O(world), which made this O(nodes²).
	world := make(map[string]rendezvous.Member, len(s.World))
	for _, mb := range s.World {
		world[mb.NodeID] = mb
	}
	for _, id := range ids {
		ns := &roverv1.NodeStatus{NodeId: id, Addr: addrs[id], GroupRank: -1}
		if rank, _, ok := c.st.Members.Rendezvous().Joined(id); ok {
			ns.NodeRank = int32(rank)
		}
		if m, ok := world[id]; ok {
			ns.GroupRank = int32(m.GroupRank)
			ns.NodeRank = int32(m.NodeRank)
		}
		if info, ok := c.st.Members.Liveness(id); ok {
			ns.Lost = info.Lost
			ns.LostReason = info.LostReason
		}
		r.Nodes = append(r.Nodes, ns)
	}
	c.checkProtoLocked(r)
	c.fleetProtoLocked(r)
	r.Progress = progressProto(c.st.Progress, int64(c.st.Members.Status().Round), r.Nodes)
	r.AutoScale = c.autoScaleProtoLocked()
	return r
}

// finished reports whether the job has ended, and the change channel.
func (c *core) finished() (bool, rendezvous.JobState, <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.st.Members.Configured() {
		return false, rendezvous.Running, c.views
	}
	s := c.st.Members.Status()
	return s.Job != rendezvous.Running, s.Job, c.views
}

func jobState(s rendezvous.JobState) roverv1.JobState {
	switch s {
	case rendezvous.Running:
		return roverv1.JobState_JOB_STATE_RUNNING
	case rendezvous.Succeeded:
		return roverv1.JobState_JOB_STATE_SUCCEEDED
	case rendezvous.Failed:
		return roverv1.JobState_JOB_STATE_FAILED
	}
	return roverv1.JobState_JOB_STATE_UNSPECIFIED
}

// unixNanos is t in Unix nanoseconds, 0 for the zero time.
func unixNanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}
