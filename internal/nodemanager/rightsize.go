package nodemanager

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/roverml/rover/internal/platform"
)

// Right-sizing (docs/design/node-manager.md, "Right-sized nodes"): agents
// report what their workers use; a rank's next node (a relaunch, or the
// rank created again by scaling) asks for what was used rather than what
// was configured, within the job's ResourceLimits. The rule is pure: it
// reads the rank's bounded record, never the clock.

// Right-sizing constants.
const (
	// MemoryHeadroom multiplies the peak resident memory seen.
	MemoryHeadroom = 1.25
	// MemoryShrinkBelow: memory is lowered only when the peak is under
	// this fraction of the request.
	MemoryShrinkBelow = 0.5
	// MinRightSizedMemory is the least memory right-sizing asks for.
	MinRightSizedMemory = 256 << 20
	// CPUBusy: the workers are CPU-bound when they used at least this
	// fraction of their CPU request.
	CPUBusy = 0.9
	// CPUGrowth multiplies the CPU request of a node that was CPU-bound
	// while its steps slowed down.
	CPUGrowth = 1.5
	// StepSlowdown: a rank's steps slowed down when the median of its
	// recent step times is at least this many times the median of its
	// earlier ones (see [Manager.ObserveUsage]).
	StepSlowdown = 1.3
	// cpuSamples bounds the CPU samples kept per rank (the recent ones).
	cpuSamples = 8
	// stepSamples is the size of each of a rank's two step-time windows:
	// the earlier (the first samples of its node's round) and the recent
	// (the last ones after those).
	stepSamples = 5
)

// Usage is what a node's workers used, as its agent reports it
// (roverv1.NodeUsage).
type Usage struct {
	ResidentBytes     int64   // resident memory now
	PeakResidentBytes int64   // the most since the workers started
	CPUCores          float64 // CPU cores used over the last interval
	// StepSeconds is the node's seconds per step over the last interval
	// (its slowest worker's); 0 when no step completed. Round is the
	// rendezvous round the workers run in.
	StepSeconds float64
	Round       int64
}

// rankUsage is a rank's bounded usage record: the peak memory over all its
// nodes, the recent CPU samples of its current node with the CPU that node
// asked for, and that node's step times in its current round: the first
// stepSamples (earlier) and the last stepSamples after them (recent).
type rankUsage struct {
	peak       int64
	cpu        []float64 // at most cpuSamples, oldest first
	cpuRequest int64     // milli-CPU of the node the samples are of
	at         time.Time // the latest report
	stepRound  int64     // the round the step times are of
	earlier    []float64 // at most stepSamples, oldest first; full before recent starts
	recent     []float64 // at most stepSamples, oldest first
}

// ObserveUsage records what node nodeID's workers used at now. Reports for
// unknown, replaced or final nodes, and invalid ones, change nothing. The
// record shapes the rank's next node when Spec.RightSize is on.
//
// A report's step time joins the node's earlier window until it holds
// stepSamples, then its recent window (the last stepSamples). A report of
// another round than the windows' starts them afresh: a new world's steps
// (another size, restored workers) compare only with each other.
func (m *Manager) ObserveUsage(nodeID string, u Usage, now time.Time) {
	s := m.current(nodeID)
	if !m.spec.RightSize || s == nil || u.ResidentBytes < 0 || u.PeakResidentBytes < 0 || !finite(u.CPUCores) || !finite(u.StepSeconds) {
		return
	}
	if s.usage == nil {
		s.usage = &rankUsage{}
	}
	r := s.usage
	r.peak = max(r.peak, u.PeakResidentBytes, u.ResidentBytes)
	if len(r.cpu) == cpuSamples {
		r.cpu = append(r.cpu[:0], r.cpu[1:]...)
	}
	r.cpu = append(r.cpu, u.CPUCores)
	r.at = now
	if u.StepSeconds > 0 {
		if u.Round != r.stepRound {
			r.stepRound, r.earlier, r.recent = u.Round, nil, nil
		}
		if len(r.earlier) < stepSamples {
			r.earlier = append(r.earlier, u.StepSeconds)
		} else {
			if len(r.recent) == stepSamples {
				r.recent = append(r.recent[:0], r.recent[1:]...)
			}
			r.recent = append(r.recent, u.StepSeconds)
		}
	}
}

// finite says x is a non-negative finite number.
func finite(x float64) bool { return x >= 0 && !math.IsInf(x, 0) && !math.IsNaN(x) }

// nodeStarted begins a rank's CPU samples and step times afresh for its
// node of milliCPU: the samples compare with the request of the node that
// made them, and its steps with its own.
func (r *rankUsage) nodeStarted(milliCPU int64) {
	if r == nil {
		return
	}
	r.cpu, r.cpuRequest = nil, milliCPU
	r.stepRound, r.earlier, r.recent = 0, nil, nil
}

// Slowdown is how much a rank's steps slowed down: the median of its
// recent step times over the median of its earlier ones, or 0 until both
// windows are full (stepSamples each). Medians make it robust to noise: a
// window's median moves only when most of its samples do.
func Slowdown(earlier, recent []float64) float64 {
	if len(earlier) < stepSamples || len(recent) < stepSamples {
		return 0
	}
	e := median(earlier)
	if e <= 0 {
		return 0
	}
	return median(recent) / e
}

// median of xs (not empty).
func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// slowdown is the record's Slowdown; 0 for none.
func (r *rankUsage) slowdown() float64 {
	if r == nil {
		return 0
	}
	return Slowdown(r.earlier, r.recent)
}

// cpuCores is the mean of the recent CPU samples; ok is false with none.
func (r *rankUsage) cpuCores() (float64, bool) {
	if r == nil || len(r.cpu) == 0 {
		return 0, false
	}
	sum := 0.0
	for _, c := range r.cpu {
		sum += c
	}
	return sum / float64(len(r.cpu)), true
}

// perNode is the job's ResourceLimits divided among its nodes (the sum of
// the groups' MaxNodes): the most one right-sized node may ask for. Zero
// fields bound nothing.
func (s Spec) perNode() platform.Resources {
	n := 0
	for _, g := range s.Groups {
		n += g.MaxNodes
	}
	l := s.ResourceLimits
	if n == 0 {
		return l
	}
	return platform.Resources{MilliCPU: l.MilliCPU / int64(n), MemoryBytes: l.MemoryBytes / int64(n), GPUs: l.GPUs / n}
}

// Observed is what a rank's workers were seen to use, for [RightSize];
// zero fields are unknown.
type Observed struct {
	PeakBytes       int64   // peak resident memory
	CPUCores        float64 // mean of the recent CPU samples
	SampledMilliCPU int64   // the CPU request of the node the samples are of
	Slowdown        float64 // the steps' [Slowdown]
}

// RightSize is the right-sizing rule: the resources of a rank's next node,
// given the group's configured request, what the rank's workers were seen
// to use, the memory an out-of-memory relaunch set (0: none; it takes
// precedence) and the most one node may ask for (zero fields: no bound).
// It returns the resources and what changed, in words ("" when nothing
// did).
//
//   - Memory: the peak × MemoryHeadroom when that is more than the
//     request, or when the peak is under MemoryShrinkBelow of it (never
//     under MinRightSizedMemory); else the request.
//   - CPU: × CPUGrowth when the workers used at least CPUBusy of the
//     sampled node's request (CPU-bound) while their steps slowed down
//     (a Slowdown of at least StepSlowdown: data loading starves the
//     step); never lowered. CPU-bound steady steps gain nothing from more
//     CPU request.
//
// Only requests the group sets are right-sized, and none is raised past
// the bound (a request already above it stays).
func RightSize(req platform.Resources, o Observed, oomMemory int64, bound platform.Resources) (platform.Resources, string) {
	peak, cpuCores, sampledMilliCPU := o.PeakBytes, o.CPUCores, o.SampledMilliCPU
	out := req
	var why []string
	clamp := func(v, b int64) int64 {
		if b > 0 && v > b {
			return b
		}
		return v
	}
	switch mem := req.MemoryBytes; {
	case oomMemory > 0:
		out.MemoryBytes = max(clamp(oomMemory, bound.MemoryBytes), min(mem, oomMemory))
	case mem > 0 && peak > 0:
		want := int64(float64(peak) * MemoryHeadroom)
		switch {
		case want > mem:
			out.MemoryBytes = max(mem, clamp(want, bound.MemoryBytes))
		case float64(peak) < MemoryShrinkBelow*float64(mem):
			out.MemoryBytes = max(want, min(MinRightSizedMemory, mem))
		}
		if out.MemoryBytes != mem {
			why = append(why, fmt.Sprintf("memory %d -> %d bytes (peak %d)", mem, out.MemoryBytes, peak))
		}
	}
	if c := req.MilliCPU; c > 0 && sampledMilliCPU > 0 && cpuCores*1000 >= CPUBusy*float64(sampledMilliCPU) && o.Slowdown >= StepSlowdown {
		want := max(c, clamp(int64(math.Ceil(float64(sampledMilliCPU)*CPUGrowth)), bound.MilliCPU))
		if want > c {
			out.MilliCPU = want
			why = append(why, fmt.Sprintf("CPU %dm -> %dm (used %.2f cores of %dm while steps slowed %.1fx)", c, want, cpuCores, sampledMilliCPU, o.Slowdown))
		}
	}
	if len(why) == 0 {
		return out, ""
	}
	return out, "right-sized: " + strings.Join(why, ", ")
}

// Change is one right-sized resource of a create, for the metric
// rover_rightsize_changes_total: Resource "memory" or "cpu", Direction
// "up" or "down".
type Change struct{ Resource, Direction string }

// sizing is what slot s's next node asks for (see resources).
type sizing struct {
	r        platform.Resources // the NodeSpec's: unset where the template applies
	full     platform.Resources // the right-sized request, the template's filled in
	milliCPU int64              // the CPU the node will have
	why      string             // what right-sizing changed; "" nothing
	changes  []Change
	seen     Observed // what the rule was given
}

// resources is what slot s's next node asks for: the group's request,
// with an out-of-memory raise and, under Spec.RightSize, the rank's usage;
// milliCPU is the CPU that node will have (its request, else the group's
// MilliCPU, the template's). why says what right-sizing changed ("" when
// nothing). A request that right-sizing leaves as the group's base stays
// unset, so the platform's template still applies. It changes nothing.
func (m *Manager) resources(s *slot) sizing {
	g := m.spec.Groups[s.group]
	r := g.Resources
	if s.milliCPU > 0 {
		r.MilliCPU = s.milliCPU // a migration's, which right-sizing never lowers
	}
	if !m.spec.RightSize {
		if s.memory > 0 {
			r.MemoryBytes = s.memory
		}
		return sizing{r: r, full: r}
	}
	base := g.Resources
	if base.MemoryBytes == 0 {
		base.MemoryBytes = g.MemoryLimit
	}
	if base.MilliCPU == 0 {
		base.MilliCPU = g.MilliCPU
	}
	if s.milliCPU > base.MilliCPU {
		base.MilliCPU = s.milliCPU
	}
	if s.usage != nil && s.usage.cpuRequest > base.MilliCPU && s.usage.cpuRequest > 0 {
		r.MilliCPU, base.MilliCPU = s.usage.cpuRequest, s.usage.cpuRequest // a raise stays
	}
	u := s.usage
	if u == nil || (u.peak == 0 && len(u.cpu) == 0) {
		u = m.groupUsage(s.group) // a rank new to scaling: as its group's others
	}
	var o Observed
	if u != nil {
		o.PeakBytes, o.SampledMilliCPU, o.Slowdown = u.peak, u.cpuRequest, u.slowdown()
		o.CPUCores, _ = u.cpuCores()
	}
	sized, why := RightSize(base, o, s.memory, m.spec.perNode())
	out := sizing{full: sized, milliCPU: sized.MilliCPU, why: why, seen: o}
	if sized.MemoryBytes != base.MemoryBytes || s.memory > 0 {
		r.MemoryBytes = sized.MemoryBytes
		if r.MemoryBytes == 0 {
			r.MemoryBytes = s.memory // a node of unknown memory killed for memory
		}
		if why != "" && s.memory == 0 && base.MemoryBytes > 0 {
			out.changes = append(out.changes, Change{"memory", direction(sized.MemoryBytes, base.MemoryBytes)})
		}
	}
	if sized.MilliCPU != base.MilliCPU {
		r.MilliCPU = sized.MilliCPU
		out.changes = append(out.changes, Change{"cpu", direction(sized.MilliCPU, base.MilliCPU)})
	}
	out.r = r
	return out
}

func direction(now, was int64) string {
	if now > was {
		return "up"
	}
	return "down"
}

// groupUsage stands for a rank that has no usage yet: the most memory any
// of the group's ranks peaked at, and the CPU samples of the rank that
// used the most of its request; nil when no rank reported.
func (m *Manager) groupUsage(gi int) *rankUsage {
	var out *rankUsage
	busiest := -1.0
	for _, s := range m.slots[gi] {
		u := s.usage
		if u == nil {
			continue
		}
		if out == nil {
			out = &rankUsage{}
		}
		out.peak = max(out.peak, u.peak)
		if c, ok := u.cpuCores(); ok && u.cpuRequest > 0 && c/float64(u.cpuRequest) > busiest {
			busiest = c / float64(u.cpuRequest)
			out.cpu, out.cpuRequest = u.cpu, u.cpuRequest
			out.earlier, out.recent = u.earlier, u.recent
		}
	}
	return out
}

// usageJSON is a rankUsage in the manager's journaled state.
type usageJSON struct {
	PeakBytes  int64     `json:"peak_bytes,omitempty"`
	CPUCores   []float64 `json:"cpu_cores,omitempty"`
	MilliCPU   int64     `json:"milli_cpu,omitempty"` // of the node the samples are of
	ReportedAt time.Time `json:"reported_at,omitzero"`
	// The current node's step times in StepRound: the earlier and the
	// recent window.
	StepRound   int64     `json:"step_round,omitempty"`
	StepEarlier []float64 `json:"step_earlier,omitempty"`
	StepRecent  []float64 `json:"step_recent,omitempty"`
}

func (r *rankUsage) json() *usageJSON {
	if r == nil {
		return nil
	}
	return &usageJSON{PeakBytes: r.peak, CPUCores: r.cpu, MilliCPU: r.cpuRequest, ReportedAt: r.at,
		StepRound: r.stepRound, StepEarlier: r.earlier, StepRecent: r.recent}
}

func (u *usageJSON) restore() (*rankUsage, error) {
	if u == nil {
		return nil, nil
	}
	if u.PeakBytes < 0 || u.MilliCPU < 0 || len(u.CPUCores) > cpuSamples {
		return nil, fmt.Errorf("usage: peak %d bytes, %dm CPU, %d CPU samples; want no negatives and at most %d samples", u.PeakBytes, u.MilliCPU, len(u.CPUCores), cpuSamples)
	}
	for _, c := range u.CPUCores {
		if !finite(c) {
			return nil, errors.New("usage: a CPU sample is negative or not finite")
		}
	}
	if len(u.StepEarlier) > stepSamples || len(u.StepRecent) > stepSamples || (len(u.StepRecent) > 0 && len(u.StepEarlier) < stepSamples) {
		return nil, fmt.Errorf("usage: %d earlier and %d recent step times; want at most %d each, and recent ones only after %d earlier", len(u.StepEarlier), len(u.StepRecent), stepSamples, stepSamples)
	}
	for _, x := range slices.Concat(u.StepEarlier, u.StepRecent) {
		if !finite(x) || x == 0 {
			return nil, errors.New("usage: a step time is not positive or not finite")
		}
	}
	return &rankUsage{peak: u.PeakBytes, cpu: u.CPUCores, cpuRequest: u.MilliCPU, at: u.ReportedAt,
		stepRound: u.StepRound, earlier: u.StepEarlier, recent: u.StepRecent}, nil
}
