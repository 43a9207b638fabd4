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
const SchemaVersion = 1

type stateJSON struct {
	Schema      int        `json:"schema"`
	Spec        Spec       `json:"spec"`
	Started     bool       `json:"started"`
	Ended       bool       `json:"ended,omitempty"`
	Relaunches  int        `json:"relaunches"`
	BadHosts    []string   `json:"bad_hosts,omitempty"`
	Retired     []string   `json:"retired,omitempty"`
	FailureKind string     `json:"failure_kind,omitempty"`
	Reason      string     `json:"reason,omitempty"`
	Nodes       []slotJSON `json:"nodes,omitempty"`
}

type slotJSON struct {
	Group    int       `json:"group"`
	Rank     int       `json:"rank"`
	Relaunch int       `json:"relaunch"`
	State    NodeState `json:"state"`
	Host     string    `json:"host,omitempty"`
	Since    time.Time `json:"since"`
	TimedOut bool      `json:"timed_out,omitempty"`
	Held     bool      `json:"held,omitempty"`
	Memory   int64     `json:"memory,omitempty"`
	LastExit string    `json:"last_exit,omitempty"`
	Reason   string    `json:"reason,omitempty"`
}

// MarshalState encodes the manager's whole state as JSON for the master's
// journal. The encoding is deterministic; [Restore] reads it back.
func (m *Manager) MarshalState() ([]byte, error) {
	s := stateJSON{Schema: SchemaVersion, Spec: m.spec, Started: m.started, Ended: m.ended, Relaunches: m.relaunches, BadHosts: m.badHosts}
	for id := range m.retired {
		s.Retired = append(s.Retired, id)
	}
	slices.Sort(s.Retired)
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
				Group: sl.group, Rank: sl.rank, Relaunch: sl.relaunch, State: sl.state, Host: sl.host,
				Since: sl.since, TimedOut: sl.timedOut, Held: sl.held, Memory: sl.memory,
				LastExit: sl.lastExit, Reason: sl.reason,
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
	if s.Schema != SchemaVersion {
		return nil, bad("schema %d, this build reads only schema %d; restore with the matching Rover version", s.Schema, SchemaVersion)
	}
	m, err := New(s.Spec)
	if err != nil {
		return nil, err
	}
	m.started, m.ended, m.relaunches, m.badHosts = s.Started, s.Ended, s.Relaunches, s.BadHosts
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
	want := 0
	if s.Started {
		for _, g := range m.spec.Groups {
			want += g.MaxNodes
		}
		m.slots = make([][]*slot, len(m.spec.Groups))
	}
	if len(s.Nodes) != want {
		return bad("%d nodes saved, want %d (started %v)", len(s.Nodes), want, s.Started)
	}
	sum := 0
	for _, sj := range s.Nodes {
		if sj.Group < 0 || sj.Group >= len(m.spec.Groups) || sj.Rank != len(m.slots[sj.Group]) {
			return bad("node of group %d rank %d is out of order", sj.Group, sj.Rank)
		}
		g := m.spec.Groups[sj.Group]
		if sj.Relaunch < 0 || sj.Relaunch > g.budget() || sj.State < Pending || sj.State > Failed {
			return bad("%s rank %d: relaunch %d (budget %d), state %d", g.name(), sj.Rank, sj.Relaunch, g.budget(), sj.State)
		}
		sl := &slot{
			group: sj.Group, rank: sj.Rank, relaunch: sj.Relaunch, state: sj.State, host: sj.Host,
			since: sj.Since, timedOut: sj.TimedOut, held: sj.Held, memory: sj.Memory,
			lastExit: sj.LastExit, reason: sj.Reason,
		}
		sl.id = nodeID(m.spec.Job, g.name(), sl.rank, sl.relaunch)
		for r := range sl.relaunch {
			if id := nodeID(m.spec.Job, g.name(), sl.rank, r); !m.retired[id] {
				return bad("node %s was replaced but is not retired", id)
			}
		}
		if m.retired[sl.id] != (sl.state == Failed) {
			return bad("node %s is %s but retired is %v", sl.id, sl.state, m.retired[sl.id])
		}
		if sl.state != Failed {
			m.byID[sl.id] = sl
		}
		m.slots[sj.Group] = append(m.slots[sj.Group], sl)
		sum += sl.relaunch
	}
	if sum != m.relaunches || (m.spec.MaxRelaunches > 0 && sum > m.spec.MaxRelaunches) {
		return bad("relaunches %d, but nodes sum to %d (job budget %d)", m.relaunches, sum, m.spec.MaxRelaunches)
	}
	return nil
}
