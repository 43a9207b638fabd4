package runconfig

import (
	"strings"
	"testing"
)

// TestCheckCollectiveTiming: the documented values of
// ROVER_COLLECTIVE_TIMING and ROVER_COLLECTIVE_TIMING_HOOK_US pass; any
// other is refused, naming the values.
func TestCheckCollectiveTiming(t *testing.T) {
	env := func(mode, us string) func(string) string {
		return func(k string) string { return map[string]string{collectiveTimingEnv: mode, hookCostEnv: us}[k] }
	}
	for _, mode := range []string{"", "0", "1", "always"} {
		for _, us := range []string{"", "0", "150", "2.5", "1e9"} {
			if errs := checkCollectiveTiming(env(mode, us)); len(errs) != 0 {
				t.Errorf("%q, %q: %v", mode, us, errs)
			}
		}
	}
	for _, mode := range []string{"on", "true", "2", "Always", " 1"} {
		errs := checkCollectiveTiming(env(mode, ""))
		if len(errs) != 1 || !strings.Contains(errs[0].Error(), "want 0 (collective timing off), 1") {
			t.Errorf("%q: %v, want an error naming the values", mode, errs)
		}
	}
	for _, us := range []string{"-1", "x", "NaN", "1e10", "150us"} {
		errs := checkCollectiveTiming(env("1", us))
		if len(errs) != 1 || !strings.Contains(errs[0].Error(), "ROVER_COLLECTIVE_TIMING_HOOK_US=") || !strings.Contains(errs[0].Error(), "microseconds, 0 to 1e9") {
			t.Errorf("%q: %v, want an error naming the unit and range", us, errs)
		}
	}
}
