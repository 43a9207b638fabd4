package runconfig

import "fmt"

// collectiveTimingEnv turns the workers' collective timing off (0), sets
// its default (1: stock DDP's gradient buckets are timed only where that
// costs under 1% of a step), or times them whatever it costs (always):
// docs/design/collective-timing.md. rover run passes it to the workers as
// it is; it is checked here so that a typo fails at once, not silently in
// every worker.
const collectiveTimingEnv = "ROVER_COLLECTIVE_TIMING"

func checkCollectiveTiming(getenv func(string) string) error {
	switch v := getenv(collectiveTimingEnv); v {
	case "", "0", "1", "always":
		return nil
	default:
		return fmt.Errorf("%s=%q: want 0 (collective timing off), 1 (the default: stock DDP's gradient buckets timed where that costs under 1%% of a step) or always (timed whatever it costs)",
			collectiveTimingEnv, v)
	}
}
