package autoscale

import (
	"math"
	"slices"
	"time"
)

// Progress is one step report of the job: the newest step it reached, how
// many samples one step covers across the whole world (the global batch;
// 0 when not reported: throughput is then counted in steps), and when.
// Reports from several nodes of the same step may all be given: only the
// first that advances the step counts.
type Progress struct {
	Round   int64
	Step    int64
	Samples int64
	At      time.Time
}

// Measured is a world size's measured throughput: the median of its
// window of samples, in samples (or steps) per second.
type Measured struct {
	Size       int
	Throughput float64
	// StdErr is the median's standard error, estimated from the window's
	// median absolute deviation (robust to outliers like the median).
	StdErr  float64
	Samples int  // samples in its window
	Trusted bool // at least MinSamples of them
}

// Record keeps the throughput measured per world size. A round's first
// WarmupSteps steps and WarmupTime are not measured; after them each report
// that advances the step gives one sample (the samples trained since the
// previous report over the time between them). Each size keeps its last
// Window samples; their median is the size's throughput, trusted from
// MinSamples samples on. Memory is bounded by MaxNodes times Window.
type Record struct {
	cfg Config

	hasRound bool
	round    int64
	size     int
	roundAt  time.Time

	hasFirst  bool
	firstStep int64

	hasAnchor  bool
	anchorStep int64
	anchorAt   time.Time

	sizes   map[int]*sizeRecord
	scratch []float64 // deviations, reused by add
}

type sizeRecord struct {
	rates  []float64 // newest last, at most cfg.Window
	median float64
	stdErr float64
}

// NewRecord returns an empty record for cfg (which [Config.Validate] must
// accept).
func NewRecord(cfg Config) (*Record, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return newRecord(cfg.withDefaults()), nil
}

func newRecord(cfg Config) *Record {
	return &Record{cfg: cfg, sizes: map[int]*sizeRecord{}}
}

// RoundFormed starts measuring a new world of size nodes. A round that is
// not newer than the current one is ignored (it reports false).
func (r *Record) RoundFormed(round int64, size int, at time.Time) bool {
	if r.hasRound && round <= r.round {
		return false
	}
	r.hasRound, r.round, r.size, r.roundAt = true, round, size, at
	r.hasFirst, r.hasAnchor = false, false
	return true
}

// Progress adds a step report. It reports whether the report gave a
// throughput sample; reports of another round, going backwards in step or
// time, with a negative step or an absurd sample count are ignored.
func (r *Record) Progress(p Progress) bool {
	if !r.hasRound || p.Round != r.round || p.Step < 0 || p.Samples < 0 || p.Samples > MaxSamplesPerStep {
		return false
	}
	if p.At.Before(r.roundAt) || r.size < 1 || r.size > r.cfg.MaxNodes {
		return false
	}
	if !r.hasFirst {
		r.hasFirst, r.firstStep = true, p.Step
	}
	if p.Step-r.firstStep < r.cfg.WarmupSteps || p.At.Sub(r.roundAt) < r.cfg.WarmupTime {
		return false
	}
	if !r.hasAnchor {
		r.hasAnchor, r.anchorStep, r.anchorAt = true, p.Step, p.At
		return false
	}
	if p.Step <= r.anchorStep || !p.At.After(r.anchorAt) {
		return false
	}
	perStep := float64(max(p.Samples, 1))
	rate := float64(p.Step-r.anchorStep) * perStep / p.At.Sub(r.anchorAt).Seconds()
	if math.IsNaN(rate) || math.IsInf(rate, 0) || rate <= 0 {
		return false
	}
	r.anchorStep, r.anchorAt = p.Step, p.At
	r.add(r.size, rate)
	return true
}

func (r *Record) add(size int, rate float64) {
	s := r.sizes[size]
	if s == nil {
		s = &sizeRecord{rates: make([]float64, 0, r.cfg.Window)}
		r.sizes[size] = s
	}
	if len(s.rates) == r.cfg.Window {
		copy(s.rates, s.rates[1:])
		s.rates = s.rates[:len(s.rates)-1]
	}
	s.rates = append(s.rates, rate)
	s.median = median(s.rates)
	dev := r.scratch[:0]
	for _, v := range s.rates {
		dev = append(dev, math.Abs(v-s.median))
	}
	r.scratch = dev
	// MAD·1.4826 estimates a normal sample's deviation; the median's
	// standard error is 1.2533 times the mean's.
	s.stdErr = 1.2533 * 1.4826 * median(dev) / math.Sqrt(float64(len(s.rates)))
}

// Size is the current round's world size (0 before the first round).
func (r *Record) Size() int { return r.size }

// Round is the current round (0 before the first).
func (r *Record) Round() int64 { return r.round }

// At returns size's measurement (ok false when it has no sample).
func (r *Record) At(size int) (Measured, bool) {
	s := r.sizes[size]
	if s == nil || len(s.rates) == 0 {
		return Measured{}, false
	}
	return Measured{Size: size, Throughput: s.median, StdErr: s.stdErr, Samples: len(s.rates), Trusted: len(s.rates) >= r.cfg.MinSamples}, true
}

// Sizes returns every measured size, smallest first.
func (r *Record) Sizes() []Measured {
	out := make([]Measured, 0, len(r.sizes))
	for n := range r.sizes {
		if m, ok := r.At(n); ok {
			out = append(out, m)
		}
	}
	slices.SortFunc(out, func(a, b Measured) int { return a.Size - b.Size })
	return out
}

// Trusted returns the trusted sizes, smallest first.
func (r *Record) Trusted() []Measured {
	all := r.Sizes()
	out := all[:0]
	for _, m := range all {
		if m.Trusted {
			out = append(out, m)
		}
	}
	return out
}

// median of xs (not modified); xs is short (at most MaxWindow).
func median(xs []float64) float64 {
	var buf [64]float64
	s := append(buf[:0], xs...)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}
