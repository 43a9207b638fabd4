package master

import (
	"cmp"
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"time"

	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/diagnosis"
	"github.com/roverml/rover/internal/master/jobstate"
	"github.com/roverml/rover/internal/rendezvous"
	"github.com/roverml/rover/internal/stall"
	"google.golang.org/protobuf/encoding/protojson"
)

// The job's runtime progress (docs/design/hang-and-stragglers.md) is
// jobstate.Progress, c.st.Progress, held under the core's lock like the
// rest of the state but not journaled. This file drives it: heartbeats in,
// the tick's stragglers and hangs out, and the conversion to and from the
// protocol.

// progressReport records a node's heartbeat progress at now. It returns a
// failure to report for the node when its devices reported a hardware
// error (an Xid or an uncorrectable ECC error), for the diagnosis to act on.
func (c *core) progressReport(node string, np *roverv1.NodeProgress, now time.Time) (*jobstate.Event, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.st.Members.Configured() || np == nil {
		return nil, false
	}
	if c.st.Owned {
		c.usage.put(node, np) // for right-sizing the node's next pod
	}
	s := c.st.Members.Status()
	mb, worldRound, _, member := c.st.Members.Rendezvous().WorldMember(node)
	p := c.st.Progress
	p.Follow(c.st.Members.Config().Hang, int64(s.Round))
	r := nodeReport(np)
	if r.Round == p.Round() && !s.Open && member {
		hung := p.Hung()
		p.Report(node, r, now)
		if hung && !p.Hung() {
			c.st.Goodput.Hang(false, now)
		}
		c.autoScaleProgressLocked(node, r, now)
	}
	msg, bad := diagnosis.DeviceError(r.Devices)
	if !bad || !member || s.Open || s.Job != rendezvous.Running {
		return nil, false
	}
	return failureEvent(mb, worldRound, now, msg)
}

// checkProgress runs on the master's tick: it logs changes of the
// stragglers, and declares a hang when the timer says so, carrying out the
// job's policy.
func (c *core) checkProgress(ctx context.Context, now time.Time, log *slog.Logger) error {
	c.mu.Lock()
	if !c.st.Members.Configured() {
		c.mu.Unlock()
		return nil
	}
	s := c.st.Members.Status()
	p := c.st.Progress
	p.Follow(c.st.Members.Config().Hang, int64(s.Round))
	tick := p.Tick(now, s.Job == rendezvous.Running && !s.Open)
	evs := progressEvents(tick, s.Round, now)
	if tick.StragglersChanged {
		if len(tick.Stragglers) > 0 {
			log.Warn("straggler: a node's steps are much slower than the others'", "nodes", strings.Join(tick.Stragglers, ","), "why", tick.StragglerReason)
		} else {
			log.Info("no straggler any more")
		}
	}
	var e *jobstate.Event
	if h := tick.Hang; h != nil {
		c.st.Goodput.Hang(true, now)
		log.Warn("the job hangs; the agents collect their workers' stacks", "reason", h.Reason, "policy", h.Policy.String())
		if h.Policy == stall.Restart {
			e = c.hangFailureLocked(now)
		}
		c.changedLocked() // the views carry the notice
	}
	c.mu.Unlock()
	c.logEvents(evs...)
	if e == nil {
		return nil
	}
	log.Warn("restarting the workers of the hung job (--hang-detection=2)", "node", e.Node, "round", e.Round)
	return c.apply(ctx, e)
}

// hangFailureLocked is the failure the master reports for a hung world,
// which restarts it: it is recorded against the member whose workers
// progressed least (the lowest newest step, then the oldest progress).
func (c *core) hangFailureLocked(now time.Time) *jobstate.Event {
	world := c.st.Members.Rendezvous().Snapshot()
	var members []string
	for _, id := range slices.Sorted(func(yield func(string) bool) {
		for id := range c.st.Members.Addrs() {
			if !yield(id) {
				return
			}
		}
	}) {
		if _, ok := world.Member(id); ok {
			members = append(members, id)
		}
	}
	id, ok := c.st.Progress.LeastProgressed(members)
	if !ok {
		return nil
	}
	pick, _ := world.Member(id)
	e, _ := failureEvent(pick, world.WorldRound, now,
		"hang: "+c.st.Progress.Reason()+"; the workers' stacks are in each node's log directory (hangs/hang-<id>.txt)")
	return e
}

// failureEvent is the worker-failed event the master reports for member m
// of the world of round at now.
func failureEvent(m rendezvous.Member, round int, now time.Time, msg string) (*jobstate.Event, bool) {
	f := &roverv1.WorkerFailure{NodeId: m.NodeID, NodeRank: int32(m.NodeRank), Host: m.Addr, Rank: int32(m.RankOffset),
		ExitCode: -1, TimeUnixNanos: now.UnixNano(), Round: int64(round), Message: msg}
	b, err := protojson.Marshal(f)
	if err != nil {
		return nil, false
	}
	return &jobstate.Event{Type: jobstate.EventWorkerFailed, Time: now, Node: m.NodeID, Round: round, Failures: []json.RawMessage{b}}, true
}

// progressProto is the job's progress for GetJob in round; nodes gives the
// node ranks.
func progressProto(p *jobstate.Progress, round int64, nodes []*roverv1.NodeStatus) *roverv1.JobProgress {
	v := p.View(round)
	out := &roverv1.JobProgress{Step: v.Step, Hung: v.Hung, HangReason: v.HangReason, Hangs: v.Hangs,
		Stragglers: v.Stragglers, StragglerReason: v.StragglerReason}
	ranks := make(map[string]int32, len(nodes))
	for _, s := range nodes {
		ranks[s.GetNodeId()] = s.GetNodeRank()
	}
	for _, n := range v.Nodes {
		ns := &roverv1.NodeStepTime{NodeId: n.Node, Step: n.Step, StepSeconds: n.Wall, BusySeconds: n.Busy,
			Samples: int32(n.Samples), Straggler: n.Straggler, ComputeSeconds: n.Compute, WaitSeconds: n.Wait,
			MatmulTflops: n.MatmulTFLOPS, NodeRank: ranks[n.Node], LinkRttSeconds: n.LinkRTT}
		out.Nodes = append(out.Nodes, ns)
	}
	slices.SortFunc(out.Nodes, func(a, b *roverv1.NodeStepTime) int { return cmp.Compare(a.NodeRank, b.NodeRank) })
	for _, rc := range v.HangCollectives {
		prc := &roverv1.RankCollective{Rank: rc.Rank, NodeId: rc.Node}
		if c := rc.Collective; c.Seq > 0 {
			prc.Collective = &roverv1.Collective{Op: c.Op, Bytes: c.Bytes, Group: c.Group, Seq: c.Seq, Done: c.Done}
		}
		if s := rc.Step; s.Forwards > 0 {
			prc.DdpStep = &roverv1.DDPStep{Group: s.Group, Forwards: s.Forwards, BucketsTimed: s.BucketsTimed}
		}
		out.HangCollectives = append(out.HangCollectives, prc)
	}
	return out
}

// hangNoticeProto is the hang notice for the node views: the newest
// hang's, nil before the first.
func hangNoticeProto(p *jobstate.Progress) *roverv1.HangNotice {
	n, ok := p.Notice()
	if !ok {
		return nil
	}
	return &roverv1.HangNotice{Id: n.ID, Policy: int32(n.Policy), Reason: n.Reason}
}

// nodeReport converts a heartbeat's progress.
// maxLinkRTT bounds a node's reported link round trip, in seconds: a
// longer one is not a measurement.
const maxLinkRTT = 60

func nodeReport(np *roverv1.NodeProgress) jobstate.NodeReport {
	r := jobstate.NodeReport{Round: np.GetRound(), Devices: deviceSamples(np.GetDevices())}
	if rtt := np.GetLinkRttSeconds(); np.GetLinkConnections() > 0 && rtt > 0 && rtt < maxLinkRTT {
		r.LinkRTT = rtt
	}
	for _, w := range np.GetWorkers() {
		wr := jobstate.WorkerReport{LocalRank: w.GetLocalRank(), Step: w.GetStep(), Steps: w.GetSteps(),
			WallSeconds: w.GetWallSeconds(), CPUSeconds: w.GetCpuSeconds(),
			Rank: w.GetRank(), CommSeconds: w.GetCommSeconds(), Collectives: w.GetCollectives(),
			MatmulFlops: w.GetMatmulFlops(), MatmulSeconds: w.GetMatmulSeconds(), Samples: max(w.GetSamples(), 0)}
		if c := w.GetCollective(); c != nil {
			wr.Collective = &stall.Collective{Op: c.GetOp(), Bytes: c.GetBytes(), Group: c.GetGroup(), Seq: c.GetSeq(), Done: c.GetDone()}
		}
		if d := w.GetDdpStep(); d != nil {
			wr.DDPStep = &stall.DDPStep{Group: d.GetGroup(), Forwards: d.GetForwards(), BucketsTimed: d.GetBucketsTimed()}
		}
		r.Workers = append(r.Workers, wr)
	}
	return r
}

func deviceSamples(ds []*roverv1.DeviceHealth) []diagnosis.DeviceSample {
	out := make([]diagnosis.DeviceSample, len(ds))
	for i, d := range ds {
		s := diagnosis.DeviceSample{Index: int(d.GetIndex()), Utilization: int(d.GetUtilizationPercent()), ECCUncorrected: d.GetEccUncorrected()}
		for _, x := range d.GetXids() {
			s.Xids = append(s.Xids, int(x))
		}
		out[i] = s
	}
	return out
}
