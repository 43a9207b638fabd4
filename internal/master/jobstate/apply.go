package jobstate

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/roverml/rover/internal/diagnosis"
	"github.com/roverml/rover/internal/nodecheck"
	"github.com/roverml/rover/internal/nodemanager"
	"github.com/roverml/rover/internal/rendezvous"
	"github.com/roverml/rover/internal/shard"
)

// ErrUnknownEvent is a journal record of a type this master does not know:
// the journal was written by a newer Rover.
var ErrUnknownEvent = errors.New("is unknown to this master (written by a newer version?)")

// Effects is what an applied event changed, for the driver to act on.
type Effects struct {
	// Views counts the changes of the nodes' views (each one a new
	// version of them); Keys says the key-value store changed; Notices
	// that notices were queued for the fleet (TakeNotices).
	Views   int
	Keys    bool
	Notices bool
	// Shard is a single dataset event's outcome; Batch and BatchErrs are
	// a batch's, op by op (Batch is nil for other events).
	Shard     ShardOutcome
	Batch     []ShardOutcome
	BatchErrs []error
	// Failures are the failure records the event added, as kept (with
	// their round's diagnosis, or the blame of a lost node); CheckEnded is
	// the node check that ended with it, with its verdicts. The master
	// derives the job's event log from them.
	Failures   []Failure
	CheckEnded *nodecheck.Check
}

// FailureCodec encodes and decodes the failures of worker-failed events
// and of snapshots: the protocol's JSON, which the master converts. An
// event's failure that does not decode is dropped; a snapshot's fails the
// restore.
type FailureCodec interface {
	Encode(Failure) (json.RawMessage, error)
	Decode(json.RawMessage) (Failure, error)
}

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// CheckEvent refuses an event that would fail, before it is journaled; Apply
// checks again, so that a replay fails the same way.
func (s *State) CheckEvent(e *Event) error {
	if e.Shard != nil || e.Type == EventShardBatch {
		return nil // the shard machine checks its own events
	}
	switch e.Type {
	case EventConfigure, EventFleet, EventGoodput, EventAutoScale:
		return nil
	case EventDeclareStorage:
		if e.Declare == nil {
			return invalidf("a storage declaration without its content")
		}
		_, _, err := s.Members.CheckDeclare(*e.Declare)
		return err
	case EventCheckReport, EventCheckTick:
		if !s.Members.Configured() {
			return ErrNotConfigured
		}
		return s.checkCheckEvent(e)
	case EventSetKey:
		return s.Keys.Check(e.Key, len(e.Value))
	}
	if e.Type == EventWorkerFailed || e.Type == EventNodeSucceeded {
		return s.Members.CheckNode(e.Node)
	}
	if !s.Members.Configured() {
		return ErrNotConfigured
	}
	return nil
}

// Apply applies a committed event: the same checks and transition whether
// the event is new or replayed, so a replay rebuilds the same state. A
// transition that fails still changes what it changed (Effects), and fails
// the same way when replayed; only ErrUnknownEvent stops a replay.
func (s *State) Apply(e *Event) (Effects, error) {
	var fx Effects
	if err := s.CheckEvent(e); err != nil {
		return fx, err
	}
	if ok, err := s.applyDatasets(e, &fx); ok {
		return fx, err
	}
	var err error
	before := s.Members.Status()
	checkBefore := s.checkRunning()
	added := s.Failures.Added()
	var fail *goodputFailure
	switch e.Type {
	case EventConfigure:
		var first bool
		if first, err = s.Members.Configure(e.Config, s.Fleet.Expect(), e.Time); first {
			s.InitCheck()
			s.Goodput.Launch(e.Time)                       // the job's launch: its configuration, journaled once
			_ = s.AutoScale.configure(e.Config.Rendezvous) // an error is kept: AutoScale.Err
		}
	case EventJoin:
		var loss *WorldLoss
		if loss, err = s.Members.Join(*e.Join, e.Time); loss != nil {
			// A member's agent restarted, ending the world: the others'
			// failures in it were its consequences.
			s.blame(e.Join.NodeID, "its agent restarted", e.Time, loss)
		}
		if err == nil {
			s.Memory.Joined(e.Join.NodeID, e.Snapshots, e.PeerAddr, e.PeerRestoreFailed)
		}
	case EventNodeLost:
		if loss := s.Members.Lose(e.Node, e.Reason, e.Since, e.Planned, e.Time); loss != nil {
			s.blame(e.Node, e.Reason, e.Time, loss)
		}
		s.Memory.Lost(e.Node)
		s.Datasets.NodeLost(e.Node, e.Time)
		if !e.Planned { // the node manager removed it itself
			s.notice(FleetNotice{Lost: true, Node: e.Node, Reason: e.Reason}, &fx)
		}
	case EventWorkerFailed:
		fail = &goodputFailure{Node: e.Node, DiedAt: e.DiedAt}
		cur := s.Members.Status()
		if e.Round == cur.Round && !cur.Open {
			d := s.recordFailures(e.Round, e.Failures, &fx)
			fail.Cause = d.Cause.String()
			if d.FailFast {
				s.Members.FailFast(d.Reason)
				break
			}
			if d.Action == diagnosis.Regroup {
				// Its peer restore failed: the next world agrees on its
				// step without peers, and no restart is spent.
				s.Memory.PeerRestoreFailed(e.Node)
				err = s.Members.Regroup(e.Node, e.Round, e.Time)
				break
			}
		}
		err = s.Members.WorkerFailed(e.Node, e.Round, e.Time)
	case EventNodeSucceeded:
		err = s.Members.NodeSucceeded(e.Node, e.Round, e.Time)
	case EventSetKey:
		s.Keys.Set(e.Key, e.Value)
		fx.Keys = true
	case EventTick:
		s.Members.Tick(e.Time)
	case EventFleet:
		if s.Fleet.Save(e.Fleet, e.Nodes) {
			s.Members.Expect(e.Nodes, e.Time)
		}
	case EventFailNodes:
		s.Members.FailNodes(e.Reason)
	case EventSucceedNodes:
		s.Members.SucceedNodes()
	case EventCancel:
		s.Members.Cancel(e.Reason)
	case EventCheckReport, EventCheckTick:
		err = s.applyCheck(e, &fx)
	case EventDeclareStorage:
		err = s.Members.Declare(*e.Declare)
	case EventGoodput:
		err = s.restoreGoodput(e.Goodput)
	case EventAutoScale:
		err = s.AutoScale.restore(e.AutoScale, s.Live)
	default:
		return fx, fmt.Errorf("journal event type %q %w", e.Type, ErrUnknownEvent)
	}
	if after := s.Members.Status(); after != before {
		s.checkWorld(e.Time)
		s.agreeMemory()
		if after.Round != before.Round {
			s.Datasets.Fence(int64(after.Round), e.Time) // every worker restarts in a new round
		}
		if !after.Open && (before.Open || after.Round != before.Round) && after.Job == rendezvous.Running {
			s.AutoScale.roundFormed(s.Members.Rendezvous().Snapshot(), e.Time)
		}
		fx.Views++
	}
	s.followGoodput(e, before, checkBefore, fail)
	fx.Failures = s.Failures.Newest(s.Failures.Added() - added)
	return fx, err
}

// applyDatasets applies a dataset event (Datasets); ok is false for other
// events. A batch's op errors are in fx, for the driver to tell the
// request's refusals from faults.
func (s *State) applyDatasets(e *Event, fx *Effects) (ok bool, err error) {
	sh, d := e.Shard, s.Datasets
	switch e.Type {
	case EventRegisterDataset:
		return true, d.Register(*sh.Spec, e.Time)
	case EventLease:
		fx.Shard, err = d.Lease(sh, s.shardWorker(sh), e.Time)
		return true, err
	case EventCompleteShards:
		fx.Shard, err = d.Complete(sh, s.shardWorker(sh), e.Time)
		return true, err
	case EventAdvance:
		return true, d.Advance(sh, e.Time)
	case EventAppend:
		fx.Shard, err = d.Append(sh, e.Time)
		return true, err
	case EventRestoreDataset:
		return true, d.RestoreDataset(sh, e.Time)
	case EventShardTick:
		d.Tick(e.Time)
		return true, nil
	case EventShardBatch:
		fx.Batch, fx.BatchErrs = d.Batch(e.Batch, s.shardWorker, e.Time)
		return true, nil
	}
	return false, nil
}

// shardWorker is the worker of a lease or complete event. Incarnation 0
// (a caller that does not know rounds: an older agent) stands for the
// current round, which is never fenced.
func (s *State) shardWorker(sh *ShardEvent) shard.Worker {
	inc := sh.Incarnation
	if inc == 0 {
		inc = int64(s.Members.Status().Round)
	}
	return shard.Worker{Name: sh.Worker, Incarnation: inc}
}

// blame records that a lost node ended its world's round (see
// Failures.Blame).
func (s *State) blame(node, reason string, now time.Time, loss *WorldLoss) {
	s.Failures.Blame(Loss{Node: node, Member: loss.Member, Round: loss.Round, Reason: reason, Time: now, Relaunched: s.Owned})
}

// recordFailures keeps a report's failures, each annotated with the
// diagnosis of the round, and returns the diagnosis (see Failures.Record);
// a diagnosis that calls for a node's relaunch is noticed to the fleet.
func (s *State) recordFailures(round int, raw []json.RawMessage, fx *Effects) diagnosis.Decision {
	var fs []Failure
	for _, b := range raw {
		if f, err := s.codec.Decode(b); err == nil {
			fs = append(fs, f)
		}
	}
	if len(fs) == 0 {
		return diagnosis.Decision{}
	}
	caps := s.Caps
	if s.Members.Configured() {
		st := s.Members.Status()
		caps.NoRestartsLeft, caps.MaxRestarts = st.Restarts >= st.MaxRestarts, st.MaxRestarts
	}
	d := s.Failures.Record(round, fs, caps)
	for _, n := range DiagnosisNotices(d, fs) {
		s.notice(n, fx)
	}
	return d
}

// notice queues n for the fleet, unless the journal is replaying (the
// fleet's restored state has seen it) or the master owns no nodes.
func (s *State) notice(n FleetNotice, fx *Effects) {
	if !s.Live || !s.Owned {
		return
	}
	s.Fleet.Notice(n)
	fx.Notices = true
}

// InitCheck makes the node check of a job configured with one, unless it
// has one.
func (s *State) InitCheck() {
	if cfg := s.Members.Config(); cfg != nil && cfg.NodeCheck != nil && s.Check == nil {
		s.Check = NewNodeCheck(cfg.NodeCheck, cfg.Rendezvous.MinNodes)
	}
}

// checkWorld starts the check of a world that just formed, or cancels the
// check of a world that ended.
func (s *State) checkWorld(now time.Time) {
	if s.Check == nil {
		return
	}
	s.Check.World(s.Members.Status(), func() []rendezvous.Member { return s.Members.Rendezvous().Snapshot().World }, now)
}

// agreeMemory fixes the memory step of a round that just closed.
func (s *State) agreeMemory() {
	st := s.Members.Status()
	if !s.Members.Configured() || st.Open || st.WorldRound == 0 || s.Memory.Agreement().Round == st.WorldRound {
		return // the world's snapshot costs O(nodes): take it once a round
	}
	s.Memory.Agree(s.Members.Rendezvous().Snapshot().World, st.WorldRound, st.WorldSize)
}

// checkCheckEvent validates a node check event before it is journaled.
func (s *State) checkCheckEvent(e *Event) error {
	if e.Type == EventCheckTick {
		return nil
	}
	if s.Check == nil {
		return invalidf("this job runs no node check: start its agents with --network-check")
	}
	if e.Check == nil {
		return invalidf("a node check report without its result")
	}
	return s.Check.CheckReport(e.Node, e.Round, e.Check.Stage, e.Check.Group)
}

// applyCheck applies a node check event; when the check ends, the
// excluded nodes leave the job.
func (s *State) applyCheck(e *Event, fx *Effects) error {
	if s.Check == nil {
		return nil
	}
	var ch CheckChange
	switch e.Type {
	case EventCheckReport:
		var err error
		if ch, err = s.Check.Report(e.Round, e.Check.Stage, e.Check.Group, e.Node, e.Check.Result, e.Time); err != nil {
			return err
		}
	case EventCheckTick:
		ch = s.Check.Tick(e.Time)
	}
	if ch.Changed {
		fx.Views++
	}
	if ch.Ended != nil {
		fx.CheckEnded = ch.Ended
		s.exclude(ch.Ended, e.Time, fx)
	}
	return nil
}

// exclude takes the check's excluded nodes out of the job: out of the
// rendezvous, their memory and their leases; the fleet relaunches them,
// their hosts marked bad.
func (s *State) exclude(ch *nodecheck.Check, now time.Time, fx *Effects) {
	for _, v := range ch.Verdicts {
		if !v.Excluded {
			continue
		}
		reason := fmt.Sprintf("the node check found it %s: %s", v.Kind, v.Reason)
		s.Members.Exclude(v.Node, reason, now)
		s.stopped = append(s.stopped, v.Node)
		s.Memory.Lost(v.Node)
		s.Datasets.NodeLost(v.Node, now)
		if host := s.host(v.Node); host != "" {
			s.notice(FleetNotice{Node: v.Node, Reason: reason, Action: nodemanager.Action{Kind: nodemanager.MarkHostBad, Host: host, Reason: reason}}, fx)
		}
		s.notice(FleetNotice{Node: v.Node, Reason: reason, Action: nodemanager.Action{Kind: nodemanager.RelaunchNode, NodeID: v.Node, Reason: reason, Cause: nodemanager.CauseNodeCheck}}, fx)
	}
}

// host is where node runs: as its platform reports it when the master runs
// the nodes (Hosts), else the address it joined with.
func (s *State) host(node string) string {
	if h := s.Hosts[node]; h != "" {
		return h
	}
	addr, _ := s.Members.Addr(node)
	return addr
}
