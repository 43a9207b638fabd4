package nodecheck

import (
	"fmt"
	"time"
)

// Defaults of Config's zero fields.
const (
	// DefaultStragglerRatio: a node slower than twice the median is a
	// straggler (DLRover's threshold).
	DefaultStragglerRatio = 2.0
	// DefaultStragglerFloor: a node must also be this much slower than the
	// median, so that the jitter of a check that takes milliseconds never
	// names a straggler.
	DefaultStragglerFloor = 500 * time.Millisecond
	// DefaultGroupTimeout is how long one group's check may take on an
	// agent before it counts as failed.
	DefaultGroupTimeout = 30 * time.Second
	// stageSlack is how long past its groups' timeouts the master waits for
	// a stage's reports: the agents start the check program and report.
	stageSlack = 15 * time.Second
)

// Config is a job's node check.
type Config struct {
	// StragglerRatio: a node whose time is above StragglerRatio times the
	// median (and StragglerFloor above it) is a straggler. 0: 2.
	StragglerRatio float64 `json:"straggler_ratio,omitempty"`
	// StragglerFloor: see StragglerRatio. 0: 500 ms.
	StragglerFloor time.Duration `json:"straggler_floor,omitempty"`
	// ExcludeStragglers excludes stragglers from the job, slowest first,
	// while at least MinNodes nodes remain.
	ExcludeStragglers bool `json:"exclude_stragglers,omitempty"`
	// GroupTimeout bounds one group's check on an agent. 0: 30 s.
	GroupTimeout time.Duration `json:"group_timeout,omitempty"`
	// MinNodes is the fewest nodes the job trains with (--nnodes MIN).
	MinNodes int `json:"min_nodes,omitempty"`
}

func (c Config) ratio() float64 {
	if c.StragglerRatio <= 0 {
		return DefaultStragglerRatio
	}
	return c.StragglerRatio
}

func (c Config) floor() time.Duration {
	if c.StragglerFloor <= 0 {
		return DefaultStragglerFloor
	}
	return c.StragglerFloor
}

// Timeout is GroupTimeout with its default.
func (c Config) Timeout() time.Duration {
	if c.GroupTimeout <= 0 {
		return DefaultGroupTimeout
	}
	return c.GroupTimeout
}

// Validate reports a configuration the machine cannot run with.
func (c Config) Validate() error {
	switch {
	case c.StragglerRatio != 0 && c.StragglerRatio < 1:
		return fmt.Errorf("node check: straggler ratio %g is below 1: every node would be a straggler; use 1 or more (default %g)", c.StragglerRatio, DefaultStragglerRatio)
	case c.StragglerFloor < 0, c.GroupTimeout < 0:
		return fmt.Errorf("node check: negative durations (straggler floor %s, group timeout %s); use 0 for the defaults", c.StragglerFloor, c.GroupTimeout)
	}
	return nil
}
