package runconfig

import (
	"strings"
	"testing"
)

// TestCheckCollectiveTiming: the documented values of
// ROVER_COLLECTIVE_TIMING pass; any other is refused, naming the values.
func TestCheckCollectiveTiming(t *testing.T) {
	for _, v := range []string{"", "0", "1", "always"} {
		if err := checkCollectiveTiming(func(string) string { return v }); err != nil {
			t.Errorf("%q: %v", v, err)
		}
	}
	for _, v := range []string{"on", "true", "2", "Always", " 1"} {
		err := checkCollectiveTiming(func(string) string { return v })
		if err == nil || !strings.Contains(err.Error(), "want 0 (collective timing off), 1") {
			t.Errorf("%q: %v, want an error naming the values", v, err)
		}
	}
}
