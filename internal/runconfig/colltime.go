package runconfig

import (
	"fmt"
	"math"
	"strconv"
)

// collectiveTimingEnv turns the workers' collective timing off (0), sets
// its default (1: stock DDP's gradient buckets are timed only where that
// costs under 1% of a step), or times them whatever it costs (always);
// hookCostEnv replaces the cost of the timing hook per bucket per step
// that the default assumes, in microseconds: docs/design/collective-timing.md.
// rover run passes them to the workers as they are; they are checked here
// so that a typo fails at once, not silently in every worker.
const (
	collectiveTimingEnv = "ROVER_COLLECTIVE_TIMING"
	hookCostEnv         = "ROVER_COLLECTIVE_TIMING_HOOK_US"
)

func checkCollectiveTiming(getenv func(string) string) []error {
	var errs []error
	switch v := getenv(collectiveTimingEnv); v {
	case "", "0", "1", "always":
	default:
		errs = append(errs, fmt.Errorf("%s=%q: want 0 (collective timing off), 1 (the default: stock DDP's gradient buckets timed where that costs under 1%% of a step) or always (timed whatever it costs)",
			collectiveTimingEnv, v))
	}
	if v := getenv(hookCostEnv); v != "" {
		if us, err := strconv.ParseFloat(v, 64); err != nil || math.IsNaN(us) || us < 0 || us > 1e9 {
			errs = append(errs, fmt.Errorf("%s=%q: want the timing hook's cost per DDP gradient bucket per step in microseconds, 0 to 1e9 (unset: 150, as measured in docs/benchmarks.md)",
				hookCostEnv, v))
		}
	}
	return errs
}
