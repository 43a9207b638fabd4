package jobstate

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/roverml/rover/internal/jobconfig"
	"github.com/roverml/rover/internal/liveness"
	"github.com/roverml/rover/internal/rendezvous"
)

// ErrNotConfigured is returned before the first agent configured the job.
var ErrNotConfigured = errors.New("the job has no rendezvous configuration yet: join first")

// Membership is the job's membership and rounds: its configuration, the
// rendezvous machine, the liveness table (internal/liveness) and the address
// each node joined with. The configuration comes with the first configure
// event; until then the job has no rendezvous and refuses the other events
// (ErrNotConfigured). Liveness is not journaled: heartbeats and push
// streams change it between events, and a restored job gives every known
// node a fresh timeout (Refresh).
type Membership struct {
	same   SameLocation
	cfg    *jobconfig.Config // nil until configured
	rdzv   *rendezvous.Machine
	nodes  *liveness.Table
	addrs  map[string]string
	status rendezvous.Status // the rendezvous's, as of the last event
}

// WorldLoss is a member that left its world while the world ran, ending
// it: the failures in the world are taken as its consequence.
type WorldLoss struct {
	Member rendezvous.Member
	Round  int // the world's
}

// NewMembership returns the membership of a job not yet configured; same
// compares checkpoint storage locations for declarations.
func NewMembership(same SameLocation) *Membership {
	return &Membership{same: same, addrs: map[string]string{}}
}

// Restore replaces the membership with a snapshot's: cfg (nil before the
// job was configured), the rendezvous as its MarshalState wrote it, and
// the addresses, which it keeps.
func (m *Membership) Restore(cfg *jobconfig.Config, rdzv json.RawMessage, addrs map[string]string) error {
	if addrs == nil {
		addrs = map[string]string{}
	}
	if cfg != nil {
		if rdzv == nil {
			return fmt.Errorf("a configured job without rendezvous state")
		}
		r, err := rendezvous.Restore(rdzv)
		if err != nil {
			return fmt.Errorf("rendezvous: %w", err)
		}
		m.cfg, m.rdzv, m.nodes = cfg, r, liveness.NewTable(cfg.Nodes)
		m.status = r.Status()
	}
	m.addrs = addrs
	return nil
}

// MarshalRendezvous is the rendezvous's part of a snapshot; nil before the
// job is configured.
func (m *Membership) MarshalRendezvous() (json.RawMessage, error) {
	if m.rdzv == nil {
		return nil, nil
	}
	return m.rdzv.MarshalState()
}

// Configured reports whether the job has its configuration.
func (m *Membership) Configured() bool { return m.rdzv != nil }

// Config is the job's configuration, nil before it is configured; it is not
// to be changed.
func (m *Membership) Config() *jobconfig.Config { return m.cfg }

// Status is the rendezvous's status as of the last event.
func (m *Membership) Status() rendezvous.Status { return m.status }

// Rendezvous is the rendezvous machine, for its views (Assignment, Joined,
// WorldMember, Snapshot, NextDeadline); nil before the job is configured.
// Its events go through the Membership.
func (m *Membership) Rendezvous() *rendezvous.Machine { return m.rdzv }

// Addrs is each joined node's address; it is not to be changed.
func (m *Membership) Addrs() map[string]string { return m.addrs }

// Addr is the address node joined with.
func (m *Membership) Addr(id string) (string, bool) {
	a, ok := m.addrs[id]
	return a, ok
}

// Liveness is node id's entry in the liveness table.
func (m *Membership) Liveness(id string) (liveness.Info, bool) {
	if m.nodes == nil {
		return liveness.Info{}, false
	}
	return m.nodes.Get(id)
}

// CheckNode refuses an event from a node that has not joined the job.
func (m *Membership) CheckNode(id string) error {
	if m.rdzv == nil {
		return ErrNotConfigured
	}
	if _, ok := m.addrs[id]; !ok {
		return fmt.Errorf("node %q: %w", id, rendezvous.ErrUnknownNode)
	}
	return nil
}

// blameMargin is how long, beyond the disconnect grace, a worker failure
// waits for a node loss to take the blame: the survivors of a killed node
// report their broken collectives within seconds, and their agents first
// persist what their workers held in memory.
const blameMargin = 10 * time.Second

// BlameWindow is the rendezvous BlameWindow of a job with liveness cfg: a
// node whose agent died is lost within DisconnectGrace of its session's
// end, so a failure reported up to that long (plus a margin) before it is
// taken as its consequence. A frozen node's peers do not fail at once (they
// block in their collectives), so the heartbeat timeout does not count.
// The price: a job out of restarts fails this much later after a genuine
// failure; with restarts left, the restart starts at once and is given back
// if a loss follows.
func BlameWindow(cfg liveness.Config) time.Duration {
	return cfg.DisconnectGrace + blameMargin
}

// Configure applies a configure event: the first sets the job's
// configuration and rendezvous (first is true), later ones keep them. Either
// way the rendezvous expects expect nodes when a node manager said how many
// it runs (0: none said).
func (m *Membership) Configure(cfg *jobconfig.Config, expect int, now time.Time) (first bool, err error) {
	if m.rdzv == nil {
		rc := cfg.Rendezvous
		rc.BlameWindow = BlameWindow(cfg.Nodes)
		r, err := rendezvous.New(rc, now)
		if err != nil {
			return false, err
		}
		m.cfg, m.rdzv, m.nodes, first = cfg, r, liveness.NewTable(cfg.Nodes), true
	}
	if expect > 0 {
		m.rdzv.Expect(expect, now)
	}
	m.settle()
	return first, nil
}

// Join applies a join event. When the node was a member of the running
// world and its joining ends that world (its agent restarted), it returns
// the loss.
func (m *Membership) Join(req rendezvous.JoinRequest, now time.Time) (*WorldLoss, error) {
	before := m.status
	mb, worldRound, _, member := m.rdzv.WorldMember(req.NodeID)
	_, err := m.rdzv.Join(req, now)
	defer m.settle()
	if err != nil {
		return nil, err
	}
	m.addrs[req.NodeID] = req.Addr
	m.nodes.Seen(req.NodeID, now)
	if member && !before.Open && before.Job == rendezvous.Running && before.Round == worldRound && m.rdzv.Status().Round > worldRound {
		return &WorldLoss{Member: mb, Round: worldRound}, nil
	}
	return nil, nil
}

// Lose applies a node-lost event: the liveness table found node silent
// since since (zero: a loss that does not wait). A loss that ends its
// world's round returns the loss, unless planned (the node manager removed
// the node itself).
func (m *Membership) Lose(id, reason string, since time.Time, planned bool, now time.Time) *WorldLoss {
	defer m.settle()
	mb, worldRound, _, member := m.rdzv.WorldMember(id)
	blamed := m.rdzv.NodeLostSince(id, since, now)
	m.nodes.Lose(id, reason)
	if blamed && member && !planned {
		return &WorldLoss{Member: mb, Round: worldRound}
	}
	return nil
}

// WorkerFailed applies a worker-failed event (without its failures, which
// Failures keeps).
func (m *Membership) WorkerFailed(id string, round int, now time.Time) error {
	defer m.settle()
	return m.rdzv.WorkerFailed(id, round, now)
}

// Regroup applies a worker-failed event whose diagnosis is regroup: the
// node started no workers for a cause not the program's, and the world
// forms again without spending a restart.
func (m *Membership) Regroup(id string, round int, now time.Time) error {
	defer m.settle()
	return m.rdzv.Regroup(id, round, now)
}

// NodeSucceeded applies a node-succeeded event.
func (m *Membership) NodeSucceeded(id string, round int, now time.Time) error {
	defer m.settle()
	return m.rdzv.NodeSucceeded(id, round, now)
}

// Tick applies a tick event: the rendezvous's deadlines.
func (m *Membership) Tick(now time.Time) {
	defer m.settle()
	m.rdzv.Tick(now)
}

// Expect tells the rendezvous how many nodes the node manager runs; before
// the job is configured it does nothing (Configure takes the number).
func (m *Membership) Expect(n int, now time.Time) {
	if m.rdzv == nil {
		return
	}
	defer m.settle()
	m.rdzv.Expect(n, now)
}

// FailFast fails the job at once: a diagnosis found its failure fatal.
func (m *Membership) FailFast(reason string) {
	defer m.settle()
	m.rdzv.FailFast(reason)
}

// FailNodes applies a fail-nodes event: the node manager cannot run them.
func (m *Membership) FailNodes(reason string) {
	defer m.settle()
	m.rdzv.FailNodes(reason)
}

// SucceedNodes applies a succeed-nodes event: the nodes that decide the
// job's outcome succeeded.
func (m *Membership) SucceedNodes() {
	defer m.settle()
	m.rdzv.SucceedNodes()
}

// Cancel applies a cancel event.
func (m *Membership) Cancel(reason string) {
	defer m.settle()
	m.rdzv.Cancel(reason)
}

// Exclude takes a node that the node check excluded out of the job.
func (m *Membership) Exclude(id, reason string, now time.Time) {
	defer m.settle()
	m.rdzv.NodeLostSince(id, time.Time{}, now)
	m.nodes.Lose(id, reason)
}

// CheckDeclare refuses a storage declaration that Declare would refuse.
func (m *Membership) CheckDeclare(d StorageDeclaration) (jobconfig.CheckpointStorage, bool, error) {
	if m.cfg == nil {
		return jobconfig.CheckpointStorage{}, false, ErrNotConfigured
	}
	if _, ok := m.addrs[d.Node]; !ok {
		return jobconfig.CheckpointStorage{}, false, fmt.Errorf("declare checkpoint storage from node %q, which has not joined the job: %w", d.Node, rendezvous.ErrUnknownNode)
	}
	return DeclareStorage(m.cfg.Checkpoint, d, m.same)
}

// Declare applies a declare-storage event (see DeclareStorage).
func (m *Membership) Declare(d StorageDeclaration) error {
	out, changed, err := m.CheckDeclare(d)
	if err != nil || !changed {
		return err
	}
	cfg := *m.cfg
	cfg.Checkpoint = out
	m.cfg = &cfg
	return nil
}

// CheckpointWorld checks a checkpoint report's claim that rank is one of
// id's ranks in the world of round, and returns the job's checkpoint
// storage and that world's size. The round must be the last closed one
// (reports of a world that a failure stopped still count while the next
// round gathers: the agents drain them before they join it).
func (m *Membership) CheckpointWorld(id string, round, rank int) (jobconfig.CheckpointStorage, int, error) {
	if m.rdzv == nil {
		return jobconfig.CheckpointStorage{}, 0, ErrNotConfigured
	}
	mb, worldRound, worldSize, ok := m.rdzv.WorldMember(id)
	switch {
	case !ok:
		return jobconfig.CheckpointStorage{}, 0, fmt.Errorf("%w: node %q is not in the world of round %d", ErrStaleRound, id, worldRound)
	case round != worldRound:
		return jobconfig.CheckpointStorage{}, 0, fmt.Errorf("%w: the report is for round %d, but the last world is round %d's", ErrStaleRound, round, worldRound)
	case rank < mb.RankOffset || rank >= mb.RankOffset+mb.LocalWorldSize:
		return jobconfig.CheckpointStorage{}, 0, fmt.Errorf("%w: rank %d is not one of node %q's ranks in round %d (%d to %d)",
			ErrInvalid, rank, id, round, mb.RankOffset, mb.RankOffset+mb.LocalWorldSize-1)
	}
	return m.cfg.Checkpoint, worldSize, nil
}

// The liveness table's inputs and outputs, between events.

// Seen records a heartbeat from id.
func (m *Membership) Seen(id string, now time.Time) error {
	if err := m.known(id); err != nil {
		return err
	}
	m.nodes.Seen(id, now)
	return nil
}

// Connected records id's push stream opening or closing.
func (m *Membership) Connected(id string, open bool, now time.Time) error {
	if err := m.known(id); err != nil {
		return err
	}
	if open {
		m.nodes.Connected(id, now)
	} else {
		m.nodes.Disconnected(id, now)
	}
	return nil
}

// Expired returns the nodes the liveness table finds lost at now, each to
// be proposed as a node-lost event.
func (m *Membership) Expired(now time.Time) []liveness.Lost {
	if m.nodes == nil {
		return nil
	}
	return m.nodes.Tick(now)
}

// Refresh gives every known node a fresh timeout, as a restored job does.
func (m *Membership) Refresh(now time.Time) {
	if m.nodes == nil {
		return
	}
	for id := range m.addrs {
		m.nodes.Seen(id, now)
	}
}

func (m *Membership) known(id string) error {
	if _, ok := m.addrs[id]; !ok || m.nodes == nil {
		return fmt.Errorf("node %q: %w", id, rendezvous.ErrUnknownNode)
	}
	return nil
}

// settle takes the rendezvous's status after an event.
func (m *Membership) settle() {
	if m.rdzv != nil {
		m.status = m.rdzv.Status()
	}
}
