package goodput

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"time"
)

// SchemaVersion is the "schema" of the JSON written by [Machine.MarshalState].
const SchemaVersion = 1

// stateJSON is the machine's whole state. Durations are in nanoseconds;
// field names are stable (the master journals them).
type stateJSON struct {
	Schema       int              `json:"schema"`
	KeepRestarts int              `json:"keep_restarts"`
	MaxSamples   int              `json:"max_samples"`
	Launched     bool             `json:"launched"`
	LaunchAt     time.Time        `json:"launch_at"`
	At           time.Time        `json:"at"`
	Phase        string           `json:"phase"`
	PhaseNS      int64            `json:"phase_ns"`
	Round        int64            `json:"round"`
	Nodes        []string         `json:"nodes"`
	Reported     []string         `json:"reported,omitempty"`
	NodeCheck    bool             `json:"node_check,omitempty"`
	Hung         bool             `json:"hung,omitempty"`
	Waiting      bool             `json:"waiting,omitempty"`
	GoodputNS    int64            `json:"goodput_ns"`
	PendingNS    int64            `json:"pending_ns"`
	BadputNS     map[string]int64 `json:"badput_ns"`
	Tail         *tailJSON        `json:"tail,omitempty"`
	Frontier     int64            `json:"frontier"`
	HasFrontier  bool             `json:"has_frontier,omitempty"`
	StepTimeNS   int64            `json:"step_time_ns"`
	RoundBaseNS  int64            `json:"round_base_ns"`
	Samples      [][2]int64       `json:"samples"` // step, goodput ns
	Durable      int64            `json:"durable"`
	HasDurable   bool             `json:"has_durable,omitempty"`
	LastSave     [2]int64         `json:"last_save"` // round, step: the newest of SaveBlocks (states before them had only it)
	LastBlockNS  int64            `json:"last_block_ns"`
	SaveBlocks   [][3]int64       `json:"save_blocks,omitempty"` // round, step, blocking ns; oldest first
	Restarts     []Restart        `json:"restarts"`
	Open         bool             `json:"open,omitempty"`
	Failures     map[string]int64 `json:"failures"`
	NRestarts    int64            `json:"n_restarts"`
	LostSteps    int64            `json:"lost_steps"`
	Saves        int64            `json:"saves"`
}

type tailJSON struct {
	DurNS int64 `json:"dur_ns"`
	Step  int64 `json:"step"`
	Round int64 `json:"round,omitempty"`
}

// MarshalState encodes the machine's whole state as JSON for the journal.
// The encoding is deterministic; [Restore] reads it back.
func (m *Machine) MarshalState() ([]byte, error) {
	s := stateJSON{
		Schema: SchemaVersion, KeepRestarts: m.cfg.KeepRestarts, MaxSamples: m.cfg.MaxSamples,
		Launched: m.launched, LaunchAt: m.launchAt, At: m.at, Phase: m.phase.String(), PhaseNS: int64(m.phaseAcc),
		Round: m.round, Nodes: sortedKeys(m.nodes), Reported: sortedKeys(m.reported),
		NodeCheck: m.nodeCheck, Hung: m.hung, Waiting: m.waiting,
		GoodputNS: int64(m.goodput), PendingNS: int64(m.pending), BadputNS: map[string]int64{},
		Frontier: m.frontier, HasFrontier: m.hasFrontier, StepTimeNS: int64(m.stepTime), RoundBaseNS: int64(m.roundBase),
		Samples: [][2]int64{}, Durable: m.durable, HasDurable: m.hasDurable,
		LastSave: [2]int64{}, LastBlockNS: 0,
		Restarts: m.restarts, Open: m.open, Failures: m.failures,
		NRestarts: m.nRestarts, LostSteps: m.lostSteps, Saves: m.saves,
	}
	for _, b := range m.blocks {
		s.SaveBlocks = append(s.SaveBlocks, [3]int64{b.key.round, b.key.step, int64(b.block)})
	}
	if n := len(m.blocks); n > 0 {
		s.LastSave, s.LastBlockNS = [2]int64{m.blocks[n-1].key.round, m.blocks[n-1].key.step}, int64(m.blocks[n-1].block)
	}
	for c, d := range m.badput {
		s.BadputNS[Cause(c).String()] = int64(d)
	}
	if m.tail != nil {
		s.Tail = &tailJSON{DurNS: int64(m.tail.dur), Step: m.tail.step, Round: m.tail.round}
	}
	for _, x := range m.samples {
		s.Samples = append(s.Samples, [2]int64{x.step, int64(x.good)})
	}
	if s.Restarts == nil {
		s.Restarts = []Restart{}
	}
	return json.Marshal(s)
}

// Restore returns the machine that [Machine.MarshalState] encoded. Errors
// wrap [ErrBadState].
func Restore(data []byte) (*Machine, error) {
	var s stateJSON
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadState, err)
	}
	if s.Schema != SchemaVersion {
		return nil, fmt.Errorf("%w: schema %d, want %d", ErrBadState, s.Schema, SchemaVersion)
	}
	cfg := Config{KeepRestarts: s.KeepRestarts, MaxSamples: s.MaxSamples}
	if err := cfg.Validate(); err != nil || cfg.KeepRestarts == 0 || cfg.MaxSamples == 0 {
		return nil, fmt.Errorf("%w: config %+v", ErrBadState, cfg)
	}
	m := &Machine{
		cfg: cfg, launched: s.Launched, launchAt: s.LaunchAt, at: s.At, phaseAcc: time.Duration(s.PhaseNS),
		round: s.Round, nodes: keySet(s.Nodes), reported: nil,
		nodeCheck: s.NodeCheck, hung: s.Hung, waiting: s.Waiting,
		goodput: time.Duration(s.GoodputNS), pending: time.Duration(s.PendingNS),
		frontier: s.Frontier, hasFrontier: s.HasFrontier, stepTime: time.Duration(s.StepTimeNS),
		roundBase: time.Duration(s.RoundBaseNS), durable: s.Durable, hasDurable: s.HasDurable,
		restarts: s.Restarts, open: s.Open, failures: s.Failures,
		nRestarts: s.NRestarts, lostSteps: s.LostSteps, saves: s.Saves,
	}
	if len(s.Reported) > 0 {
		m.reported = keySet(s.Reported)
	}
	if m.failures == nil {
		m.failures = map[string]int64{}
	}
	if len(m.restarts) == 0 {
		m.restarts = nil
	}
	for _, b := range s.SaveBlocks {
		m.blocks = append(m.blocks, saveBlock{saveKey{b[0], b[1]}, time.Duration(b[2])})
	}
	if len(s.SaveBlocks) == 0 && (s.LastSave != [2]int64{} || s.LastBlockNS != 0) { // a state from before SaveBlocks
		m.blocks = []saveBlock{{saveKey{s.LastSave[0], s.LastSave[1]}, time.Duration(s.LastBlockNS)}}
	}
	if err := m.restoreChecked(s); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadState, err)
	}
	return m, nil
}

func (m *Machine) restoreChecked(s stateJSON) error {
	p := slices.Index(phaseNames[:], s.Phase)
	if p < 0 {
		return fmt.Errorf("unknown phase %q", s.Phase)
	}
	m.phase, m.done = phase(p), phase(p) == ended
	if m.launched == (m.phase == idle) {
		return fmt.Errorf("phase %s with launched %v", s.Phase, m.launched)
	}
	for c := range NumCauses {
		d, ok := s.BadputNS[c.String()]
		if !ok || d < 0 {
			return fmt.Errorf("badput of %s missing or negative", c)
		}
		m.badput[c] = time.Duration(d)
	}
	if len(s.BadputNS) != int(NumCauses) {
		return fmt.Errorf("%d badput causes, want %d", len(s.BadputNS), NumCauses)
	}
	if c, ok := m.phase.cause(); (ok && m.phaseAcc > m.badput[c]) || (!ok && m.phaseAcc != 0) {
		return fmt.Errorf("phase time %v beyond its cause's", m.phaseAcc)
	}
	if s.Tail != nil {
		if s.Tail.DurNS < 0 {
			return fmt.Errorf("negative tail")
		}
		m.tail = &tail{dur: time.Duration(s.Tail.DurNS), step: s.Tail.Step, round: s.Tail.Round}
	}
	for i, x := range s.Samples {
		if i > 0 && (x[0] <= s.Samples[i-1][0] || x[1] < s.Samples[i-1][1]) {
			return fmt.Errorf("samples out of order at %d", i)
		}
		m.samples = append(m.samples, sample{x[0], time.Duration(x[1])})
	}
	return m.checkSums()
}

// checkSums checks the state's numbers against each other: what the
// machine's arithmetic relies on.
func (m *Machine) checkSums() error {
	wall := addSat(m.goodput, m.pending)
	for _, d := range m.badput {
		wall = addSat(wall, d)
	}
	if m.tail != nil {
		wall = addSat(wall, m.tail.dur)
	}
	last := sample{}
	if n := len(m.samples); n > 0 {
		last = m.samples[n-1]
	}
	switch {
	case m.goodput < 0 || m.pending < 0 || m.phaseAcc < 0 || m.stepTime < 0 || m.roundBase < 0 || slices.ContainsFunc(m.blocks, func(b saveBlock) bool { return b.block < 0 }):
		return fmt.Errorf("negative duration")
	case m.roundBase > m.goodput || last.good > m.goodput || (len(m.samples) > 0 && m.samples[0].step < 0):
		return fmt.Errorf("goodput %v below the round's base %v or a sample's %v", m.goodput, m.roundBase, last.good)
	case m.frontier < 0 || m.durable < 0 || m.round < 0 || m.nRestarts < 0 || m.lostSteps < 0 || m.saves < 0:
		return fmt.Errorf("negative count")
	case slices.ContainsFunc(m.restarts, badRestart) || (m.tail != nil && m.tail.step < 0):
		return fmt.Errorf("a restart or the tail out of range")
	case m.at.Before(m.launchAt) || (wall < math.MaxInt64 && wall != m.at.Sub(m.launchAt)):
		return fmt.Errorf("attributed %v, but %v passed since launch", wall, m.at.Sub(m.launchAt))
	case len(m.samples) > m.cfg.MaxSamples || len(m.restarts) > m.cfg.KeepRestarts || len(m.blocks) > maxSaveBlocks:
		return fmt.Errorf("%d samples, %d restarts over the bounds", len(m.samples), len(m.restarts))
	case len(m.failures) > MaxFailureCauses+1:
		return fmt.Errorf("%d failure causes", len(m.failures))
	case m.open && len(m.restarts) == 0:
		return fmt.Errorf("an open restart with none kept")
	}
	return nil
}

func sortedKeys(set map[string]bool) []string {
	if len(set) == 0 {
		return nil
	}
	return slices.Sorted(maps.Keys(set))
}

func keySet(keys []string) map[string]bool {
	set := make(map[string]bool, len(keys))
	for _, k := range keys {
		set[k] = true
	}
	return set
}

func badRestart(r Restart) bool {
	for _, d := range []time.Duration{r.Detect, r.Stop, r.Rendezvous, r.Spawn, r.Init, r.Restore, r.FirstStep, r.Lost} {
		if d < 0 {
			return true
		}
	}
	if len(r.Nodes) > MaxRestoreNodes || r.MoreNodes < 0 {
		return true
	}
	for _, n := range r.Nodes {
		if !n.From.valid() || n.Fetch < 0 || n.Load < 0 || n.Step < 0 {
			return true
		}
	}
	return r.LostSteps < 0 || r.ResumedStep < 0 || !r.From.valid()
}
