package goodput

import (
	"math"
	"slices"
	"sort"
	"time"
)

// advance attributes the time from m.at to t to the cause in force and
// moves m.at to t. A t before m.at attributes nothing. Times are taken
// without their monotonic clock reading: the state keeps wall times (as
// MarshalState writes them), so the time attributed is always the wall
// time since the launch, however the driver's times mix readings of its
// monotonic clock with times from elsewhere (an agent's).
func (m *Machine) advance(t time.Time) {
	t = t.Round(0)
	if !t.After(m.at) {
		return
	}
	dt := t.Sub(m.at) // saturates
	m.at = t
	if r := m.current(); r != nil {
		r.add(m.phase, dt)
	}
	c, ok := m.attribution()
	if !ok {
		m.pending = addSat(m.pending, dt)
		return
	}
	m.badput[c] = addSat(m.badput[c], dt)
	if own, _ := m.phase.cause(); own == c {
		m.phaseAcc = addSat(m.phaseAcc, dt)
	}
}

// attribution is the cause of time now, or ok false for training time
// (pending goodput). Overlays win over the phase, in this order, so that
// overlapping causes count once: node check, hang, waiting for nodes.
func (m *Machine) attribution() (Cause, bool) {
	switch {
	case m.nodeCheck:
		return NodeCheck, true
	case m.hung:
		return Hang, true
	case m.waiting:
		return WaitingForNodes, true
	}
	return m.phase.cause()
}

// current is the open restart, or nil.
func (m *Machine) current() *Restart {
	if !m.open || len(m.restarts) == 0 {
		return nil
	}
	return &m.restarts[len(m.restarts)-1]
}

// credit makes the pending training time goodput, the job having completed
// step (at least the frontier).
func (m *Machine) credit(step int64) {
	d := m.pending
	m.pending = 0
	m.goodput = addSat(m.goodput, d)
	if step > m.frontier {
		if n := step - m.frontier; d > 0 && n > 0 {
			m.stepTime = d / time.Duration(n)
		}
		m.frontier = step
	}
	m.hung = false
	m.addSample(m.frontier, m.goodput)
}

// firstStepDone ends the first step of a round: the job completed step.
// Steps the report covers beyond the first are credited at the latest step
// time, taken from the phase's badput.
func (m *Machine) firstStepDone(step int64) {
	r := m.current()
	if r != nil && !r.Resumed {
		m.resolve(max(step-1, 0), FromNothing) // no restore reported
	}
	if !m.hasFrontier {
		m.frontier, m.hasFrontier = max(step-1, 0), true
		m.addSample(m.frontier, m.goodput)
	}
	m.roundBase = m.goodput
	if c, ok := m.phase.cause(); ok && step-m.frontier > 1 && m.stepTime > 0 { // both >= 0: no overflow
		x := min(mulSat(m.stepTime, step-m.frontier-1), m.phaseAcc)
		m.badput[c] -= x
		m.goodput = addSat(m.goodput, x)
		if r != nil {
			r.FirstStep -= min(x, r.FirstStep)
		}
	}
	if r != nil {
		r.Done, m.open = true, false
	}
	m.setPhase(training)
	m.frontier = max(m.frontier, step)
	m.hung = false
	m.addSample(m.frontier, m.goodput)
}

// resolve applies a resume after step: it settles the failed round's tail
// and rolls back the steps after step.
func (m *Machine) resolve(step int64, from Source) {
	if r := m.current(); r != nil && (!r.Resumed || step < r.ResumedStep) {
		r.ResumedStep, r.From, r.Resumed = step, from, true
	}
	if t := m.tail; t != nil {
		m.tail = nil
		var kept time.Duration
		if step > t.step {
			kept = t.dur
			if m.stepTime > 0 {
				kept = min(t.dur, mulSat(m.stepTime, step-t.step))
			}
		}
		m.goodput = addSat(m.goodput, kept)
		m.lose(t.dur - kept)
	}
	switch {
	case !m.hasFrontier || step > m.frontier:
		m.frontier, m.hasFrontier = step, true
		m.addSample(step, m.goodput)
	case step < m.frontier:
		m.rollback(step)
	}
}

// rollback takes back the goodput credited after step: lost progress.
func (m *Machine) rollback(step int64) {
	g := m.goodAt(step)
	m.lose(m.goodput - g)
	m.goodput = g
	m.roundBase = min(m.roundBase, g)
	n := m.frontier - step
	m.lostSteps = addSatInt(m.lostSteps, n)
	if r := m.current(); r != nil {
		r.LostSteps = addSatInt(r.LostSteps, n)
	}
	m.frontier = step
	i := sort.Search(len(m.samples), func(i int) bool { return m.samples[i].step > step })
	m.samples = m.samples[:i]
	m.clampSamples()
	m.addSample(step, g)
}

// goodAt is the goodput credited when the job had completed step, linearly
// interpolated between samples; below the oldest sample, the oldest's.
func (m *Machine) goodAt(step int64) time.Duration {
	s := m.samples
	if len(s) == 0 {
		return m.goodput
	}
	i := sort.Search(len(s), func(i int) bool { return s[i].step > step })
	if i == 0 {
		return s[0].good
	}
	a := s[i-1]
	if i == len(s) || a.step == step {
		return min(a.good, m.goodput)
	}
	b := s[i]
	f := float64(step-a.step) / float64(b.step-a.step)
	g := a.good + time.Duration(f*float64(b.good-a.good))
	return min(max(g, a.good), b.good, m.goodput)
}

// addSample records that the job had completed step with good credited.
func (m *Machine) addSample(step int64, good time.Duration) {
	if n := len(m.samples); n > 0 && m.samples[n-1].step >= step {
		if m.samples[n-1].step == step {
			m.samples[n-1].good = good
		}
		return
	}
	m.samples = append(m.samples, sample{step, good})
	if n := len(m.samples); n > m.cfg.MaxSamples {
		thin := m.samples[:1]
		for i := 2; i < n-1; i += 2 {
			thin = append(thin, m.samples[i])
		}
		m.samples = append(thin, m.samples[n-1])
	}
}

// prune drops the samples below the last durable checkpoint but the one at
// or just below it: no restart resumes below it.
func (m *Machine) prune() {
	i := sort.Search(len(m.samples), func(i int) bool { return m.samples[i].step > m.durable })
	if i > 1 {
		m.samples = slices.Clone(m.samples[i-1:])
	}
}

// clampSamples keeps every sample's goodput at most the credited goodput.
func (m *Machine) clampSamples() {
	for i := len(m.samples) - 1; i >= 0 && m.samples[i].good > m.goodput; i-- {
		m.samples[i].good = m.goodput
	}
}

// block moves d of this round's step time to checkpoint badput.
func (m *Machine) block(d time.Duration) {
	take := min(d, m.pending)
	m.pending -= take
	rest := min(d-take, m.goodput-m.roundBase)
	m.goodput -= rest
	m.clampSamples()
	m.badput[Checkpoint] = addSat(m.badput[Checkpoint], take+rest)
}

// lose counts d as lost progress, of the open restart if any.
func (m *Machine) lose(d time.Duration) {
	if d <= 0 {
		return
	}
	m.badput[LostProgress] = addSat(m.badput[LostProgress], d)
	if r := m.current(); r != nil {
		r.Lost = addSat(r.Lost, d)
	}
}

func addSat(a, b time.Duration) time.Duration {
	if b > 0 && a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

func addSatInt(a, b int64) int64 {
	if b > 0 && a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// mulSat is d*n, saturating; 0 for n or d below 1.
func mulSat(d time.Duration, n int64) time.Duration {
	if d <= 0 || n <= 0 {
		return 0
	}
	if n > int64(math.MaxInt64/d) {
		return math.MaxInt64
	}
	return d * time.Duration(n)
}
