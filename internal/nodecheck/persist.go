package nodecheck

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// stateJSON is the machine's persisted form.
type stateJSON struct {
	Config   Config    `json:"config"`
	Passed   []string  `json:"passed,omitempty"`
	Excluded []Verdict `json:"excluded,omitempty"`
	Check    *Check    `json:"check,omitempty"`
}

// MarshalState encodes the machine for a snapshot.
func (m *Machine) MarshalState() ([]byte, error) {
	s := stateJSON{Config: m.cfg, Check: m.check}
	for n := range m.passed {
		s.Passed = append(s.Passed, n)
	}
	slices.Sort(s.Passed)
	for _, v := range m.excluded {
		s.Excluded = append(s.Excluded, v)
	}
	slices.SortFunc(s.Excluded, func(a, b Verdict) int { return strings.Compare(a.Node, b.Node) })
	return json.Marshal(s)
}

// Restore decodes a machine that MarshalState encoded.
func Restore(b []byte) (*Machine, error) {
	var s stateJSON
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("decode the node check's state: %w", err)
	}
	m := New(s.Config)
	for _, n := range s.Passed {
		m.passed[n] = true
	}
	for _, v := range s.Excluded {
		m.excluded[v.Node] = v
	}
	if c := s.Check; c != nil && (c.Stage < 1 || c.Stage > len(c.Groups) || c.Stage > 2) {
		return nil, fmt.Errorf("the node check's state has stage %d with %d stages of groups", c.Stage, len(c.Groups))
	}
	if s.Check != nil {
		s.Check.undecided = -1
	}
	m.check = s.Check
	return m, nil
}
