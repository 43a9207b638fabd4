package agent

import (
	"slices"
	"sync"
	"time"

	roverv1 "github.com/roverml/rover/api/rover/v1"
	"google.golang.org/protobuf/proto"
)

// lifecycle turns what the agent sees of its workers (the group spawned,
// their checkpointers' restore reports and commits, the saver's durable
// files) into the node's events for the master (events.go), one per node
// and moment, as docs/design/goodput.md's driving table wants:
//
//   - WORKERS_STARTED once every local worker of a round is spawned;
//   - RESTORE_STARTED when the round's first worker begins loading;
//   - RESUMED once every local worker finished loading, with the lowest
//     step (and its source: PEER or BACKUP instead of MEMORY when the
//     agent fetched that step from a peer before the workers started),
//     the fetch's and the load's durations;
//   - CHECKPOINT_SAVED once per step when the node's savers committed it,
//     with the longest blocking; again with durable set once every rank
//     that committed it has it on storage;
//   - LAST_STEP once the round's workers all exited, with the newest step
//     any of them completed, from their step slots (stepslot.go).
//
// A round's restore and save events wait until its WORKERS_STARTED went
// out (a fast worker may load before the last one is spawned), so the
// master sees a round's moments in order. Reports of an older round than
// the newest are dropped.
//
// The round's milestones that went out (WORKERS_STARTED, RESTORE_STARTED,
// RESUMED) are sent again on a new session (resend): a master killed
// before it journaled them (its next tick) comes back without them, and a
// duplicate or late one changes nothing in the master's accounting.
type lifecycle struct {
	mu  sync.Mutex
	q   *eventQueue
	now func() int64 // Unix nanoseconds, the agent's clock

	round          int64
	localWorldSize int
	started        bool                 // WORKERS_STARTED of round went out
	held           []*roverv1.NodeEvent // the round's events before it
	sent           []*roverv1.NodeEvent // the round's milestones that went out
	restoring      bool                 // RESTORE_STARTED of round went out
	restoreAt      int64                // when, in the agent's clock
	loaded         map[int32]loadReport // by local rank
	resumed        bool
	// fetch is what the agent fetched from a peer before the round's
	// workers started (round -1: nothing).
	fetch fetchReport
	// saves are the round's steps committed by some but not yet all of
	// the node's savers; lastSaved is the newest step reported.
	saves     map[int64]*pendingSave
	lastSaved int64
	// committed remembers, for the latest steps of any round, which local
	// ranks committed them with a location, to tell when the node's
	// files of a step are all durable.
	committed map[savedStep]*commitRecord
	order     []savedStep // committed's keys, oldest first
}

// maxPendingSaves bounds the steps waiting for their other savers; past it
// the oldest is reported with what it has. maxCommitRecords bounds the
// steps remembered for their durable report.
const (
	maxPendingSaves  = 8
	maxCommitRecords = 32
)

type loadReport struct {
	step   int64
	source roverv1.CheckpointSource
}

// fetchReport is a step the agent fetched from a peer for a round's
// workers: from a peer's replicated copy (source PEER) or its backup
// peer's copy of its shards (BACKUP).
type fetchReport struct {
	round, step int64
	source      roverv1.CheckpointSource
	peer        string
	nanos       int64
}

type pendingSave struct {
	ranks    map[int32]bool
	expected int
	blocking int64
	at       int64
}

type savedStep struct{ round, step int64 }

type commitRecord struct {
	ranks, durable map[int32]bool
	// saved: the step's save went out; reported: its durable save did.
	saved, reported bool
}

func newLifecycle(q *eventQueue, now func() int64) *lifecycle {
	return &lifecycle{q: q, now: now, round: -1, fetch: fetchReport{round: -1}}
}

// fetched: before round's workers started, the agent fetched step from
// peer (source PEER or BACKUP), in d. The round's RESUMED says so when its
// workers loaded that step from memory.
func (l *lifecycle) fetched(round, step int64, source roverv1.CheckpointSource, peer string, d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.fetch = fetchReport{round: round, step: step, source: source, peer: peer, nanos: int64(d)}
}

// enterLocked moves to round (reports of an older one are refused: false).
// A newer round first reports what the old one left pending, also what
// waited for a WORKERS_STARTED that never came (a group that failed to
// start every worker).
func (l *lifecycle) enterLocked(round int64, localWorldSize int) bool {
	if round < l.round {
		return false
	}
	if round > l.round {
		l.flushSavesLocked()
		for _, e := range l.held {
			l.q.add(e)
		}
		l.round, l.localWorldSize = round, localWorldSize
		l.started, l.held, l.sent, l.restoring, l.resumed = false, nil, nil, false, false
		l.loaded = map[int32]loadReport{}
		l.saves, l.lastSaved = map[int64]*pendingSave{}, -1
	}
	return true
}

// emitLocked queues e, or holds it until the round's WORKERS_STARTED.
func (l *lifecycle) emitLocked(e *roverv1.NodeEvent) {
	e.Round = l.round
	if !l.started && e.Kind != roverv1.NodeEventKind_NODE_EVENT_KIND_WORKERS_STARTED {
		l.held = append(l.held, e)
		return
	}
	l.sendLocked(e)
}

// sendLocked queues e, remembering the round's milestones for resend.
func (l *lifecycle) sendLocked(e *roverv1.NodeEvent) {
	l.q.add(e)
	if e.GetRound() == l.round && e.GetKind() != roverv1.NodeEventKind_NODE_EVENT_KIND_CHECKPOINT_SAVED {
		l.sent = append(l.sent, e)
	}
}

// resend queues again, in front of what waits, the current round's
// milestones that went out: the agent is on a new session, perhaps with a
// new master that never journaled them.
func (l *lifecycle) resend() {
	l.mu.Lock()
	defer l.mu.Unlock()
	again := make([]*roverv1.NodeEvent, len(l.sent))
	for i, e := range l.sent {
		again[i] = proto.Clone(e).(*roverv1.NodeEvent)
	}
	l.q.putBack(again)
}

// workersStarted: every local worker of round is spawned.
func (l *lifecycle) workersStarted(round int64, localWorldSize int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.enterLocked(round, localWorldSize) || l.started {
		return
	}
	l.emitLocked(&roverv1.NodeEvent{Kind: roverv1.NodeEventKind_NODE_EVENT_KIND_WORKERS_STARTED, TimeUnixNanos: l.now()})
	l.started = true
	for _, e := range l.held {
		l.sendLocked(e)
	}
	l.held = nil
}

// restoreStarted: a worker of round began loading a checkpoint.
func (l *lifecycle) restoreStarted(round int64, localWorldSize int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.enterLocked(round, localWorldSize) || l.restoring || l.resumed {
		return
	}
	l.restoring, l.restoreAt = true, l.now()
	l.emitLocked(&roverv1.NodeEvent{Kind: roverv1.NodeEventKind_NODE_EVENT_KIND_RESTORE_STARTED, TimeUnixNanos: l.restoreAt})
}

// restoreFinished: local rank's worker of round loaded step from source
// (NONE, step -1: nothing). The node has resumed once every local worker
// said so: at the lowest step.
func (l *lifecycle) restoreFinished(round int64, localWorldSize int, local int32, step int64, source roverv1.CheckpointSource) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.enterLocked(round, localWorldSize) || l.resumed {
		return
	}
	if _, ok := l.loaded[local]; ok {
		return // its first report counts
	}
	if source == roverv1.CheckpointSource_CHECKPOINT_SOURCE_NONE || source == roverv1.CheckpointSource_CHECKPOINT_SOURCE_UNSPECIFIED {
		source, step = roverv1.CheckpointSource_CHECKPOINT_SOURCE_NONE, -1
	}
	l.loaded[local] = loadReport{step: step, source: source}
	if len(l.loaded) < l.localWorldSize {
		return
	}
	low := loadReport{step: -2}
	for _, r := range l.loaded {
		// The lowest step; of equal ones, storage (the slower) over memory.
		if low.step == -2 || r.step < low.step || (r.step == low.step && r.source > low.source) {
			low = r
		}
	}
	l.resumed = true
	e := &roverv1.NodeEvent{Kind: roverv1.NodeEventKind_NODE_EVENT_KIND_RESUMED, TimeUnixNanos: l.now(),
		Step: low.step, Source: low.source}
	if l.restoring {
		e.LoadNanos = max(e.GetTimeUnixNanos()-l.restoreAt, 0)
	}
	if f := l.fetch; f.round == l.round && f.step == low.step && low.source == roverv1.CheckpointSource_CHECKPOINT_SOURCE_MEMORY {
		e.Source, e.Peer, e.FetchNanos = f.source, f.peer, f.nanos
	}
	l.emitLocked(e)
}

// saved: local rank's worker of round committed step, blocked by the save
// for blocking nanoseconds; savers is how many local ranks commit each step
// (0: every one). located says the commit named where the step persists.
func (l *lifecycle) saved(round int64, localWorldSize int, local int32, step, blocking int64, savers int, located bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.enterLocked(round, localWorldSize) {
		return
	}
	if located {
		l.rememberCommitLocked(savedStep{round, step}, local)
	}
	if step <= l.lastSaved {
		return // late: the step was reported with the savers it had
	}
	if savers <= 0 || savers > l.localWorldSize {
		savers = l.localWorldSize
	}
	p := l.saves[step]
	if p == nil {
		p = &pendingSave{ranks: map[int32]bool{}, expected: savers}
		l.saves[step] = p
	}
	p.ranks[local] = true
	p.blocking = max(p.blocking, blocking)
	p.at = l.now()
	// A saver that moved on to step will not commit an older one.
	var left []int64
	for s, o := range l.saves {
		if s < step && o.ranks[local] {
			left = append(left, s)
		}
	}
	slices.Sort(left)
	for _, s := range left {
		l.reportSaveLocked(s)
	}
	if len(p.ranks) >= p.expected {
		l.reportSaveLocked(step)
	}
	for len(l.saves) > maxPendingSaves {
		l.reportSaveLocked(l.oldestSaveLocked())
	}
}

func (l *lifecycle) oldestSaveLocked() int64 {
	first := true
	var oldest int64
	for s := range l.saves {
		if first || s < oldest {
			oldest, first = s, false
		}
	}
	return oldest
}

// reportSaveLocked sends pending step's save, and forgets the steps before it.
func (l *lifecycle) reportSaveLocked(step int64) {
	p := l.saves[step]
	if p == nil {
		return
	}
	delete(l.saves, step)
	l.lastSaved = max(l.lastSaved, step)
	l.emitLocked(&roverv1.NodeEvent{Kind: roverv1.NodeEventKind_NODE_EVENT_KIND_CHECKPOINT_SAVED, TimeUnixNanos: p.at,
		Step: step, BlockingNanos: p.blocking})
	if r := l.committed[savedStep{l.round, step}]; r != nil {
		r.saved = true
		l.reportDurableLocked(savedStep{l.round, step})
	}
}

// flushSavesLocked reports every pending save of the round, oldest first
// (the round ended, or a newer one began).
func (l *lifecycle) flushSavesLocked() {
	for len(l.saves) > 0 {
		l.reportSaveLocked(l.oldestSaveLocked())
	}
}

// groupEnded reports what the round's workers left pending, and the
// newest step they completed (LAST_STEP, from their step slots), at once.
func (l *lifecycle) groupEnded(round int64, last lastStep) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if round == l.round {
		l.flushSavesLocked()
		if last.OK {
			l.emitLocked(&roverv1.NodeEvent{Kind: roverv1.NodeEventKind_NODE_EVENT_KIND_LAST_STEP,
				TimeUnixNanos: last.AtUnixNanos, Step: last.Step})
		}
	}
	l.q.urge()
}

func (l *lifecycle) rememberCommitLocked(k savedStep, local int32) {
	r := l.committed[k]
	if r == nil {
		if l.committed == nil {
			l.committed = map[savedStep]*commitRecord{}
		}
		r = &commitRecord{ranks: map[int32]bool{}, durable: map[int32]bool{}}
		l.committed[k] = r
		l.order = append(l.order, k)
		for len(l.order) > maxCommitRecords {
			delete(l.committed, l.order[0])
			l.order = l.order[1:]
		}
	}
	r.ranks[local] = true
}

// durable: the saver made local rank's file of step (saved in round) durable
// and reported it to the master. Once every local rank that committed the
// step has (and the step's save was reported), the node's save of it is
// durable.
func (l *lifecycle) durable(local int, step int64, round int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := savedStep{int64(round), step}
	r := l.committed[k]
	if r == nil {
		return // not committed by this agent (an adopted arena's)
	}
	r.durable[int32(local)] = true
	l.reportDurableLocked(k)
}

// reportDurableLocked sends k's durable save once its save went out and
// every rank that committed it made it durable (a save never reported, a
// late commit of a step below the newest reported, is never durable either).
func (l *lifecycle) reportDurableLocked(k savedStep) {
	r := l.committed[k]
	if r == nil || r.reported || !r.saved {
		return
	}
	for rank := range r.ranks {
		if !r.durable[rank] {
			return
		}
	}
	r.reported = true
	e := &roverv1.NodeEvent{Kind: roverv1.NodeEventKind_NODE_EVENT_KIND_CHECKPOINT_SAVED, Round: k.round,
		TimeUnixNanos: l.now(), Step: k.step, Durable: true}
	if k.round == l.round && !l.started {
		l.held = append(l.held, e)
		return
	}
	l.q.add(e)
}
