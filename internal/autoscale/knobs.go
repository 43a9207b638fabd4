package autoscale

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Knobs are the names ParseKnobs takes, in the order the help lists them.
var Knobs = []string{"warmup-steps", "warmup", "window", "min-samples", "min-gain", "hysteresis", "assumed-efficiency",
	"cool-down", "change-timeout", "retry-after", "straggler-for", "min-replace-gain", "capacity-retry",
	"ps-hot", "ps-window", "ps-target", "ps-workers-waiting", "ps-cool-down", "ps-change-timeout"}

// ParseKnobs reads a policy's settings from a comma-separated list of
// NAME=VALUE (`rover submit --auto-scale=cool-down=30s,min-gain=0.4`):
// durations as Go writes them (30s, 2m), fractions and counts as numbers;
// an empty list is the defaults. MinNodes, MaxNodes and NodeUnit are not
// knobs: they are the job's --nnodes. Every bad entry is reported at once;
// the result still needs Validate with the job's node counts.
func ParseKnobs(s string) (Config, error) {
	var c Config
	var errs []error
	seen := map[string]bool{}
	for _, kv := range strings.Split(s, ",") {
		kv = strings.TrimSpace(kv)
		if kv == "" {
			continue
		}
		name, value, ok := strings.Cut(kv, "=")
		if !ok || value == "" {
			errs = append(errs, fmt.Errorf("%w: %q is not NAME=VALUE (names: %s)", ErrInvalidConfig, kv, strings.Join(Knobs, ", ")))
			continue
		}
		if seen[name] {
			errs = append(errs, fmt.Errorf("%w: %s is given twice", ErrInvalidConfig, name))
			continue
		}
		seen[name] = true
		if err := c.set(name, value); err != nil {
			errs = append(errs, fmt.Errorf("%w: %s=%s: %v", ErrInvalidConfig, name, value, err))
		}
	}
	return c, errors.Join(errs...)
}

func (c *Config) set(name, value string) error {
	dur := func(d *time.Duration) error {
		v, err := time.ParseDuration(value)
		if err != nil {
			return errors.New("not a duration (e.g. 30s, 2m)")
		}
		*d = v
		return nil
	}
	frac := func(f *float64) error {
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			return errors.New("not a number (e.g. 0.3)")
		}
		*f = v
		return nil
	}
	count := func(n *int) error {
		v, err := strconv.Atoi(value)
		if err != nil {
			return errors.New("not a whole number")
		}
		*n = v
		return nil
	}
	switch name {
	case "warmup-steps":
		v, err := strconv.ParseInt(value, 10, 64)
		if err != nil {
			return errors.New("not a whole number")
		}
		c.WarmupSteps = v
		return nil
	case "warmup":
		return dur(&c.WarmupTime)
	case "window":
		return count(&c.Window)
	case "min-samples":
		return count(&c.MinSamples)
	case "min-gain":
		return frac(&c.MinGain)
	case "hysteresis":
		return frac(&c.Hysteresis)
	case "assumed-efficiency":
		return frac(&c.AssumedEfficiency)
	case "cool-down":
		return dur(&c.CoolDown)
	case "change-timeout":
		return dur(&c.ChangeTimeout)
	case "retry-after":
		return dur(&c.RetryAfter)
	case "straggler-for":
		return dur(&c.StragglerFor)
	case "min-replace-gain":
		return frac(&c.MinReplaceGain)
	case "capacity-retry":
		return dur(&c.CapacityRetry)
	case "ps-hot":
		return frac(&c.PS.Hot)
	case "ps-window":
		return dur(&c.PS.Window)
	case "ps-target":
		return frac(&c.PS.Target)
	case "ps-workers-waiting":
		return frac(&c.PS.WorkersWaiting)
	case "ps-cool-down":
		return dur(&c.PS.CoolDown)
	case "ps-change-timeout":
		return dur(&c.PS.ChangeTimeout)
	}
	if slices.Contains([]string{"min-nodes", "max-nodes", "node-unit"}, name) {
		return errors.New("the node counts are the job's --nnodes and --node-unit, not auto-scaling knobs")
	}
	return fmt.Errorf("unknown name (names: %s)", strings.Join(Knobs, ", "))
}
