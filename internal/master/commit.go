package master

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/roverml/rover/internal/master/jobstate"
	"github.com/roverml/rover/internal/store"
)

// The master persists a transition before anyone can see it: an event is
// proposed, appended to the store together with whatever other events were
// proposed meanwhile (one write, one fsync: group commit), and only then
// applied to the state machines under the core's lock. Reads (views, keys,
// GetJob) therefore only ever show durable state, and the store is never
// written while the core's lock is held.
//
// There is no committer goroutine: the first proposer that finds no commit in
// progress leads, committing batch after batch until its own event is
// applied, and then hands the lead to the oldest waiting proposer.

// proposal is one event waiting to be committed.
type proposal struct {
	e   *jobstate.Event
	rec []byte
	// out, when set, runs under the core's lock right after e is applied,
	// with e's error: it reads the outcome for the caller.
	out  func(error)
	err  error
	done chan struct{} // closed once applied (or failed)
	lead chan struct{} // closed when this proposal's caller must lead
}

// committer queues proposals and tracks the lead.
type committer struct {
	mu      sync.Mutex
	queue   []*proposal
	leading bool
	// since counts the bytes appended since the last snapshot, which is
	// taken once since reaches the larger of every (minSnapshotEvery by
	// default) and the last snapshot's size: the journal stays within about
	// twice the state, and snapshotting costs O(1) per journaled byte.
	since, every, lastSnapshot int
	// broken is the store error that stopped the master; once set, every
	// proposal fails with it.
	broken error
	failed chan struct{} // closed when broken is set
}

// minSnapshotEvery is the least journal growth, in bytes, that triggers a
// snapshot of the state, after which the records before it are dropped.
const minSnapshotEvery = 4 << 20

// propose journals e, applies it once durable, and returns e's error. out,
// when not nil, runs under the core's lock right after e is applied. A
// cancelled ctx does not withdraw the proposal: it is committed or not as if
// the caller's answer was lost.
func (c *core) propose(ctx context.Context, e *jobstate.Event, out func(error)) error {
	c.mu.Lock()
	err := c.st.CheckEvent(e) // a request that fails now is not journaled
	c.mu.Unlock()
	if err != nil {
		return err
	}
	rec, err := e.Marshal()
	if err != nil {
		return err
	}
	p := &proposal{e: e, rec: rec, out: out, done: make(chan struct{}), lead: make(chan struct{})}
	c.commitProposals(ctx, []*proposal{p})
	return p.err
}

// applyAll journals events as one group, in order (contiguous in the
// journal, usually one store write), applies them once durable, and
// returns each event's error: what a caller with many events at once
// (a hundred pods failing together) proposes instead of one at a time.
func (c *core) applyAll(ctx context.Context, events []*jobstate.Event) []error {
	errs := make([]error, len(events))
	var ps []*proposal
	var at []int // the event of each proposal
	for i, e := range events {
		c.mu.Lock()
		errs[i] = c.st.CheckEvent(e)
		c.mu.Unlock()
		var rec []byte
		if errs[i] == nil {
			rec, errs[i] = e.Marshal()
		}
		if errs[i] == nil {
			ps = append(ps, &proposal{e: e, rec: rec, done: make(chan struct{}), lead: make(chan struct{})})
			at = append(at, i)
		}
	}
	if len(ps) > 0 {
		c.commitProposals(ctx, ps)
	}
	for j, p := range ps {
		errs[at[j]] = p.err
	}
	return errs
}

// commitProposals queues ps, contiguous and in order, and returns once
// they are applied (or failed): it leads the commits when none is in
// progress, or waits for the leader to commit them or hand it the lead.
// The leader takes the whole queue at once, so ps go together.
func (c *core) commitProposals(ctx context.Context, ps []*proposal) {
	first, last := ps[0], ps[len(ps)-1]
	cm := &c.commits
	cm.mu.Lock()
	if cm.broken != nil {
		cm.mu.Unlock()
		for _, p := range ps {
			p.err = cm.broken
		}
		return
	}
	cm.queue = append(cm.queue, ps...)
	if cm.leading {
		cm.mu.Unlock()
		select {
		case <-last.done:
			return
		case <-first.lead:
		}
		cm.mu.Lock()
	}
	cm.leading = true
	for !isDone(last) {
		batch := cm.queue
		cm.queue = nil
		cm.mu.Unlock()
		c.commitBatch(context.WithoutCancel(ctx), batch)
		cm.mu.Lock()
	}
	if len(cm.queue) > 0 {
		close(cm.queue[0].lead) // it is waiting in the select above
	} else {
		cm.leading = false
	}
	cm.mu.Unlock()
}

func isDone(p *proposal) bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// commitBatch appends a batch to the store and applies it. Only the leader
// calls it.
func (c *core) commitBatch(ctx context.Context, batch []*proposal) {
	start := time.Now()
	c.commitAfter(ctx, batch, false)
	c.metrics.Committed(time.Since(start), len(batch))
}

// commitAfter is commitBatch; snapshotted says the store's journal was
// emptied since the last append.
//
// A store may hold a bounded journal between snapshots (kubestore keeps it
// in one API object) and refuse an Append with store.ErrFull, writing
// nothing. The leader then snapshots the state, which reflects every record
// appended so far (the batch is not applied yet), and appends again; a batch
// that an empty journal cannot hold either is committed in halves (a crash
// between them is as if the second half's answers were lost).
func (c *core) commitAfter(ctx context.Context, batch []*proposal, snapshotted bool) {
	recs := make([][]byte, 0, len(batch)+1)
	size := 0
	// The goodput state the heartbeats changed goes first (goodput.go).
	c.mu.Lock()
	goodputRec := c.goodputRecordLocked(batch)
	c.mu.Unlock()
	if goodputRec != nil {
		recs = append(recs, goodputRec)
		size += len(goodputRec)
	}
	for _, p := range batch {
		recs = append(recs, p.rec)
		size += len(p.rec)
	}
	err := c.store.Append(ctx, recs)
	if errors.Is(err, store.ErrFull) && !snapshotted {
		if err = c.snapshotNow(ctx); err != nil {
			c.fail(fmt.Errorf("snapshot the master's state to make room in the store's journal: %w", err), batch)
			return
		}
		snapshotted = true
		if goodputRec != nil {
			recs = recs[1:] // the snapshot holds that goodput state, and newer
			size -= len(goodputRec)
			goodputRec = nil
		}
		err = c.store.Append(ctx, recs)
	}
	if errors.Is(err, store.ErrFull) && len(batch) > 1 {
		if goodputRec != nil {
			c.goodputNotJournaled() // the halves carry it
		}
		half := len(batch) / 2
		c.commitAfter(ctx, batch[:half], snapshotted)
		if _, broken := c.storeFailed(); broken() == nil {
			c.commitAfter(ctx, batch[half:], false)
		}
		return
	}
	if errors.Is(err, store.ErrFull) {
		err = fmt.Errorf("a transition of %d bytes does not fit in the store's journal even right after a snapshot: %w", size, err)
	}
	if err != nil {
		c.fail(fmt.Errorf("persist %d master transitions: %w", len(batch), err), batch)
		return
	}
	var state []byte
	c.mu.Lock()
	for _, p := range batch {
		p.err = c.applyLocked(p.e)
		c.observeRoundLocked(p.e.Time)
		if p.out != nil {
			p.out(p.err)
		}
	}
	c.commits.since += size
	var snapErr error
	if c.commits.since >= max(c.commits.every, c.commits.lastSnapshot) {
		state, snapErr = c.marshalStateLocked()
	}
	c.mu.Unlock()
	c.flushEvents() // before the answers: an acknowledged transition's events are logged
	for _, p := range batch {
		close(p.done)
	}
	if snapErr == nil && state != nil {
		snapErr = c.store.Snapshot(ctx, state)
	}
	if snapErr != nil {
		c.fail(fmt.Errorf("snapshot the master's state: %w", snapErr), nil)
		return
	}
	if state != nil {
		c.commits.since, c.commits.lastSnapshot = 0, len(state) // only the leader touches these
	}
}

// snapshotNow stores a snapshot of the state. Only the leader calls it.
func (c *core) snapshotNow(ctx context.Context) error {
	c.mu.Lock()
	state, err := c.marshalStateLocked()
	c.mu.Unlock()
	if err == nil {
		err = c.store.Snapshot(ctx, state)
	}
	if err != nil {
		return err
	}
	c.commits.since, c.commits.lastSnapshot = 0, len(state)
	return nil
}

// fail stops the master: the store did not take a write, so nothing more
// can be acknowledged. The batch's proposals fail unapplied; a master
// restarted on the store replays what is durable.
func (c *core) fail(err error, batch []*proposal) {
	cm := &c.commits
	cm.mu.Lock()
	if cm.broken == nil {
		cm.broken = fmt.Errorf("%w: %w", ErrStoreFailed, err)
		close(cm.failed)
	}
	err = cm.broken
	rest := cm.queue
	cm.queue = nil
	cm.mu.Unlock()
	for _, p := range append(batch, rest...) {
		p.err = err
		close(p.done)
	}
}

// storeFailed returns a channel closed when the store failed, and the error.
func (c *core) storeFailed() (<-chan struct{}, func() error) {
	return c.commits.failed, func() error {
		c.commits.mu.Lock()
		defer c.commits.mu.Unlock()
		return c.commits.broken
	}
}

// wakeLocked acts on an applied event's effects: it wakes the push streams
// when the views changed (once per change, each a new version), the key
// watchers when a key did, and the fleet when notices were queued for it.
func (c *core) wakeLocked(fx jobstate.Effects) {
	for range fx.Views {
		c.changedLocked()
	}
	if fx.Keys {
		close(c.keys)
		c.keys = make(chan struct{})
	}
	if fx.Notices {
		select {
		case c.noticeCh <- struct{}{}:
		default:
		}
	}
}
