package autoscale

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// ErrInvalidConfig: a Config field is out of range ([Config.Validate]).
var ErrInvalidConfig = errors.New("invalid autoscale config")

// ErrBadState: data given to [Restore] is not a valid saved state.
var ErrBadState = errors.New("invalid saved autoscale state")

// Documented defaults of Config (used where a field is 0).
const (
	DefaultWarmupSteps       = 20
	DefaultWarmupTime        = 30 * time.Second
	DefaultWindow            = 50
	DefaultMinSamples        = 25
	DefaultMinGain           = 0.3
	DefaultHysteresis        = 0.15
	DefaultAssumedEfficiency = 0.7
	DefaultCoolDown          = 2 * time.Minute
	DefaultChangeTimeout     = 10 * time.Minute
	DefaultRetryAfter        = 4 * time.Hour
	DefaultStragglerFor      = 2 * time.Minute
	DefaultMinReplaceGain    = 0.1
)

// Limits of Config.
const (
	MaxNodesLimit = 1 << 16 // largest MaxNodes: the record keeps one entry per size
	MaxWindow     = 1024
	// MaxSamplesPerStep bounds Progress.Samples; larger reports are absurd
	// and ignored.
	MaxSamplesPerStep = 1 << 40
)

// Config is a job's scaling policy. Gains are fractions of a node's share
// of the throughput at the smaller size: the marginal gain of going from m
// to n nodes is (T(n)-T(m)) / (n-m) / (T(m)/m), 1 for linear scaling, 0
// when the added nodes add nothing, negative when they hurt.
type Config struct {
	// MinNodes..MaxNodes is the job's --nnodes range; NodeUnit (0: 1) is
	// the step of every change. Required: 1 <= MinNodes <= MaxNodes.
	MinNodes, MaxNodes, NodeUnit int
	// WarmupSteps and WarmupTime: after a round forms, progress is not
	// measured until both this many steps and this much time have passed
	// (0: DefaultWarmupSteps, DefaultWarmupTime; negative: none).
	WarmupSteps int64
	WarmupTime  time.Duration
	// Window is how many throughput samples each size keeps (its median is
	// the size's throughput); MinSamples is how many it needs before it is
	// trusted (0: DefaultWindow, DefaultMinSamples).
	Window, MinSamples int
	// MinGain: grow while the predicted marginal gain of the next NodeUnit
	// nodes is at least this (0: DefaultMinGain). Hysteresis: shrink only
	// when the measured marginal gain of the last NodeUnit nodes is below
	// MinGain-Hysteresis by more than its standard error (0:
	// DefaultHysteresis; negative: none). The next nodes are never
	// predicted to gain more than the last ones measurably did
	// (diminishing returns), and growing to a measured size needs its gain
	// above MinGain by more than its standard error too.
	MinGain, Hysteresis float64
	// AssumedEfficiency is the marginal gain assumed while a single size is
	// measured (0: DefaultAssumedEfficiency). It must be above MinGain for
	// the policy to ever try a second size.
	AssumedEfficiency float64
	// CoolDown is the least time between two changes (0: DefaultCoolDown).
	// ChangeTimeout is how long a change waits for its round before the
	// policy decides again without it (0: DefaultChangeTimeout).
	CoolDown, ChangeTimeout time.Duration
	// RetryAfter: a size the policy shrank from because its last nodes
	// measurably did not pay is not grown to again for this long
	// (0: DefaultRetryAfter; negative: never again). Noise around the
	// threshold cannot make the job go back and forth more than once per
	// size and period.
	RetryAfter time.Duration
	// StragglerFor: a node that stays a straggler this long is replaced if
	// the job would gain at least MinReplaceGain of its throughput
	// (0: DefaultStragglerFor, DefaultMinReplaceGain).
	StragglerFor   time.Duration
	MinReplaceGain float64
	// CapacityRetry is not the policy's: it is how long the node manager
	// holds a capacity it learned from nodes pending past their timeout
	// before the job probes for more (nodemanager.Spec.PendingRetry; 0:
	// its default, 10 min). The policy sees the capacity, not this.
	CapacityRetry time.Duration
	// PS is the parameter-server rule's settings (the ps-* knobs), for a
	// parameter-server job whose ps group is auto-scaled; the allreduce
	// policy does not read it.
	PS PSConfig
}

// Validate reports every field that is out of range at once, joined into one
// error whose parts wrap [ErrInvalidConfig] and name the field.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...))
	}
	if c.MinNodes < 1 {
		bad("MinNodes is %d; it must be at least 1 (the --nnodes minimum)", c.MinNodes)
	}
	if c.MaxNodes < c.MinNodes || c.MaxNodes > MaxNodesLimit {
		bad("MaxNodes is %d; it must be between MinNodes (%d) and %d", c.MaxNodes, c.MinNodes, MaxNodesLimit)
	}
	if c.NodeUnit < 0 || c.NodeUnit > MaxNodesLimit {
		bad("NodeUnit is %d; use 0 for 1, or a positive node count", c.NodeUnit)
	}
	if c.Window < 0 || c.Window > MaxWindow {
		bad("Window is %d; use 0 for the default (%d) or 1..%d", c.Window, DefaultWindow, MaxWindow)
	}
	w := c.Window
	if w == 0 {
		w = DefaultWindow
	}
	if c.MinSamples < 0 || c.MinSamples > w {
		bad("MinSamples is %d; use 0 for the default (%d) or 1..Window (%d)", c.MinSamples, DefaultMinSamples, w)
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"MinGain", c.MinGain}, {"Hysteresis", c.Hysteresis}, {"AssumedEfficiency", c.AssumedEfficiency}, {"MinReplaceGain", c.MinReplaceGain}} {
		if math.IsNaN(f.v) || math.IsInf(f.v, 0) || f.v < -1 || f.v > 1 {
			bad("%s is %v; it must be a fraction between -1 and 1 (0 for the default)", f.name, f.v)
		}
	}
	for _, f := range []struct {
		name string
		v    time.Duration
	}{{"CoolDown", c.CoolDown}, {"ChangeTimeout", c.ChangeTimeout}, {"StragglerFor", c.StragglerFor}} {
		if f.v < 0 {
			bad("%s is %v; it must not be negative (0 for the default)", f.name, f.v)
		}
	}
	if err := c.PS.Validate(); err != nil {
		errs = append(errs, err)
	}
	d := c.withDefaults()
	if len(errs) == 0 && d.AssumedEfficiency < d.MinGain {
		bad("AssumedEfficiency (%v) is below MinGain (%v): the policy would never try a second size", d.AssumedEfficiency, d.MinGain)
	}
	return errors.Join(errs...)
}

func (c Config) withDefaults() Config {
	if c.NodeUnit == 0 {
		c.NodeUnit = 1
	}
	if c.WarmupSteps == 0 {
		c.WarmupSteps = DefaultWarmupSteps
	} else if c.WarmupSteps < 0 {
		c.WarmupSteps = 0
	}
	if c.WarmupTime == 0 {
		c.WarmupTime = DefaultWarmupTime
	} else if c.WarmupTime < 0 {
		c.WarmupTime = 0
	}
	if c.Window == 0 {
		c.Window = DefaultWindow
	}
	if c.MinSamples == 0 {
		c.MinSamples = min(DefaultMinSamples, c.Window)
	}
	if c.MinGain == 0 {
		c.MinGain = DefaultMinGain
	}
	if c.Hysteresis == 0 {
		c.Hysteresis = DefaultHysteresis
	} else if c.Hysteresis < 0 {
		c.Hysteresis = 0
	}
	if c.AssumedEfficiency == 0 {
		c.AssumedEfficiency = DefaultAssumedEfficiency
	}
	if c.CoolDown == 0 {
		c.CoolDown = DefaultCoolDown
	}
	if c.ChangeTimeout == 0 {
		c.ChangeTimeout = DefaultChangeTimeout
	}
	if c.RetryAfter == 0 {
		c.RetryAfter = DefaultRetryAfter
	}
	if c.StragglerFor == 0 {
		c.StragglerFor = DefaultStragglerFor
	}
	if c.MinReplaceGain == 0 {
		c.MinReplaceGain = DefaultMinReplaceGain
	}
	return c
}
