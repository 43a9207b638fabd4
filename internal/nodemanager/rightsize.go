package nodemanager

import (
	"errors"
	"fmt"
	"math"
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
	// CPUGrowth multiplies a CPU-bound node's CPU request.
	CPUGrowth = 1.5
	// cpuSamples bounds the CPU samples kept per rank (the recent ones).
	cpuSamples = 8
)

// Usage is what a node's workers used, as its agent reports it
// (roverv1.NodeUsage).
type Usage struct {
	ResidentBytes     int64   // resident memory now
	PeakResidentBytes int64   // the most since the workers started
	CPUCores          float64 // CPU cores used over the last interval
}

// rankUsage is a rank's bounded usage record: the peak memory over all its
// nodes, and the recent CPU samples of its current node with the CPU that
// node asked for.
type rankUsage struct {
	peak       int64
	cpu        []float64 // at most cpuSamples, oldest first
	cpuRequest int64     // milli-CPU of the node the samples are of
	at         time.Time // the latest report
}

// ObserveUsage records what node nodeID's workers used at now. Reports for
// unknown, replaced or final nodes, and invalid ones, change nothing. The
// record shapes the rank's next node when Spec.RightSize is on.
func (m *Manager) ObserveUsage(nodeID string, u Usage, now time.Time) {
	s := m.current(nodeID)
	if !m.spec.RightSize || s == nil || u.ResidentBytes < 0 || u.PeakResidentBytes < 0 || u.CPUCores < 0 || math.IsNaN(u.CPUCores) || math.IsInf(u.CPUCores, 0) {
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
}

// nodeStarted begins a rank's CPU samples afresh for its node of milliCPU:
// the samples compare with the request of the node that made them.
func (r *rankUsage) nodeStarted(milliCPU int64) {
	if r == nil {
		return
	}
	r.cpu, r.cpuRequest = nil, milliCPU
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

// RightSize is the right-sizing rule: the resources of a rank's next node,
// given the group's configured request, the rank's usage (peak resident
// bytes, mean recent CPU cores and the milli-CPU the sampled node asked
// for; zero when unknown), the memory an out-of-memory relaunch set (0:
// none; it takes precedence) and the most one node may ask for (zero
// fields: no bound). It returns the resources and what changed, in words
// ("" when nothing did).
//
//   - Memory: the peak × MemoryHeadroom when that is more than the
//     request, or when the peak is under MemoryShrinkBelow of it (never
//     under MinRightSizedMemory); else the request.
//   - CPU: × CPUGrowth when the workers used at least CPUBusy of the
//     sampled node's request; never lowered.
//
// Only requests the group sets are right-sized, and none is raised past
// the bound (a request already above it stays).
func RightSize(req platform.Resources, peak int64, cpuCores float64, sampledMilliCPU int64, oomMemory int64, bound platform.Resources) (platform.Resources, string) {
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
	if c := req.MilliCPU; c > 0 && sampledMilliCPU > 0 && cpuCores*1000 >= CPUBusy*float64(sampledMilliCPU) {
		want := max(c, clamp(int64(math.Ceil(float64(sampledMilliCPU)*CPUGrowth)), bound.MilliCPU))
		if want > c {
			out.MilliCPU = want
			why = append(why, fmt.Sprintf("CPU %dm -> %dm (used %.2f cores of %dm)", c, want, cpuCores, sampledMilliCPU))
		}
	}
	if len(why) == 0 {
		return out, ""
	}
	return out, "right-sized: " + strings.Join(why, ", ")
}

// resources is what slot s's next node asks for: the group's request,
// with an out-of-memory raise and, under Spec.RightSize, the rank's usage;
// milliCPU is the CPU that node will have (its request, else the group's
// MilliCPU, the template's). The last result says what right-sizing
// changed ("" when nothing). A request that right-sizing leaves as the
// group's base stays unset, so the platform's template still applies.
func (m *Manager) resources(s *slot) (r platform.Resources, milliCPU int64, why string) {
	g := m.spec.Groups[s.group]
	r = g.Resources
	if !m.spec.RightSize {
		if s.memory > 0 {
			r.MemoryBytes = s.memory
		}
		return r, 0, ""
	}
	base := g.Resources
	if base.MemoryBytes == 0 {
		base.MemoryBytes = g.MemoryLimit
	}
	if base.MilliCPU == 0 {
		base.MilliCPU = g.MilliCPU
	}
	if s.usage != nil && s.usage.cpuRequest > base.MilliCPU && s.usage.cpuRequest > 0 {
		r.MilliCPU, base.MilliCPU = s.usage.cpuRequest, s.usage.cpuRequest // a raise stays
	}
	u := s.usage
	if u == nil || (u.peak == 0 && len(u.cpu) == 0) {
		u = m.groupUsage(s.group) // a rank new to scaling: as its group's others
	}
	var peak, sampled int64
	var cores float64
	if u != nil {
		peak, sampled = u.peak, u.cpuRequest
		cores, _ = u.cpuCores()
	}
	sized, why := RightSize(base, peak, cores, sampled, s.memory, m.spec.perNode())
	if sized.MemoryBytes != base.MemoryBytes || s.memory > 0 {
		r.MemoryBytes = sized.MemoryBytes
		if r.MemoryBytes == 0 {
			r.MemoryBytes = s.memory // a node of unknown memory killed for memory
		}
	}
	if sized.MilliCPU != base.MilliCPU {
		r.MilliCPU = sized.MilliCPU
	}
	return r, sized.MilliCPU, why
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
}

func (r *rankUsage) json() *usageJSON {
	if r == nil {
		return nil
	}
	return &usageJSON{PeakBytes: r.peak, CPUCores: r.cpu, MilliCPU: r.cpuRequest, ReportedAt: r.at}
}

func (u *usageJSON) restore() (*rankUsage, error) {
	if u == nil {
		return nil, nil
	}
	if u.PeakBytes < 0 || u.MilliCPU < 0 || len(u.CPUCores) > cpuSamples {
		return nil, fmt.Errorf("usage: peak %d bytes, %dm CPU, %d CPU samples; want no negatives and at most %d samples", u.PeakBytes, u.MilliCPU, len(u.CPUCores), cpuSamples)
	}
	for _, c := range u.CPUCores {
		if c < 0 || math.IsNaN(c) || math.IsInf(c, 0) {
			return nil, errors.New("usage: a CPU sample is negative or not finite")
		}
	}
	return &rankUsage{peak: u.PeakBytes, cpu: u.CPUCores, cpuRequest: u.MilliCPU, at: u.ReportedAt}, nil
}
