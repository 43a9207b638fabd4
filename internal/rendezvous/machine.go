package rendezvous

import (
	"fmt"
	"slices"
	"time"
)

// nodeRec is everything the machine remembers about one NodeID.
type nodeRec struct {
	id     string
	rank   int // node rank; kept (as a preference) after the node is lost
	lws    int
	addr   string
	lost   bool
	joined bool // in the current open round, or waiting for the next
	// succeeded is the world round in which this node's workers succeeded
	// (0: none). Comparing with worldRound avoids resetting every node.
	succeeded int
}

// Machine is the rendezvous state machine of one job. It is not safe for
// concurrent use; the master's driver serialises calls.
type Machine struct {
	cfg      Config
	job      JobState
	fail     *failure
	round    int
	open     bool
	openedAt time.Time // when the current round opened
	lastJoin time.Time // last join to the current open round (or its opening)
	restarts int
	expected int  // nodes the platform runs for the job (Expect); 0: unknown
	decided  bool // the job succeeded by the node manager's verdict (SucceedNodes), not its members
	version  uint64
	// suspect is the latest failure whose blame is not settled yet (nil:
	// none): see Config.BlameWindow.
	suspect *suspect

	nodes  map[string]*nodeRec
	live   int // nodes not lost
	ranks  ranks
	joined map[string]*nodeRec // open round's joiners, or waiting nodes while closed

	world      []Member       // last closed world, by group rank
	worldRound int            // round of world (0: none yet)
	worldSize  int            // sum of LocalWorldSize over world
	index      map[string]int // NodeID -> position in world
	nSucceeded int            // members of world that succeeded in worldRound
	// awaiting counts, while a round is open, the members of the last
	// world that are neither lost nor joined: the nodes a restart round
	// waits for (rule (c) of maybeClose). Every change of a member's lost
	// or joined flag goes through setLost, addJoined and dropJoined, which
	// keep it; openNext, close and Restore recount it.
	awaiting int
}

// suspect is a worker failure reported at at for round, whose blame passes
// to a member of that round's world lost before at+BlameWindow, even when a
// new world formed meanwhile (without the member not yet noticed lost).
type suspect struct {
	node  string
	round int
	at    time.Time
	// charged: the failure opened the next round and spent a restart, to be
	// given back. Else the restart budget was used up and the job fails
	// when the window ends, unless a loss comes first.
	charged bool
	reason  string // the job's failure reason when !charged
	// members is the failed world (NodeID -> group rank): a new world may
	// form while a member's loss is still to be noticed.
	members map[string]int
}

// New returns a machine for a job whose round 1 opens at now.
func New(cfg Config, now time.Time) (*Machine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Machine{
		cfg:      cfg.withDefaults(),
		round:    1,
		open:     true,
		openedAt: now,
		lastJoin: now,
		version:  1,
		nodes:    make(map[string]*nodeRec),
		joined:   make(map[string]*nodeRec),
		index:    make(map[string]int),
	}, nil
}

// Version increments on every change a Snapshot could show (and on some
// internal ones, such as a node that is not joined being lost), so a driver
// can tell cheaply whether to publish a new snapshot or assignments.
func (m *Machine) Version() uint64 { return m.version }

// Err is nil unless the job failed; then it says why and wraps
// [ErrTooFewNodes] or [ErrRestartsExhausted].
func (m *Machine) Err() error {
	if m.fail == nil {
		return nil
	}
	return m.fail
}

func (m *Machine) finished() bool { return m.job != Running }

func (m *Machine) changed() { m.version++ }

// inWorld reports whether n is a member of the world of the current, closed
// round.
func (m *Machine) inWorld(n *nodeRec) bool {
	if m.open {
		return false
	}
	_, ok := m.index[n.id]
	return ok
}

// Join admits an agent to the current open round, or, while the round is
// closed, makes it wait for the next one (opening it at once when the node
// is a member of the current world, whose agent restarted, or when the
// waiting nodes would grow the world). It returns the node's stable node
// rank. Joins are O(log n) amortised.
func (m *Machine) Join(req JoinRequest, now time.Time) (int, error) {
	if err := req.validate(m.cfg); err != nil {
		return -1, err
	}
	m.maybeClose(now) // timers that expired before this event apply first
	if m.finished() {
		return -1, fmt.Errorf("%w: the job has %s; the agent should exit", ErrJobFinished, m.job)
	}
	n := m.nodes[req.NodeID]
	rank := req.RequestedRank
	if rank >= 0 {
		if o, taken := m.ranks.heldByOther(rank, n); taken {
			return -1, fmt.Errorf("%w: node rank %d is held by live node %q; request -1 for any rank, or a free one", ErrRankTaken, rank, o.id)
		}
	}
	if n != nil && n.joined && !n.lost && (rank < 0 || rank == n.rank) && n.lws == req.LocalWorldSize && n.addr == req.Addr {
		return n.rank, nil // a retry of a join that already counted
	}
	if n == nil {
		n = &nodeRec{id: req.NodeID, rank: -1}
		m.nodes[n.id] = n
		m.live++
	} else if n.lost {
		m.setLost(n, false)
		m.live++
	}
	if rank < 0 {
		if _, taken := m.ranks.heldByOther(n.rank, n); n.rank >= 0 && !taken {
			rank = n.rank
		} else {
			rank = m.ranks.lowestFree()
		}
	}
	m.ranks.assign(n, rank)
	n.lws, n.addr = req.LocalWorldSize, req.Addr
	m.changed()

	if !m.open {
		if m.inWorld(n) {
			// Its agent restarted: re-form the world. Like a loss, this
			// takes the blame for a failure of the world it left.
			m.suspect = nil
			m.openNext(now, false)
		} else {
			m.addJoined(n)
			// A world that failed out of restarts does not grow while
			// its failure waits for a loss to excuse it.
			if m.suspect == nil && len(m.world) < m.cfg.MaxNodes && m.cfg.take(len(m.world)+len(m.joined)) > len(m.world) {
				m.openNext(now, false) // room to grow
			}
			m.maybeClose(now)
			return n.rank, nil
		}
	}
	m.addJoined(n)
	m.lastJoin = now
	m.maybeClose(now)
	return n.rank, nil
}

func (m *Machine) addJoined(n *nodeRec) {
	if !n.joined {
		was := m.awaited(n)
		n.joined = true
		m.joined[n.id] = n
		m.recount(n, was)
	}
}

func (m *Machine) dropJoined(n *nodeRec) {
	if n.joined {
		was := m.awaited(n)
		n.joined = false
		delete(m.joined, n.id)
		m.recount(n, was)
	}
}

func (m *Machine) setLost(n *nodeRec, lost bool) {
	was := m.awaited(n)
	n.lost = lost
	m.recount(n, was)
}

// awaited reports whether the open round waits for n: a member of the last
// world, neither lost nor joined.
func (m *Machine) awaited(n *nodeRec) bool {
	if !m.open || n.lost || n.joined {
		return false
	}
	_, member := m.index[n.id]
	return member
}

// recount updates awaiting after a change of n that awaited reported as
// was before.
func (m *Machine) recount(n *nodeRec, was bool) {
	switch now := m.awaited(n); {
	case was && !now:
		m.awaiting--
	case !was && now:
		m.awaiting++
	}
}

// countAwaiting recounts awaiting from scratch: O(world).
func (m *Machine) countAwaiting() {
	m.awaiting = 0
	for _, mb := range m.world {
		if m.awaited(m.nodes[mb.NodeID]) {
			m.awaiting++
		}
	}
}

// NodeLost records that a node's agent is gone (heartbeats stopped). Its rank
// becomes available to other nodes; it must Join again to take part. Losing a
// member of the current world opens the next round (a membership change, not
// a failure restart), unless that member had already succeeded. Unknown and
// already lost nodes are ignored.
//
// Losing a member of a world whose worker failure is still unsettled (within
// BlameWindow of its report) makes that failure the loss's consequence: a
// restart it spent is given back, and when it was waiting to fail the job
// for want of restarts, the next round opens as a membership change instead.
//
// blamed reports whether the loss stopped a world that was running or had
// just failed: the lost node, not the members whose workers failed with it,
// is the cause of that round's end.
func (m *Machine) NodeLost(nodeID string, now time.Time) (blamed bool) {
	return m.NodeLostSince(nodeID, time.Time{}, now)
}

// lossSlack is how much later than a failure's report a node may have been
// lost (by its own clock or a platform's) and still be taken as its cause.
const lossSlack = 2 * time.Second

// NodeLostSince is NodeLost for a loss known to have happened at since
// (the agent's exit as its platform saw it, or the end of its session):
// such a loss takes the blame for a worker failure only when it came before
// the failure's report (within lossSlack), as a cause does. A zero since
// is unknown, as for NodeLost.
func (m *Machine) NodeLostSince(nodeID string, since, now time.Time) (blamed bool) {
	m.maybeClose(now)
	n := m.nodes[nodeID]
	if m.finished() || n == nil || n.lost {
		return false
	}
	m.setLost(n, true)
	m.live--
	m.ranks.lost(n)
	m.dropJoined(n)
	m.changed()
	if s := m.suspect; s != nil && n.succeeded != s.round && (since.IsZero() || !since.After(s.at.Add(lossSlack))) {
		if _, member := s.members[n.id]; member {
			m.suspect = nil
			blamed = true
			if s.charged {
				m.restarts-- // the failure restart was this loss's membership change
			}
		}
	}
	if m.inWorld(n) && n.succeeded != m.worldRound {
		m.openNext(now, false)
		blamed = true
	}
	m.maybeClose(now)
	return blamed
}

// report resolves a WorkerFailed/NodeSucceeded report to a world member, or
// nil when the report is to be ignored.
func (m *Machine) report(nodeID string, round int) (*nodeRec, error) {
	if m.finished() {
		return nil, nil
	}
	n := m.nodes[nodeID]
	if n == nil {
		return nil, fmt.Errorf("%w: %q has never joined; it must Join before reporting", ErrUnknownNode, nodeID)
	}
	if round != m.round || m.open {
		return nil, nil // stale: a later round is already under way
	}
	if !m.inWorld(n) {
		return nil, fmt.Errorf("%w: %q is not a member of round %d; it should Join again", ErrNotInWorld, nodeID, round)
	}
	if n.succeeded == m.worldRound {
		return nil, nil
	}
	return n, nil
}

// WorkerFailed records that the workers of a world member failed in round.
// Reports for another round, or while the round is open, are stale and
// ignored. Otherwise the next round opens as a failure restart, or, with the
// restart budget used up, the job fails. With a BlameWindow, the failure is
// a suspect until the window passes: a member of the same world lost
// meanwhile takes the blame (see [Machine.NodeLost]), and a job out of
// restarts fails only when the window ends (at the first event or Tick at or
// after it; [Machine.NextDeadline] says when). A world of one node has no
// other member to blame: its failure is settled at once, and a job out of
// restarts fails now.
func (m *Machine) WorkerFailed(nodeID string, round int, now time.Time) error {
	m.maybeClose(now)
	n, err := m.report(nodeID, round)
	if n == nil {
		return err
	}
	if s := m.suspect; s != nil && !s.charged && s.round == round {
		return nil // the world already failed; the job fails unless a loss comes first
	}
	var sus *suspect
	// Only another member's loss can take the blame: a world of one node
	// (or a job of one) has nothing to wait for, and its failure is settled
	// at once.
	if m.cfg.BlameWindow > 0 && len(m.index) > 1 {
		sus = &suspect{node: n.id, round: round, at: now, members: m.index}
	}
	if m.restarts >= m.cfg.MaxRestarts {
		reason := fmt.Sprintf(
			"workers on node %s (node rank %d) failed in round %d and the restart budget (%d) is exhausted",
			n.id, n.rank, round, m.cfg.MaxRestarts)
		if sus == nil {
			m.failJob(ErrRestartsExhausted, reason)
			return nil
		}
		sus.reason = reason
		m.suspect = sus
		m.changed()
		return nil
	}
	if sus != nil {
		sus.charged = true
	}
	m.suspect = sus
	m.openNext(now, true)
	m.maybeClose(now)
	return nil
}

// Regroup records that a world member of round started no workers for a
// cause that is not the program's (its agent could not restore the round's
// agreed checkpoint from a peer). The next round opens as a membership
// change: it is not counted against MaxRestarts and needs no blame window.
// Reports for another round, or while the round is open, are stale and
// ignored.
func (m *Machine) Regroup(nodeID string, round int, now time.Time) error {
	m.maybeClose(now)
	n, err := m.report(nodeID, round)
	if n == nil {
		return err
	}
	if s := m.suspect; s != nil && s.round == round {
		return nil // the world already failed; that failure decides
	}
	m.openNext(now, false)
	m.maybeClose(now)
	return nil
}

// settle ends the blame window of a suspect failure once it has passed: a
// job that waited for a loss to excuse its failure fails now.
func (m *Machine) settle(now time.Time) {
	s := m.suspect
	if s == nil || m.finished() || now.Before(s.at.Add(m.cfg.BlameWindow)) {
		return
	}
	m.suspect = nil
	m.changed()
	if !s.charged {
		m.failJob(ErrRestartsExhausted, s.reason)
	}
}

// NodeSucceeded records that the workers of a world member finished
// successfully in round. When every member has, the job has succeeded.
// Stale reports are ignored.
func (m *Machine) NodeSucceeded(nodeID string, round int, now time.Time) error {
	m.maybeClose(now)
	n, err := m.report(nodeID, round)
	if n == nil {
		return err
	}
	n.succeeded = m.worldRound
	m.nSucceeded++
	if m.nSucceeded == len(m.world) {
		m.job = Succeeded
	}
	m.changed()
	return nil
}

// Expect tells the machine how many nodes the platform runs for the job
// (the node manager's live nodes, after a start, a relaunch or a scale), or
// 0 when it does not know: an open round with that many joined nodes (and
// at least MinNodes) closes at once instead of waiting out the last call.
// It only adds a reason to close; a round never waits for it. n is
// clamped to 0..MaxNodes.
func (m *Machine) Expect(n int, now time.Time) {
	n = min(max(n, 0), m.cfg.MaxNodes)
	if n != m.expected {
		m.expected = n
		m.changed()
	}
	m.maybeClose(now)
}

// Tick applies the timers: it closes an open round whose last call has
// passed, fails the job when a round stayed too small past JoinTimeout, and
// settles a suspect failure whose blame window has passed.
func (m *Machine) Tick(now time.Time) { m.maybeClose(now) }

// NextDeadline returns when [Machine.Tick] next matters: the end of the last
// call when the open round has enough nodes, else the join timeout, or the
// end of a suspect failure's blame window when that comes first. It returns
// false when no timer is pending.
func (m *Machine) NextDeadline() (time.Time, bool) {
	if m.finished() {
		return time.Time{}, false
	}
	if m.suspect != nil {
		d := m.suspect.at.Add(m.cfg.BlameWindow)
		if r, ok := m.roundDeadline(); ok && r.Before(d) {
			return r, true
		}
		return d, true
	}
	return m.roundDeadline()
}

// roundDeadline is NextDeadline's rule for the open round.
func (m *Machine) roundDeadline() (time.Time, bool) {
	if !m.open {
		return time.Time{}, false
	}
	if m.cfg.take(len(m.joined)) >= m.cfg.MinNodes {
		return m.lastJoin.Add(m.cfg.LastCall), true
	}
	if m.cfg.JoinTimeout > 0 {
		return m.openedAt.Add(m.cfg.JoinTimeout), true
	}
	return time.Time{}, false
}

// FailFast fails a running job whose workers failed deterministically
// (the master's diagnosis saw the same exception at the same place on
// consecutive attempts), with reason, instead of spending restarts that
// would fail alike. It does nothing to a finished job.
func (m *Machine) FailFast(reason string) {
	if m.job == Running {
		m.failJob(ErrDeterministicFailure, reason)
	}
}

// FailNodes fails a running job whose nodes the master's node manager could
// not keep (see [ErrNodesFailed]), with reason. It does nothing to a
// finished job.
func (m *Machine) FailNodes(reason string) {
	if m.job == Running {
		m.failJob(ErrNodesFailed, reason)
	}
}

// SucceedNodes ends a running job as succeeded because the nodes that
// decide its outcome did (a parameter-server job's chief, or all its
// workers, as the master's node manager sees them exit), whether or not
// they ever joined a round. It does nothing to a finished job.
func (m *Machine) SucceedNodes() {
	if m.job == Running {
		m.suspect = nil
		m.job, m.decided = Succeeded, true
		m.changed()
	}
}

// Cancel ends a running job because its user stopped it, with reason: it
// fails with [ErrCancelled], and every agent stops its workers and exits as
// for any failure. It does nothing to a finished job.
func (m *Machine) Cancel(reason string) {
	if m.job == Running {
		m.failJob(ErrCancelled, reason)
	}
}

func (m *Machine) failJob(kind error, reason string) {
	m.suspect = nil
	m.job = Failed
	m.fail = &failure{kind: kind, reason: reason}
	m.changed()
}

// openNext opens the next round. Only nodes waiting in the joined set carry
// over; members of the previous world must Join again.
func (m *Machine) openNext(now time.Time, failure bool) {
	if failure {
		m.restarts++
	}
	m.round++
	m.open = true
	m.openedAt, m.lastJoin = now, now
	m.countAwaiting()
	m.changed()
}

// maybeClose closes the open round when a closing rule holds, or fails the
// job on join timeout.
func (m *Machine) maybeClose(now time.Time) {
	m.settle(now)
	if m.finished() || !m.open {
		return
	}
	j := len(m.joined)
	k := m.cfg.take(j)
	if k < m.cfg.MinNodes {
		if m.cfg.JoinTimeout > 0 && !now.Before(m.openedAt.Add(m.cfg.JoinTimeout)) {
			m.failJob(ErrTooFewNodes, m.tooFewReason(j, k))
		}
		return
	}
	// Rule (d): every node the platform runs for the job has joined
	// (Expect); waiting out the last call would wait for nobody.
	full := j >= m.cfg.MaxNodes || m.expected > 0 && j >= m.expected
	quiet := !now.Before(m.lastJoin.Add(m.cfg.LastCall))
	// Rule (c): in a restart round, close as soon as every member of the
	// last world that is not lost has joined again (a restart without a
	// membership change waits for no last call), or every live node the
	// machine knows of has: nobody else is coming. Newcomers and nodes
	// left out of that world join the round if they are there in time;
	// otherwise they come later as a growth, with its last call.
	allBack := m.round > 1 && (m.worldRound > 0 && m.awaiting == 0 || j == m.live)
	if full || quiet || allBack {
		m.close(k)
	}
}

func (m *Machine) tooFewReason(j, k int) string {
	if j < m.cfg.MinNodes {
		return fmt.Sprintf("only %d of minimum %d nodes joined round %d within %v", j, m.cfg.MinNodes, m.round, m.cfg.JoinTimeout)
	}
	return fmt.Sprintf("%d nodes joined round %d within %v but NodeUnit %d leaves %d, below the minimum %d",
		j, m.round, m.cfg.JoinTimeout, m.cfg.NodeUnit, k, m.cfg.MinNodes)
}

// close fixes the world: the k joined nodes with the lowest node ranks, in
// rank order. The rest keep waiting. O(j log j) for j joined nodes.
func (m *Machine) close(k int) {
	cand := make([]*nodeRec, 0, len(m.joined))
	for _, n := range m.joined {
		cand = append(cand, n)
	}
	slices.SortFunc(cand, func(a, b *nodeRec) int { return a.rank - b.rank })
	world := make([]Member, k)
	index := make(map[string]int, k)
	off := 0
	for i, n := range cand[:k] {
		world[i] = Member{NodeID: n.id, NodeRank: n.rank, GroupRank: i, LocalWorldSize: n.lws, RankOffset: off, Addr: n.addr}
		index[n.id] = i
		off += n.lws
		m.dropJoined(n)
	}
	m.world, m.index, m.worldSize = world, index, off
	m.worldRound = m.round
	m.nSucceeded = 0
	m.open = false
	m.awaiting = 0
	m.changed()
}
