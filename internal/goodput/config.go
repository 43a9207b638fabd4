package goodput

import (
	"errors"
	"fmt"
)

// ErrInvalidConfig: a Config field is out of range ([Config.Validate]).
var ErrInvalidConfig = errors.New("invalid goodput config")

// ErrBadState: data given to [Restore] is not a valid saved state.
var ErrBadState = errors.New("invalid saved goodput state")

// Defaults and limits of Config.
const (
	DefaultKeepRestarts = 8   // Config.KeepRestarts when 0
	DefaultMaxSamples   = 256 // Config.MaxSamples when 0
	MinSamples          = 4   // smallest non-zero Config.MaxSamples
	MaxSamplesLimit     = 1 << 20
	MaxKeepRestarts     = 1024
	// MaxFailureCauses bounds the distinct failure causes counted; further
	// causes are counted as OtherCause. Causes are cut to MaxCauseLen bytes.
	MaxFailureCauses = 32
	MaxCauseLen      = 64
	OtherCause       = "other"
)

// Config bounds the machine's memory.
type Config struct {
	// KeepRestarts is how many of the latest restarts keep their phases in
	// the view (0: DefaultKeepRestarts; at most MaxKeepRestarts).
	KeepRestarts int
	// MaxSamples caps the step/goodput samples kept since the last durable
	// checkpoint to compute lost progress (0: DefaultMaxSamples; else
	// MinSamples..MaxSamplesLimit). Past the cap every other sample is
	// dropped: the resolution halves and memory stays bounded.
	MaxSamples int
}

// Validate reports every field that is out of range at once, joined into one
// error whose parts wrap [ErrInvalidConfig] and name the field.
func (c Config) Validate() error {
	var errs []error
	if c.KeepRestarts < 0 || c.KeepRestarts > MaxKeepRestarts {
		errs = append(errs, fmt.Errorf("%w: KeepRestarts is %d; use 0 for the default (%d) or 1..%d",
			ErrInvalidConfig, c.KeepRestarts, DefaultKeepRestarts, MaxKeepRestarts))
	}
	if c.MaxSamples != 0 && (c.MaxSamples < MinSamples || c.MaxSamples > MaxSamplesLimit) {
		errs = append(errs, fmt.Errorf("%w: MaxSamples is %d; use 0 for the default (%d) or %d..%d",
			ErrInvalidConfig, c.MaxSamples, DefaultMaxSamples, MinSamples, MaxSamplesLimit))
	}
	return errors.Join(errs...)
}

func (c Config) withDefaults() Config {
	if c.KeepRestarts == 0 {
		c.KeepRestarts = DefaultKeepRestarts
	}
	if c.MaxSamples == 0 {
		c.MaxSamples = DefaultMaxSamples
	}
	return c
}
