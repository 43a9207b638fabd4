package autoscale

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"time"
)

// SchemaVersion is the "schema" of the JSON written by [Policy.MarshalState].
const SchemaVersion = 1

// stateJSON is the policy's whole state; field names are stable (the master
// journals them). Durations are in nanoseconds.
type stateJSON struct {
	Schema     int                  `json:"schema"`
	Config     configJSON           `json:"config"`
	HasRound   bool                 `json:"has_round,omitempty"`
	Round      int64                `json:"round"`
	Size       int                  `json:"size"`
	RoundAt    time.Time            `json:"round_at"`
	HasFirst   bool                 `json:"has_first,omitempty"`
	FirstStep  int64                `json:"first_step"`
	HasAnchor  bool                 `json:"has_anchor,omitempty"`
	AnchorStep int64                `json:"anchor_step"`
	AnchorAt   time.Time            `json:"anchor_at"`
	Sizes      []sizeJSON           `json:"sizes"`
	Nodes      []string             `json:"nodes"`
	Capacity   int                  `json:"capacity"`
	Stragglers map[string]straggler `json:"stragglers"`
	Rejected   map[int]time.Time    `json:"rejected"`
	HasChange  bool                 `json:"has_change,omitempty"`
	Last       Decision             `json:"last"`
	Pending    bool                 `json:"pending,omitempty"`
	Changes    int64                `json:"changes"`
}

type sizeJSON struct {
	Size  int       `json:"size"`
	Rates []float64 `json:"rates"`
}

type configJSON struct {
	MinNodes          int     `json:"min_nodes"`
	MaxNodes          int     `json:"max_nodes"`
	NodeUnit          int     `json:"node_unit"`
	WarmupSteps       int64   `json:"warmup_steps"`
	WarmupTimeNS      int64   `json:"warmup_time_ns"`
	Window            int     `json:"window"`
	MinSamples        int     `json:"min_samples"`
	MinGain           float64 `json:"min_gain"`
	Hysteresis        float64 `json:"hysteresis"`
	AssumedEfficiency float64 `json:"assumed_efficiency"`
	CoolDownNS        int64   `json:"cool_down_ns"`
	ChangeTimeoutNS   int64   `json:"change_timeout_ns"`
	RetryAfterNS      int64   `json:"retry_after_ns"`
	StragglerForNS    int64   `json:"straggler_for_ns"`
	MinReplaceGain    float64 `json:"min_replace_gain"`
}

// encodeConfig writes a defaulted config; a zero warm-up or hysteresis is
// written as -1 (none), so that decoding and defaulting give it back.
func encodeConfig(c Config) configJSON {
	j := configJSON{MinNodes: c.MinNodes, MaxNodes: c.MaxNodes, NodeUnit: c.NodeUnit,
		WarmupSteps: c.WarmupSteps, WarmupTimeNS: int64(c.WarmupTime), Window: c.Window, MinSamples: c.MinSamples,
		MinGain: c.MinGain, Hysteresis: c.Hysteresis, AssumedEfficiency: c.AssumedEfficiency,
		CoolDownNS: int64(c.CoolDown), ChangeTimeoutNS: int64(c.ChangeTimeout), RetryAfterNS: int64(c.RetryAfter), StragglerForNS: int64(c.StragglerFor),
		MinReplaceGain: c.MinReplaceGain}
	if j.WarmupSteps == 0 {
		j.WarmupSteps = -1
	}
	if j.WarmupTimeNS == 0 {
		j.WarmupTimeNS = -1
	}
	if j.Hysteresis == 0 {
		j.Hysteresis = -1
	}
	return j
}

func (j configJSON) config() Config {
	return Config{MinNodes: j.MinNodes, MaxNodes: j.MaxNodes, NodeUnit: j.NodeUnit,
		WarmupSteps: j.WarmupSteps, WarmupTime: time.Duration(j.WarmupTimeNS), Window: j.Window, MinSamples: j.MinSamples,
		MinGain: j.MinGain, Hysteresis: j.Hysteresis, AssumedEfficiency: j.AssumedEfficiency,
		CoolDown: time.Duration(j.CoolDownNS), ChangeTimeout: time.Duration(j.ChangeTimeoutNS), RetryAfter: time.Duration(j.RetryAfterNS), StragglerFor: time.Duration(j.StragglerForNS),
		MinReplaceGain: j.MinReplaceGain}
}

// MarshalState encodes the policy's whole state as JSON for the journal. The
// encoding is deterministic; [Restore] reads it back, and the restored
// policy decides as this one would.
func (p *Policy) MarshalState() ([]byte, error) {
	r := p.rec
	s := stateJSON{Schema: SchemaVersion, Config: encodeConfig(p.cfg),
		HasRound: r.hasRound, Round: r.round, Size: r.size, RoundAt: r.roundAt,
		HasFirst: r.hasFirst, FirstStep: r.firstStep, HasAnchor: r.hasAnchor, AnchorStep: r.anchorStep, AnchorAt: r.anchorAt,
		Sizes: []sizeJSON{}, Nodes: p.nodes, Capacity: p.capacity, Stragglers: p.stragglers, Rejected: p.rejected,
		HasChange: p.hasChange, Last: p.last, Pending: p.pending, Changes: p.changes}
	if s.Nodes == nil {
		s.Nodes = []string{}
	}
	for _, m := range r.Sizes() {
		s.Sizes = append(s.Sizes, sizeJSON{Size: m.Size, Rates: r.sizes[m.Size].rates})
	}
	return json.Marshal(s)
}

// Restore returns the policy saved by [Policy.MarshalState]. Data that is
// not such a state fails with an error wrapping [ErrBadState].
func Restore(data []byte) (*Policy, error) {
	var s stateJSON
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadState, err)
	}
	if s.Schema != SchemaVersion {
		return nil, fmt.Errorf("%w: schema %d; this rover reads schema %d", ErrBadState, s.Schema, SchemaVersion)
	}
	p, err := New(s.Config.config())
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadState, err)
	}
	if s.Size < 0 || s.FirstStep < 0 || s.AnchorStep < 0 || s.Capacity < -1 || s.Changes < 0 {
		return nil, fmt.Errorf("%w: a negative size, step, capacity or count", ErrBadState)
	}
	if !slices.IsSorted(s.Nodes) || len(slices.Compact(slices.Clone(s.Nodes))) != len(s.Nodes) || len(s.Nodes) != s.Size {
		return nil, fmt.Errorf("%w: nodes must be sorted, distinct and as many as the size (%d)", ErrBadState, s.Size)
	}
	r := p.rec
	r.hasRound, r.round, r.size, r.roundAt = s.HasRound, s.Round, s.Size, s.RoundAt
	r.hasFirst, r.firstStep, r.hasAnchor, r.anchorStep, r.anchorAt = s.HasFirst, s.FirstStep, s.HasAnchor, s.AnchorStep, s.AnchorAt
	for _, z := range s.Sizes {
		if z.Size < 1 || z.Size > p.cfg.MaxNodes || len(z.Rates) == 0 || len(z.Rates) > p.cfg.Window || r.sizes[z.Size] != nil {
			return nil, fmt.Errorf("%w: size %d: out of 1..%d, repeated, or with 0 or more than %d samples",
				ErrBadState, z.Size, p.cfg.MaxNodes, p.cfg.Window)
		}
		for _, v := range z.Rates {
			if !(v > 0) || math.IsInf(v, 0) {
				return nil, fmt.Errorf("%w: size %d: throughput sample %v is not a positive number", ErrBadState, z.Size, v)
			}
		}
		for _, v := range z.Rates {
			r.add(z.Size, v)
		}
	}
	for n, st := range s.Stragglers {
		if _, ok := slices.BinarySearch(s.Nodes, n); !ok || !(st.Slowdown >= 1) || math.IsInf(st.Slowdown, 0) {
			return nil, fmt.Errorf("%w: straggler %q: not a node of the round, or slowdown %v below 1", ErrBadState, n, st.Slowdown)
		}
		p.stragglers[n] = st
	}
	for n, at := range s.Rejected {
		if n < 1 || n > p.cfg.MaxNodes {
			return nil, fmt.Errorf("%w: rejected size %d is out of 1..%d", ErrBadState, n, p.cfg.MaxNodes)
		}
		p.rejected[n] = at
	}
	p.nodes, p.capacity = s.Nodes, s.Capacity
	p.hasChange, p.last, p.pending, p.changes = s.HasChange, s.Last, s.Pending, s.Changes
	return p, nil
}
