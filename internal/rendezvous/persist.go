package rendezvous

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// SchemaVersion is the "schema" of the JSON written by [Machine.MarshalState].
const SchemaVersion = 1

type stateJSON struct {
	Schema      int        `json:"schema"`
	Config      configJSON `json:"config"`
	Job         string     `json:"job"`
	FailureKind string     `json:"failure_kind,omitempty"`
	Reason      string     `json:"reason,omitempty"`
	Round       int        `json:"round"`
	Open        bool       `json:"open"`
	OpenedAt    time.Time  `json:"opened_at"`
	LastJoin    time.Time  `json:"last_join"`
	Restarts    int        `json:"restarts"`
	Expected    int        `json:"expected,omitempty"`
	// Decided: the job succeeded by the node manager's verdict
	// (SucceedNodes), whatever its members did.
	Decided    bool         `json:"decided,omitempty"`
	Version    uint64       `json:"version"`
	Nodes      []nodeJSON   `json:"nodes"`
	World      []Member     `json:"world"`
	WorldRound int          `json:"world_round"`
	Suspect    *suspectJSON `json:"suspect,omitempty"`
}

// suspectJSON is an unsettled worker failure (see Config.BlameWindow).
type suspectJSON struct {
	Node    string    `json:"node"`
	Round   int       `json:"round"`
	At      time.Time `json:"at"`
	Charged bool      `json:"charged,omitempty"`
	Reason  string    `json:"reason,omitempty"`
	Members []string  `json:"members"` // the failed world's NodeIDs
}

type configJSON struct {
	MinNodes    int    `json:"min_nodes"`
	MaxNodes    int    `json:"max_nodes"`
	NodeUnit    int    `json:"node_unit"`
	MaxRestarts int    `json:"max_restarts"`
	LastCall    string `json:"last_call"`
	JoinTimeout string `json:"join_timeout"`
	BlameWindow string `json:"blame_window,omitempty"`
}

type nodeJSON struct {
	ID             string `json:"id"`
	Rank           int    `json:"rank"`
	HoldsRank      bool   `json:"holds_rank,omitempty"` // the rank's owner (else only a preference)
	LocalWorldSize int    `json:"local_world_size"`
	Addr           string `json:"addr"`
	Lost           bool   `json:"lost,omitempty"`
	Joined         bool   `json:"joined,omitempty"`
	Succeeded      int    `json:"succeeded,omitempty"`
}

var failureKinds = map[string]error{
	"too_few_nodes":      ErrTooFewNodes,
	"restarts_exhausted": ErrRestartsExhausted,
	"deterministic":      ErrDeterministicFailure,
	"nodes":              ErrNodesFailed,
	"cancelled":          ErrCancelled,
}

// MarshalState encodes the machine's whole state as JSON for persistence.
// The encoding is deterministic; [Restore] reads it back.
func (m *Machine) MarshalState() ([]byte, error) {
	s := stateJSON{
		Schema: SchemaVersion,
		Config: configJSON{
			MinNodes: m.cfg.MinNodes, MaxNodes: m.cfg.MaxNodes, NodeUnit: m.cfg.NodeUnit,
			MaxRestarts: m.cfg.MaxRestarts,
			LastCall:    m.cfg.LastCall.String(), JoinTimeout: m.cfg.JoinTimeout.String(),
		},
		Job: m.job.String(), Round: m.round, Open: m.open,
		OpenedAt: m.openedAt, LastJoin: m.lastJoin, Restarts: m.restarts, Expected: m.expected, Decided: m.decided, Version: m.version,
		World: m.world, WorldRound: m.worldRound,
	}
	if m.cfg.BlameWindow != 0 {
		s.Config.BlameWindow = m.cfg.BlameWindow.String()
	}
	if x := m.suspect; x != nil {
		s.Suspect = &suspectJSON{Node: x.node, Round: x.round, At: x.at, Charged: x.charged, Reason: x.reason}
		for id := range x.members {
			s.Suspect.Members = append(s.Suspect.Members, id)
		}
		slices.Sort(s.Suspect.Members)
	}
	if m.fail != nil {
		for k, v := range failureKinds {
			if v == m.fail.kind {
				s.FailureKind = k
			}
		}
		s.Reason = m.fail.reason
	}
	s.Nodes = make([]nodeJSON, 0, len(m.nodes))
	for _, n := range m.nodes {
		s.Nodes = append(s.Nodes, nodeJSON{
			ID: n.id, Rank: n.rank, HoldsRank: m.ranks.owner(n.rank) == n,
			LocalWorldSize: n.lws, Addr: n.addr, Lost: n.lost, Joined: n.joined, Succeeded: n.succeeded,
		})
	}
	slices.SortFunc(s.Nodes, func(a, b nodeJSON) int { return strings.Compare(a.ID, b.ID) })
	return json.Marshal(s)
}

// Restore rebuilds a machine from [Machine.MarshalState]'s output. It rejects
// an unknown schema and any state the machine could not have reached, with
// an error wrapping [ErrBadState] (or [ErrInvalidConfig]).
func Restore(data []byte) (*Machine, error) {
	var s stateJSON
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadState, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, bad("data after the state object")
	}
	if s.Schema != SchemaVersion {
		return nil, fmt.Errorf("%w: schema %d, this build reads only schema %d; restore with the matching Rover version", ErrBadState, s.Schema, SchemaVersion)
	}
	cfg, err := s.Config.config()
	if err != nil {
		return nil, err
	}
	m := &Machine{
		cfg: cfg.withDefaults(), round: s.Round, open: s.Open,
		openedAt: s.OpenedAt, lastJoin: s.LastJoin, restarts: s.Restarts, expected: s.Expected, decided: s.Decided, version: s.Version,
		nodes: make(map[string]*nodeRec, len(s.Nodes)), joined: make(map[string]*nodeRec),
		index: make(map[string]int, len(s.World)),
	}
	if err := m.restoreOutcome(s); err != nil {
		return nil, err
	}
	if err := m.restoreNodes(s.Nodes); err != nil {
		return nil, err
	}
	if err := m.restoreWorld(s.World, s.WorldRound); err != nil {
		return nil, err
	}
	m.countAwaiting()
	if x := s.Suspect; x != nil {
		switch {
		case m.cfg.BlameWindow <= 0 || m.job != Running:
			return nil, bad("a suspect failure in a job %s with blame window %v", m.job, m.cfg.BlameWindow)
		case x.Round > m.worldRound || x.Round < 1 || m.nodes[x.Node] == nil || !slices.Contains(x.Members, x.Node):
			return nil, bad("suspect failure of node %q in round %d, but the last world is round %d's", x.Node, x.Round, m.worldRound)
		case x.Charged == (x.Reason != "") || (!x.Charged && (m.open || x.Round != m.worldRound)):
			return nil, bad("suspect failure charged %v with reason %q in round %d (open %v)", x.Charged, x.Reason, m.round, m.open)
		}
		members := make(map[string]int, len(x.Members))
		for i, id := range x.Members {
			if m.nodes[id] == nil {
				return nil, bad("suspect failure's world member %q is not a known node", id)
			}
			members[id] = i
		}
		m.suspect = &suspect{node: x.Node, round: x.Round, at: x.At, charged: x.Charged, reason: x.Reason, members: members}
	}
	return m, nil
}

func bad(format string, a ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrBadState}, a...)...)
}

func (c configJSON) config() (Config, error) {
	lc, err1 := time.ParseDuration(c.LastCall)
	jt, err2 := time.ParseDuration(c.JoinTimeout)
	var bw time.Duration
	var err3 error
	if c.BlameWindow != "" {
		bw, err3 = time.ParseDuration(c.BlameWindow)
	}
	if err := errors.Join(err1, err2, err3); err != nil {
		return Config{}, bad("config durations: %v", err)
	}
	cfg := Config{MinNodes: c.MinNodes, MaxNodes: c.MaxNodes, NodeUnit: c.NodeUnit, MaxRestarts: c.MaxRestarts, LastCall: lc, JoinTimeout: jt, BlameWindow: bw}
	return cfg, cfg.Validate()
}

func (m *Machine) restoreOutcome(s stateJSON) error {
	switch s.Job {
	case "Running":
		m.job = Running
	case "Succeeded":
		m.job = Succeeded
	case "Failed":
		m.job = Failed
	default:
		return bad("job state %q; want Running, Succeeded or Failed", s.Job)
	}
	kind, known := failureKinds[s.FailureKind]
	switch {
	case m.job == Failed && (!known || s.Reason == ""):
		return bad("failed job needs a known failure_kind and a reason, got %q, %q", s.FailureKind, s.Reason)
	case m.job != Failed && (s.FailureKind != "" || s.Reason != ""):
		return bad("job %s has a failure reason", s.Job)
	case m.job == Failed:
		m.fail = &failure{kind: kind, reason: s.Reason}
	}
	if m.expected < 0 || m.expected > m.cfg.MaxNodes {
		return bad("expected %d nodes, outside 0..%d", m.expected, m.cfg.MaxNodes)
	}
	if m.round < 1 || m.restarts < 0 || m.restarts > m.cfg.MaxRestarts || m.version == 0 {
		return bad("round %d, restarts %d (max %d), version %d out of range", m.round, m.restarts, m.cfg.MaxRestarts, m.version)
	}
	return nil
}

func (m *Machine) restoreNodes(nodes []nodeJSON) error {
	for _, nj := range nodes {
		req := JoinRequest{NodeID: nj.ID, RequestedRank: -1, LocalWorldSize: nj.LocalWorldSize, Addr: nj.Addr}
		if err := req.validate(m.cfg); err != nil {
			return bad("node %q: %v", nj.ID, err)
		}
		if m.nodes[nj.ID] != nil {
			return bad("node %q listed twice", nj.ID)
		}
		// Requested ranks are below MaxNodes; an automatic rank is only
		// beyond every held rank when all below are held by live nodes.
		if nj.Rank < 0 || nj.Rank >= max(len(nodes), m.cfg.MaxNodes) {
			return bad("node %q has rank %d", nj.ID, nj.Rank)
		}
		if nj.Joined && nj.Lost {
			return bad("node %q is both lost and joined", nj.ID)
		}
		if nj.Succeeded < 0 || nj.Succeeded > m.round {
			return bad("node %q succeeded in round %d", nj.ID, nj.Succeeded)
		}
		n := &nodeRec{id: nj.ID, rank: nj.Rank, lws: nj.LocalWorldSize, addr: nj.Addr, lost: nj.Lost, joined: nj.Joined, succeeded: nj.Succeeded}
		m.nodes[n.id] = n
		if !n.lost {
			m.live++
		}
		if n.joined {
			m.joined[n.id] = n
		}
		if nj.HoldsRank {
			for len(m.ranks.owners) <= n.rank {
				m.ranks.owners = append(m.ranks.owners, nil)
			}
			if m.ranks.owners[n.rank] != nil {
				return bad("rank %d held by both %q and %q", n.rank, m.ranks.owners[n.rank].id, n.id)
			}
			m.ranks.owners[n.rank] = n
		}
	}
	for _, n := range m.nodes {
		if o, taken := m.ranks.heldByOther(n.rank, n); !n.lost && taken {
			return bad("live nodes %q and %q share rank %d", n.id, o.id, n.rank)
		}
		if !n.lost && m.ranks.owner(n.rank) != n {
			return bad("live node %q does not hold its rank %d", n.id, n.rank)
		}
	}
	m.ranks.rebuildFree()
	return nil
}

func (m *Machine) restoreWorld(world []Member, worldRound int) error {
	if worldRound < 0 || worldRound > m.round || (m.open && worldRound == m.round) || (!m.open && worldRound != m.round) || (worldRound == 0) != (len(world) == 0) {
		return bad("world of round %d with %d members in round %d (open %v)", worldRound, len(world), m.round, m.open)
	}
	if len(world) > 0 && (len(world) < m.cfg.MinNodes || len(world) > m.cfg.MaxNodes || len(world)%m.cfg.NodeUnit != 0) {
		return bad("world of %d nodes does not fit MinNodes %d, MaxNodes %d, NodeUnit %d", len(world), m.cfg.MinNodes, m.cfg.MaxNodes, m.cfg.NodeUnit)
	}
	off := 0
	for i, mb := range world {
		n := m.nodes[mb.NodeID]
		switch {
		case n == nil:
			return bad("world member %q is not a known node", mb.NodeID)
		case mb.GroupRank != i || mb.RankOffset != off || (i > 0 && mb.NodeRank <= world[i-1].NodeRank):
			return bad("world member %q has group rank %d, offset %d, node rank %d at position %d", mb.NodeID, mb.GroupRank, mb.RankOffset, mb.NodeRank, i)
		case mb.LocalWorldSize < 1 || mb.LocalWorldSize > MaxLocalWorldSize || mb.Addr == "":
			return bad("world member %q has local world size %d, addr %q", mb.NodeID, mb.LocalWorldSize, mb.Addr)
		}
		if _, dup := m.index[mb.NodeID]; dup {
			return bad("node %q is in the world twice", mb.NodeID)
		}
		if !m.open && (n.joined || (n.lost && n.succeeded != worldRound) || n.rank != mb.NodeRank) {
			return bad("member %q of the current world is joined, lost or has changed rank", mb.NodeID)
		}
		if !m.open && n.succeeded == worldRound {
			m.nSucceeded++
		}
		m.index[mb.NodeID] = i
		off += mb.LocalWorldSize
	}
	m.world, m.worldRound, m.worldSize = world, worldRound, off
	if m.decided && m.job != Succeeded {
		return bad("decided by the node manager but the job is %s", m.job)
	}
	if m.job == Succeeded && !m.decided && (m.open || m.nSucceeded != len(world)) {
		return bad("job succeeded but only %d of %d members did", m.nSucceeded, len(world))
	}
	if m.job == Running && !m.open && len(world) > 0 && m.nSucceeded == len(world) {
		return bad("every member succeeded but the job is still running")
	}
	return nil
}
