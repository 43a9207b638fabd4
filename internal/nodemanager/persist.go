package nodemanager

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"time"
)

// SchemaVersion is the "schema" of the JSON written by [Manager.MarshalState].
// Schema 2 adds scaling (desired counts, Removed ranks, rescaled nodes);
// [Restore] reads schema 1 as well, whose groups have all MaxNodes ranks.
// Relaunch causes were added to schema 2 later: a state without them
// counts its relaunches as [CauseOther].
const SchemaVersion = 2

type stateJSON struct {
	Schema      int        `json:"schema"`
	Spec        Spec       `json:"spec"`
	Started     bool       `json:"started"`
	Desired     []int      `json:"desired,omitempty"` // by group; schema 2
	Ended       bool       `json:"ended,omitempty"`
	Relaunches  int        `json:"relaunches"`
	BadHosts    []string   `json:"bad_hosts,omitempty"`
	Retired     []string   `json:"retired,omitempty"`
	FailureKind string     `json:"failure_kind,omitempty"`
	Reason      string     `json:"reason,omitempty"`
	Nodes       []slotJSON `json:"nodes,omitempty"`

	// RelaunchCauses counts Relaunches by cause (causes seen only).
	RelaunchCauses map[RelaunchCause]int `json:"relaunch_causes,omitempty"`
	// Capacity is, by group, what nodes timing out pending showed
	// (Manager.Capacity); absent while every group's is unknown. Added
	// to schema 2 with the pending give-up: a state without it knows no
	// capacity.
	Capacity []capacityJSON `json:"capacity,omitempty"`
}

type capacityJSON struct {
	Nodes int       `json:"nodes"` // -1: unknown
	At    time.Time `json:"at,omitzero"`
}

type slotJSON struct {
	Group     int       `json:"group"`
	Rank      int       `json:"rank"`
	Relaunch  int       `json:"relaunch"`
	Rescaled  int       `json:"rescaled,omitempty"`
	State     NodeState `json:"state"`
	Host      string    `json:"host,omitempty"`
	Since     time.Time `json:"since"`
	TimedOut  bool      `json:"timed_out,omitempty"`
	Held      bool      `json:"held,omitempty"`
	Memory    int64     `json:"memory,omitempty"`
	MilliCPU  int64     `json:"milli_cpu,omitempty"`
	Migrating bool      `json:"migrating,omitempty"`
	LastExit  string    `json:"last_exit,omitempty"`
	Reason    string    `json:"reason,omitempty"`
	// Usage is the rank's right-sizing record (rightsize.go).
	Usage *usageJSON `json:"usage,omitempty"`
}

// MarshalState encodes the manager's whole state as JSON for the master's
// journal. The encoding is deterministic; [Restore] reads it back.
func (m *Manager) MarshalState() ([]byte, error) {
	s := stateJSON{Schema: SchemaVersion, Spec: m.spec, Started: m.started, Desired: m.desired, Ended: m.ended, Relaunches: m.relaunches, BadHosts: m.badHosts, RelaunchCauses: m.causeCounts()}
	for id := range m.retired {
		s.Retired = append(s.Retired, id)
	}
	slices.Sort(s.Retired)
	if slices.ContainsFunc(m.capacity, func(c capacity) bool { return c.nodes >= 0 }) {
		for _, c := range m.capacity {
			s.Capacity = append(s.Capacity, capacityJSON{Nodes: c.nodes, At: c.at})
		}
	}
	if m.fail != nil {
		for k, v := range failureKinds {
			if v == m.fail.kind {
				s.FailureKind = k
			}
		}
		s.Reason = m.fail.reason
	}
	for _, g := range m.slots {
		for _, sl := range g {
			s.Nodes = append(s.Nodes, slotJSON{
				Group: sl.group, Rank: sl.rank, Relaunch: sl.relaunch, Rescaled: sl.rescaled, State: sl.state, Host: sl.host,
				Since: sl.since, TimedOut: sl.timedOut, Held: sl.held, Memory: sl.memory, MilliCPU: sl.milliCPU, Migrating: sl.migrating,
				LastExit: sl.lastExit, Reason: sl.reason, Usage: sl.usage.json(),
			})
		}
	}
	return json.Marshal(s)
}

func bad(format string, a ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrBadState}, a...)...)
}

// Restore rebuilds a manager from [Manager.MarshalState]'s output. It rejects
// an unknown schema and states the manager could not have reached, with an
// error wrapping [ErrBadState] (or [ErrInvalidSpec]).
func Restore(data []byte) (*Manager, error) {
	var s stateJSON
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadState, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, bad("data after the state object")
	}
	if s.Schema < 1 || s.Schema > SchemaVersion {
		return nil, bad("schema %d, this build reads schemas 1 to %d; restore with the matching Rover version", s.Schema, SchemaVersion)
	}
	m, err := New(s.Spec)
	if err != nil {
		return nil, err
	}
	if s.Desired != nil {
		if len(s.Desired) != len(m.spec.Groups) {
			return nil, bad("%d desired counts for %d groups", len(s.Desired), len(m.spec.Groups))
		}
		for i, n := range s.Desired {
			if g := m.spec.Groups[i]; n < max(g.MinNodes, 1) || n > g.MaxNodes {
				return nil, bad("%s: desired %d nodes, outside %d..%d", g.name(), n, max(g.MinNodes, 1), g.MaxNodes)
			}
		}
		m.desired = s.Desired
	}
	m.started, m.ended, m.relaunches, m.badHosts = s.Started, s.Ended, s.Relaunches, s.BadHosts
	if err := m.restoreCauses(s); err != nil {
		return nil, err
	}
	if err := m.restoreCapacity(s); err != nil {
		return nil, err
	}
	if !slices.IsSorted(m.badHosts) || len(slices.Compact(slices.Clone(m.badHosts))) != len(m.badHosts) {
		return nil, bad("bad hosts %q are not sorted and distinct", m.badHosts)
	}
	if s.FailureKind != "" || s.Reason != "" {
		kind, ok := failureKinds[s.FailureKind]
		if !ok || s.Reason == "" {
			return nil, bad("failure kind %q with reason %q", s.FailureKind, s.Reason)
		}
		m.fail = &failure{kind: kind, reason: s.Reason}
	}
	for _, id := range s.Retired {
		m.retired[id] = true
	}
	if err := m.restoreSlots(s); err != nil {
		return nil, err
	}
	return m, nil
}

func (m *Manager) restoreSlots(s stateJSON) error {
	if s.Started {
		m.slots = make([][]*slot, len(m.spec.Groups))
	} else if len(s.Nodes) > 0 {
		return bad("%d nodes saved before the start", len(s.Nodes))
	}
	sum := 0
	for _, sj := range s.Nodes {
		if sj.Group < 0 || sj.Group >= len(m.spec.Groups) || sj.Rank != len(m.slots[sj.Group]) {
			return bad("node of group %d rank %d is out of order", sj.Group, sj.Rank)
		}
		g := m.spec.Groups[sj.Group]
		if sj.Rank >= g.MaxNodes || sj.Rescaled < 0 || sj.Relaunch < sj.Rescaled || sj.Relaunch-sj.Rescaled > g.budget(sj.Rank) || sj.State < Pending || sj.State > Removed {
			return bad("%s rank %d: relaunch %d, rescaled %d (budget %d), state %d", g.name(), sj.Rank, sj.Relaunch, sj.Rescaled, g.budget(sj.Rank), sj.State)
		}
		sl := &slot{
			group: sj.Group, rank: sj.Rank, relaunch: sj.Relaunch, rescaled: sj.Rescaled, state: sj.State, host: sj.Host,
			since: sj.Since, timedOut: sj.TimedOut, held: sj.Held, memory: sj.Memory, milliCPU: sj.MilliCPU, migrating: sj.Migrating,
			lastExit: sj.LastExit, reason: sj.Reason,
		}
		u, err := sj.Usage.restore()
		if err != nil {
			return bad("%s rank %d: %v", g.name(), sj.Rank, err)
		}
		sl.usage = u
		sl.id = nodeID(m.spec.Job, g.name(), sl.rank, sl.relaunch)
		for r := range sl.relaunch {
			if id := nodeID(m.spec.Job, g.name(), sl.rank, r); !m.retired[id] {
				return bad("node %s was replaced but is not retired", id)
			}
		}
		if final := sl.state == Failed || sl.state == Removed; m.retired[sl.id] != final {
			return bad("node %s is %s but retired is %v", sl.id, sl.state, m.retired[sl.id])
		}
		if sl.state.live() || sl.state == Succeeded {
			m.byID[sl.id] = sl
		}
		m.slots[sj.Group] = append(m.slots[sj.Group], sl)
		sum += sl.relaunches()
	}
	for gi, slots := range m.slots {
		if s.Schema == 1 && len(slots) != m.spec.Groups[gi].MaxNodes {
			return bad("%s: %d nodes saved, want %d", m.spec.Groups[gi].name(), len(slots), m.spec.Groups[gi].MaxNodes)
		}
		for _, sl := range slots {
			if sl.state.live() && sl.rank >= m.desired[gi] {
				return bad("%s rank %d is live but only %d nodes are wanted", m.spec.Groups[gi].name(), sl.rank, m.desired[gi])
			}
		}
	}
	if sum != m.relaunches || (m.spec.MaxRelaunches > 0 && sum > m.spec.MaxRelaunches) {
		return bad("relaunches %d, but nodes sum to %d (job budget %d)", m.relaunches, sum, m.spec.MaxRelaunches)
	}
	return nil
}

// restoreCauses reads the relaunches by cause: known causes, each seen at
// least once, that sum to the relaunches. A state saved before causes
// were kept has none: its relaunches count as CauseOther.
func (m *Manager) restoreCauses(s stateJSON) error {
	if s.RelaunchCauses == nil {
		if s.Relaunches > 0 {
			m.causes[CauseOther] = s.Relaunches
		}
		return nil
	}
	sum := 0
	for c, n := range s.RelaunchCauses {
		if !c.Known() || n < 1 {
			return bad("relaunch cause %q counted %d times; causes are %v, each counted once or more", c, n, RelaunchCauses())
		}
		m.causes[c] = n
		sum += n
	}
	if sum != s.Relaunches {
		return bad("relaunches %d, but their causes sum to %d", s.Relaunches, sum)
	}
	return nil
}

// restoreCapacity reads the capacities by group: none, or one per group,
// each unknown (-1) or 0..MaxNodes nodes found at a time.
func (m *Manager) restoreCapacity(s stateJSON) error {
	if s.Capacity == nil {
		return nil
	}
	if len(s.Capacity) != len(m.spec.Groups) {
		return bad("%d capacities for %d groups", len(s.Capacity), len(m.spec.Groups))
	}
	for i, c := range s.Capacity {
		g := m.spec.Groups[i]
		switch {
		case c.Nodes == -1 && c.At.IsZero():
		case c.Nodes >= 0 && c.Nodes <= g.MaxNodes && !c.At.IsZero():
		default:
			return bad("%s: capacity %d nodes at %v; want -1 (unknown, no time) or 0..%d nodes with the time found", g.name(), c.Nodes, c.At, g.MaxNodes)
		}
		m.capacity[i] = capacity{nodes: c.Nodes, at: c.At}
	}
	return nil
}
