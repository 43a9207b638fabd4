package master

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/goodput"
	"github.com/roverml/rover/internal/master/jobstate"
)

// The job's goodput accounting (docs/design/goodput.md) is
// jobstate.Goodput, c.st.Goodput. Apply feeds it the journaled events; this
// file feeds it what the heartbeats carry (progress, the workers' lifecycle
// events) and the hang timer's verdicts, moving the agents' times into the
// master's clock, journals its state without a store write per heartbeat,
// logs each restart's phases and converts its view for GetJob.

// MaxNodeEvents is the most lifecycle events one heartbeat may carry; the
// rest are dropped with a warning.
const MaxNodeEvents = 64

// goodputJournalEvery is how often the tick journals the goodput state
// that heartbeats changed since it was last journaled. Between, a
// restarted master loses at most that much resolution for a rollback: the
// next report credits what the missed ones would have.
const goodputJournalEvery = 30 * time.Second

// clockOffset is how far a node's agent's clock is behind the master's: the
// receipt time of its newest heartbeat minus the time it says it sent it.
type clockOffset struct {
	known bool
	d     time.Duration
}

// agentTime moves an agent's time (Unix nanoseconds) into the master's
// clock by the node's offset, and never after now; 0, or no offset known,
// is now.
func (o clockOffset) agentTime(unixNanos int64, now time.Time) time.Time {
	if unixNanos <= 0 || !o.known {
		return now
	}
	t := time.Unix(0, unixNanos).Add(o.d)
	if t.After(now) {
		return now
	}
	return t
}

// offsetOf is the offset a heartbeat sent at sentNanos (agent clock) and
// received at now shows.
func offsetOf(sentNanos int64, now time.Time) clockOffset {
	if sentNanos <= 0 {
		return clockOffset{}
	}
	return clockOffset{known: true, d: now.Sub(time.Unix(0, sentNanos))}
}

// goodputHeartbeat feeds the goodput accounting a heartbeat of node
// received at now: its workers' lifecycle events and their progress. It
// returns how many events it dropped over MaxNodeEvents, and a restart
// that completed with it.
func (c *core) goodputHeartbeat(node string, hb *roverv1.Heartbeat, now time.Time) (dropped int, done *goodput.Restart) {
	c.mu.Lock()
	defer c.mu.Unlock()
	off := offsetOf(hb.GetSentUnixNanos(), now)
	if c.offsets == nil {
		c.offsets = map[string]clockOffset{}
	}
	if off.known {
		if _, had := c.offsets[node]; !had && len(c.offsets) >= max(c.offsetsPruneAt, minOffsetsPrune) {
			c.pruneOffsetsLocked()
		}
		c.offsets[node] = off
	}
	g := c.st.Goodput
	events := hb.GetEvents()
	if len(events) > MaxNodeEvents {
		dropped = len(events) - MaxNodeEvents
		events = events[:MaxNodeEvents]
	}
	// The node's progress: its newest step is the highest any of its
	// workers reported; its time, when the workers said it.
	var best *roverv1.WorkerProgress
	np := hb.GetProgress()
	for _, w := range np.GetWorkers() {
		if best == nil || w.GetStep() > best.GetStep() {
			best = w
		}
	}
	var stepAt time.Time
	if best != nil {
		stepAt = off.agentTime(best.GetStepUnixNanos(), now)
	}
	progress := func() {
		if best != nil {
			g.Progress(node, np.GetRound(), int(best.GetRank()), best.GetStep(), stepAt)
			best = nil
		}
	}
	// The report goes in among the events at its time: the progress is
	// up to a second older than the heartbeat, and an event after it
	// (a save of a later step) would else move the machine past it and
	// time the step at the save (a restart's first step by its round's
	// second save).
	for _, e := range events {
		if ev, ok := nodeEvent(e, off, now); ok {
			if ev.At.After(stepAt) {
				progress()
			}
			g.Event(node, ev)
		}
	}
	progress()
	if r, ok := g.TakeRestart(now); ok {
		done = &r
	}
	return dropped, done
}

// minOffsetsPrune is the fewest clock offsets kept before those of nodes
// the liveness table forgot are pruned.
const minOffsetsPrune = 64

// pruneOffsetsLocked drops the clock offsets of nodes the job no longer
// knows or has lost (one that comes back learns its offset again), so a job that replaces nodes for ever holds offsets only for
// about as many nodes as it has; the next prune waits for twice as many.
func (c *core) pruneOffsetsLocked() {
	for id := range c.offsets {
		if info, ok := c.st.Members.Liveness(id); !ok || info.Lost {
			delete(c.offsets, id)
		}
	}
	c.offsetsPruneAt = 2 * len(c.offsets)
}

// nodeEvent converts a heartbeat's event into the master's clock; ok is
// false for a kind this master does not know.
func nodeEvent(e *roverv1.NodeEvent, off clockOffset, now time.Time) (jobstate.NodeEvent, bool) {
	ev := jobstate.NodeEvent{Round: e.GetRound(), At: off.agentTime(e.GetTimeUnixNanos(), now), Step: e.GetStep(),
		Blocking: time.Duration(e.GetBlockingNanos()), Durable: e.GetDurable()}
	switch e.GetKind() {
	case roverv1.NodeEventKind_NODE_EVENT_KIND_WORKERS_STARTED:
		ev.Kind = jobstate.WorkersStarted
	case roverv1.NodeEventKind_NODE_EVENT_KIND_RESTORE_STARTED:
		ev.Kind = jobstate.RestoreStarted
	case roverv1.NodeEventKind_NODE_EVENT_KIND_RESUMED:
		ev.Kind = jobstate.Resumed
		ev.From = sourceFromProto(e.GetSource())
		if len(e.GetPeer()) <= maxEventPeer {
			ev.Peer = e.GetPeer()
		}
		ev.Fetch, ev.Load = time.Duration(max(e.GetFetchNanos(), 0)), time.Duration(max(e.GetLoadNanos(), 0))
	case roverv1.NodeEventKind_NODE_EVENT_KIND_CHECKPOINT_SAVED:
		ev.Kind = jobstate.CheckpointSaved
	case roverv1.NodeEventKind_NODE_EVENT_KIND_LAST_STEP:
		ev.Kind = jobstate.LastStep
	default:
		return ev, false
	}
	return ev, true
}

// diedAt is when the earliest of a report's failed workers died, in the
// master's clock (zero: the report does not say).
func (c *core) diedAt(node string, fs []*roverv1.WorkerFailure, now time.Time) time.Time {
	var first int64
	for _, f := range fs {
		if t := f.GetTimeUnixNanos(); t > 0 && (first == 0 || t < first) {
			first = t
		}
	}
	if first == 0 {
		return time.Time{}
	}
	c.mu.Lock()
	off := c.offsets[node]
	c.mu.Unlock()
	if !off.known {
		off = clockOffset{known: true} // the same clock, as on one machine
	}
	return off.agentTime(first, now)
}

// goodputDurable records that the job committed checkpoint step of round,
// as node's report completed it: a durable save.
func (c *core) goodputDurable(node string, round int, step int64, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.st.Goodput.Event(node, jobstate.NodeEvent{Kind: jobstate.CheckpointSaved, Round: int64(round), Step: step, Durable: true, At: now})
}

// goodputRecordLocked is the journal record of the goodput state that goes
// before batch: set when heartbeats changed the state since it was last
// journaled and the batch holds an event that feeds it, so that a replay
// applies the batch to the state it was applied to.
func (c *core) goodputRecordLocked(batch []*proposal) []byte {
	if !c.st.Goodput.Dirty() {
		return nil
	}
	for _, p := range batch {
		if feedsGoodput(p.e.Type) {
			return c.marshalGoodputLocked()
		}
	}
	return nil
}

// goodputNotJournaled says that the goodput record made for a batch was not
// written: the next batch that feeds the accounting carries the state.
func (c *core) goodputNotJournaled() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.st.Goodput.MarkDirty()
}

func (c *core) marshalGoodputLocked() []byte {
	state, err := c.st.Goodput.Marshal()
	if err != nil || state == nil {
		return nil
	}
	rec, err := (&jobstate.Event{Type: jobstate.EventGoodput, Goodput: state}).Marshal()
	if err != nil {
		return nil
	}
	return rec
}

// feedsGoodput reports whether events of type t change the goodput
// accounting: all but the dataset events, keys and storage declarations
// (a goodput event carries the state the batch's record takes).
func feedsGoodput(t jobstate.EventType) bool {
	switch t {
	case jobstate.EventSetKey, jobstate.EventDeclareStorage,
		jobstate.EventRegisterDataset, jobstate.EventLease, jobstate.EventCompleteShards, jobstate.EventAdvance,
		jobstate.EventAppend, jobstate.EventRestoreDataset, jobstate.EventShardTick, jobstate.EventShardBatch:
		return false
	}
	return true
}

// journalGoodput journals the goodput state on the tick when heartbeats
// changed it and it was last journaled goodputJournalEvery ago, or moved
// its milestone (a phase of a restart ended, a hang began or ended): the
// agents do not send those events again to a restarted master, so a state
// journaled later would hold the restart open across the outage.
func (c *core) journalGoodput(ctx context.Context, now time.Time) error {
	c.mu.Lock()
	due := c.st.Goodput.Dirty() && (c.st.Goodput.Urgent() || !now.Before(c.goodputJournaled.Add(goodputJournalEvery)))
	if due {
		c.goodputJournaled = now
	}
	c.mu.Unlock()
	if !due {
		return nil
	}
	c.commits.mu.Lock()
	broken := c.commits.broken
	c.commits.mu.Unlock()
	if broken != nil {
		return broken
	}
	// The record is made when its batch is committed (goodputRecordLocked):
	// a goodput event feeds it.
	return c.apply(ctx, &jobstate.Event{Type: jobstate.EventGoodput, Time: now})
}

// maxEventPeer bounds the node id a resume event names as its peer.
const maxEventPeer = 256

// logRestart logs a completed restart's phases on one line, with where
// each node restored from and how long it took; peers, when not empty,
// says which nodes the round's agreement planned to restore from a peer's
// memory or a backup peer's.
func logRestart(log *slog.Logger, r goodput.Restart, peers string) {
	s := func(d time.Duration) string { return fmt.Sprintf("%.2f", d.Seconds()) }
	var b strings.Builder
	fmt.Fprintf(&b, "restart round %d->%d (%s): downtime %ss = detect %s stop %s rendezvous %s spawn %s init %s restore %s first_step %s",
		r.Round, r.NewRound, r.Reason, s(r.Downtime()), s(r.Detect), s(r.Stop), s(r.Rendezvous), s(r.Spawn), s(r.Init), s(r.Restore), s(r.FirstStep))
	if r.Resumed {
		fmt.Fprintf(&b, "; resumed step %d from %s", r.ResumedStep, r.From)
	} else {
		b.WriteString("; resumed step unknown")
	}
	fmt.Fprintf(&b, ", lost %d steps", r.LostSteps)
	if len(r.Nodes) > 0 {
		b.WriteString("; restored: " + nodeRestores(r.Nodes, r.MoreNodes))
	}
	if peers != "" {
		b.WriteString("; planned: " + peers)
	}
	log.Info(b.String(), "round", r.NewRound, "downtime_seconds", r.Downtime().Seconds())
}

// goodputProto is the job's goodput for GetJob at now; nil before the
// job's launch.
func goodputProto(g *jobstate.Goodput, now time.Time) *roverv1.JobGoodput {
	if !g.Launched() {
		return nil
	}
	v := g.View(now)
	out := &roverv1.JobGoodput{Ratio: v.Ratio, WallSeconds: v.Wall.Seconds(), GoodputSeconds: v.Goodput.Seconds(),
		Phase: v.Phase, Step: v.Step, Restarts: v.Restarts, LostSteps: v.Lost, Saves: v.Saves, Failures: v.Failures}
	for _, ct := range v.Largest(int(goodput.NumCauses)) {
		out.Badput = append(out.Badput, &roverv1.GoodputCause{Cause: ct.Cause.String(), Seconds: ct.Time.Seconds()})
	}
	for _, r := range v.Latest {
		out.LatestRestarts = append(out.LatestRestarts, &roverv1.RestartPhases{
			Round: r.Round, NewRound: r.NewRound, Reason: r.Reason,
			DetectSeconds: r.Detect.Seconds(), StopSeconds: r.Stop.Seconds(), RendezvousSeconds: r.Rendezvous.Seconds(),
			SpawnSeconds: r.Spawn.Seconds(), InitSeconds: r.Init.Seconds(), RestoreSeconds: r.Restore.Seconds(),
			FirstStepSeconds: r.FirstStep.Seconds(), DowntimeSeconds: r.Downtime().Seconds(),
			Resumed: r.Resumed, ResumedStep: r.ResumedStep, Source: sourceProto(r.From),
			LostSteps: r.LostSteps, LostSeconds: r.Lost.Seconds(), Done: r.Done,
			Nodes: nodeRestoresProto(r.Nodes), MoreNodes: int32(r.MoreNodes),
		})
	}
	return out
}

func nodeRestoresProto(ns []goodput.NodeRestore) []*roverv1.NodeRestore {
	out := make([]*roverv1.NodeRestore, 0, len(ns))
	for _, n := range ns {
		out = append(out, &roverv1.NodeRestore{NodeId: n.Node, Step: n.Step, Source: sourceProto(n.From), Peer: n.Peer,
			FetchSeconds: n.Fetch.Seconds(), LoadSeconds: n.Load.Seconds()})
	}
	return out
}

// nodeRestores says where each node restored from, on one line:
// "node-0 memory 0.05s, node-1 backup peer node-0 (fetch 0.01s) 0.04s".
func nodeRestores(ns []goodput.NodeRestore, more int) string {
	parts := make([]string, 0, len(ns)+1)
	for _, n := range ns {
		p := n.Node + " "
		switch n.From {
		case goodput.FromPeer:
			p += fmt.Sprintf("peer %s (fetch %.2fs)", n.Peer, n.Fetch.Seconds())
		case goodput.FromBackup:
			p += fmt.Sprintf("backup peer %s (fetch %.2fs)", n.Peer, n.Fetch.Seconds())
		default:
			p += n.From.String()
		}
		parts = append(parts, fmt.Sprintf("%s step %d load %.2fs", p, n.Step, n.Load.Seconds()))
	}
	if more > 0 {
		parts = append(parts, fmt.Sprintf("%d more", more))
	}
	return strings.Join(parts, ", ")
}

func sourceFromProto(s roverv1.CheckpointSource) goodput.Source {
	switch s {
	case roverv1.CheckpointSource_CHECKPOINT_SOURCE_MEMORY:
		return goodput.FromMemory
	case roverv1.CheckpointSource_CHECKPOINT_SOURCE_STORAGE:
		return goodput.FromStorage
	case roverv1.CheckpointSource_CHECKPOINT_SOURCE_PEER:
		return goodput.FromPeer
	case roverv1.CheckpointSource_CHECKPOINT_SOURCE_BACKUP:
		return goodput.FromBackup
	}
	return goodput.FromNothing
}

func sourceProto(s goodput.Source) roverv1.CheckpointSource {
	switch s {
	case goodput.FromMemory:
		return roverv1.CheckpointSource_CHECKPOINT_SOURCE_MEMORY
	case goodput.FromStorage:
		return roverv1.CheckpointSource_CHECKPOINT_SOURCE_STORAGE
	case goodput.FromPeer:
		return roverv1.CheckpointSource_CHECKPOINT_SOURCE_PEER
	case goodput.FromBackup:
		return roverv1.CheckpointSource_CHECKPOINT_SOURCE_BACKUP
	}
	return roverv1.CheckpointSource_CHECKPOINT_SOURCE_NONE
}
