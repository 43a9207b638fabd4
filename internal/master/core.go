package master

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/roverml/rover/internal/ckpt"
	"github.com/roverml/rover/internal/eventlog"
	"github.com/roverml/rover/internal/jobconfig"
	"github.com/roverml/rover/internal/master/jobstate"
	"github.com/roverml/rover/internal/metrics"
	"github.com/roverml/rover/internal/nodemanager"
	"github.com/roverml/rover/internal/rendezvous"
	"github.com/roverml/rover/internal/store"
)

// Store is the persistence the master needs: a journal of records, durable
// when Append returns, and a snapshot of the whole state that replaces the
// records before it.
type Store interface {
	Append(ctx context.Context, recs [][]byte) error
	Snapshot(ctx context.Context, state []byte) error
	Load(ctx context.Context) (store.Contents, error)
}

// core is the master's state behind one mutex: the sub-states of package
// jobstate (membership and rounds, keys, memory snapshots, failures,
// datasets, the node check, the fleet) and the fleet's view for GetJob.
// Every method takes the time from its caller. Changes that matter to node
// views close the views channel, waking the push streams; key changes close
// the keys channel.
type core struct {
	mu      sync.Mutex
	store   Store
	runID   string
	st      *jobstate.State // the job's sub-states
	views   chan struct{}
	version uint64 // of the node views
	keys    chan struct{}
	commits committer

	// shardOut and batchOut are the outcome of the last dataset event,
	// for its caller.
	shardOut jobstate.ShardOutcome
	batchOut batchOutcome

	// The node manager's side (fleetstate.go; its journaled state is
	// st.Fleet, and st.Owned says the master owns the job's nodes):
	// what GetJob shows of them, and the signal of queued notices.
	fleetView *nodemanager.Status
	platform  string
	noticeCh  chan struct{}
	usage     *usageBox // the workers' usage from heartbeats, for the fleet (usage.go)

	// The goodput accounting's side (goodput.go): each node's clock
	// offset, as its newest heartbeat showed it, and when the tick last
	// journaled the state.
	offsets          map[string]clockOffset
	offsetsPruneAt   int // len(offsets) at which pruneOffsetsLocked runs next
	goodputJournaled time.Time
	log              *slog.Logger

	// The job's event log (events.go): the events derived from the
	// transitions applied, waiting for the commit's leader to append them.
	events        *eventlog.Log
	pendingEvents []eventlog.Event
	// watchEnd is closed when the master stops serving: the WatchEvents
	// streams send what is left and end.
	watchEnd chan struct{}

	// metrics records commits and rounds (metrics.go); nil without
	// Config.MetricsAddr. rounds times the rounds.
	metrics *metrics.Master
	rounds  roundTimer

	// autoScale is what auto-scaling keeps outside the journal (autoscale.go).
	autoScale autoScaleState
	// psScale is PS scaling's state (psscale.go); nil without it.
	psScale *psScaleState
}

func newCore(runID string, store Store) *core {
	return &core{
		store:    store,
		runID:    runID,
		st:       jobstate.NewState(ckpt.SameLocation, failureCodec{}),
		views:    make(chan struct{}),
		keys:     make(chan struct{}),
		commits:  committer{failed: make(chan struct{}), every: minSnapshotEvery},
		noticeCh: make(chan struct{}, 1),
		usage:    newUsageBox(),
		log:      slog.New(slog.DiscardHandler),
		events:   newMemoryEvents(),
		watchEnd: make(chan struct{}),
	}
}

// restore loads the store's snapshot and replays the journal after it.
func (c *core) restore(ctx context.Context, now time.Time) (int, error) {
	contents, err := c.store.Load(ctx)
	if err != nil {
		return 0, fmt.Errorf("read the master's state: %w", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if contents.Snapshot == nil && len(contents.Records) == 0 {
		return 0, c.initStoreLocked(ctx)
	}
	if contents.Snapshot != nil {
		if err := c.restoreStateLocked(contents.Snapshot); err != nil {
			return 0, fmt.Errorf("restore the master's snapshot: %w", err)
		}
	}
	if i, err := c.replayLocked(contents.Records); err != nil {
		return i, err
	}
	c.commits.lastSnapshot = len(contents.Snapshot)
	for _, r := range contents.Records {
		c.commits.since += len(r)
	}
	// Liveness is not journaled: every known node gets a fresh timeout.
	c.st.Members.Refresh(now)
	c.st.Live = true
	c.changedLocked()
	n := len(contents.Records)
	if contents.Snapshot != nil {
		n++
	}
	return n, nil
}

// initStoreLocked marks a new store as this job's at once, so that a master
// of another job started on it is refused.
func (c *core) initStoreLocked(ctx context.Context) error {
	state, err := c.marshalStateLocked()
	if err == nil {
		err = c.store.Snapshot(ctx, state)
	}
	if err != nil {
		return fmt.Errorf("initialise the master's state: %w", err)
	}
	c.commits.lastSnapshot = len(state)
	c.st.Live = true
	return nil
}

// replayLocked applies the journal records that follow the snapshot. On
// failure it returns the index of the record it stopped at.
func (c *core) replayLocked(records [][]byte) (int, error) {
	old := false // replaying records of schema 1, from before shuffled orders changed
	for i, b := range records {
		e, err := jobstate.UnmarshalEvent(b)
		if err != nil {
			return i, fmt.Errorf("journal record %d: %w", i, err)
		}
		if old && e.Schema > 1 {
			if err := c.checkOldOrdersLocked(i); err != nil {
				return i, err
			}
		}
		old = e.Schema == 1
		// A transition that failed when it was new fails the same way now,
		// and changes the state the same way: only an event this master
		// cannot apply at all stops the replay.
		if err := c.applyLocked(e); errors.Is(err, errUnknownEvent) {
			return i, fmt.Errorf("replay journal record %d (%s): %w", i, e.Type, err)
		}
	}
	if old {
		if err := c.checkOldOrdersLocked(len(records)); err != nil {
			return len(records), err
		}
	}
	return 0, nil
}

// checkOldOrdersLocked checks the state after the journal records of an
// earlier Rover (the first n records), whose shuffled orders differ from
// this one's: no shuffled dataset may be part-way through an epoch in it.
func (c *core) checkOldOrdersLocked(n int) error {
	if err := c.st.Datasets.Machine().CheckOldOrders(); err != nil {
		return fmt.Errorf("replay the %d journal records of an earlier Rover: %w", n, err)
	}
	return nil
}

// apply journals an event and applies it once durable.
func (c *core) apply(ctx context.Context, e *jobstate.Event) error {
	return c.propose(ctx, e, nil)
}

// applyLocked applies a committed event: the same checks and transition
// whether the event is new or replayed, so a replay rebuilds the same state.
// It acts on the effects (wakeLocked) and keeps a dataset event's outcome
// for its caller.
func (c *core) applyLocked(e *jobstate.Event) error {
	before := c.st.Members.Status()
	fx, err := c.st.Apply(e)
	if c.st.Live {
		c.pendingEvents = append(c.pendingEvents, deriveEvents(e, before, c.st.Members.Status(), fx)...)
	}
	c.wakeLocked(fx)
	c.shardOut = fx.Shard
	if e.Type == jobstate.EventShardBatch && err == nil {
		c.batchOut = batchOutcome{outs: fx.Batch, errs: fx.BatchErrs}
		err = faults(fx.BatchErrs)
	}
	return err
}

// changedLocked wakes every push stream.
func (c *core) changedLocked() {
	c.version++
	close(c.views)
	c.views = make(chan struct{})
}

// configure sets the job's configuration unless it is set already, in which
// case cfg must agree with it.
func (c *core) configure(ctx context.Context, cfg jobconfig.Config, now time.Time) error {
	c.mu.Lock()
	set := c.st.Members.Config()
	c.mu.Unlock()
	if set != nil {
		return settingsAgree(set, &cfg)
	}
	if err := cfg.Rendezvous.Validate(); err != nil {
		return fmt.Errorf("%w: %w", errInvalid, err)
	}
	var agreed error
	err := c.propose(ctx, &jobstate.Event{Type: jobstate.EventConfigure, Time: now, Config: &cfg}, func(error) {
		agreed = settingsAgree(c.st.Members.Config(), &cfg) // another agent's configuration may have come first
	})
	return errors.Join(err, agreed)
}

// join adds a node to the rendezvous. A repeated request for a round the node
// already belongs to is answered without a transition.
func (c *core) join(ctx context.Context, req rendezvous.JoinRequest, mem memoryReport, round int, now time.Time) (nodeRank, joinedRound int, err error) {
	c.mu.Lock()
	if !c.st.Members.Configured() {
		c.mu.Unlock()
		return 0, 0, errNotConfigured
	}
	if round > 0 {
		if rank, r, ok := c.st.Members.Rendezvous().Joined(req.NodeID); ok && r >= round {
			c.mu.Unlock()
			return rank, r, nil
		}
	}
	c.mu.Unlock()
	err = c.propose(ctx, &jobstate.Event{Type: jobstate.EventJoin, Time: now, Join: &req, Snapshots: mem.snaps, PeerAddr: mem.peerAddr, PeerRestoreFailed: mem.peerFailed}, func(err error) {
		if err == nil {
			nodeRank, joinedRound, _ = c.st.Members.Rendezvous().Joined(req.NodeID)
		}
	})
	return nodeRank, joinedRound, err
}

// tick advances the timeouts of both state machines: it proposes the
// events whose time has come and returns once they are applied.
func (c *core) tick(ctx context.Context, now time.Time) error {
	var events []*jobstate.Event
	c.mu.Lock()
	if d, ok := c.st.Datasets.Machine().NextDeadline(); ok && !now.Before(d) {
		events = append(events, &jobstate.Event{Type: jobstate.EventShardTick, Time: now, Shard: &jobstate.ShardEvent{}})
	}
	if c.st.Members.Configured() {
		for _, lost := range c.st.Members.Expired(now) {
			events = append(events, &jobstate.Event{Type: jobstate.EventNodeLost, Time: now, Node: lost.ID, Reason: lost.Reason, Since: lost.Since})
		}
		if d, ok := c.st.Members.Rendezvous().NextDeadline(); ok && !now.Before(d) {
			events = append(events, &jobstate.Event{Type: jobstate.EventTick, Time: now})
		}
		if e := c.checkDeadlineLocked(now); e != nil {
			events = append(events, e)
		}
	}
	c.mu.Unlock()
	var errs []error
	for _, e := range events {
		errs = append(errs, c.apply(ctx, e))
	}
	errs = append(errs, c.journalGoodput(ctx, now))
	return errors.Join(errs...)
}

// seen records a heartbeat.
func (c *core) seen(id string, now time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.st.Members.Seen(id, now)
}

// connected records a push stream opening or closing.
func (c *core) connected(id string, open bool, now time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.st.Members.Connected(id, open, now)
}

// checkpointWorld checks a checkpoint report's rank against the last closed
// world (jobstate.Membership.CheckpointWorld).
func (c *core) checkpointWorld(nodeID string, round, rank int) (jobconfig.CheckpointStorage, int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.st.Members.CheckpointWorld(nodeID, round, rank)
}

// config returns the job's configuration, or nil before it is configured.
func (c *core) config() *jobconfig.Config {
	c.mu.Lock()
	defer c.mu.Unlock()
	set := c.st.Members.Config()
	if set == nil {
		return nil
	}
	cfg := *set
	return &cfg
}

// fresh reports whether no world of the job has formed yet: no worker has
// run, so nothing of the job can be writing to its storage.
func (c *core) fresh() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.st.Members.Configured() || c.st.Members.Status().WorldRound == 0
}
