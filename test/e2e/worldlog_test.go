package e2e

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// worldStart is one line of the training script's --log-world file: one
// rank's start, with the step it resumed from and where that step came from
// (memory, storage, none).
type worldStart struct {
	line                       string
	restart, world, rank, step int
	source                     string
}

// readRestarts reads the --log-world file at path, which must hold first
// starts and then starts after them, and returns the latter.
func readRestarts(t testing.TB, path string, first, then int) []worldStart {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != first+then {
		t.Fatalf("world.log has %d starts, want %d + %d:\n%s", len(lines), first, then, b)
	}
	starts := make([]worldStart, 0, then)
	for _, line := range lines[first:] {
		s := worldStart{line: line}
		if _, err := fmt.Sscanf(line, "restart=%d world=%d rank=%d start_step=%d source=%s", &s.restart, &s.world, &s.rank, &s.step, &s.source); err != nil {
			t.Fatalf("world.log line %q: %v", line, err)
		}
		starts = append(starts, s)
	}
	return starts
}

// sameStep checks that every one of starts resumed from the same step and
// returns it.
func sameStep(t testing.TB, starts []worldStart) int {
	t.Helper()
	steps := make([]int, len(starts))
	for i, s := range starts {
		steps[i] = s.step
	}
	for _, s := range steps {
		if s != steps[0] {
			t.Fatalf("ranks resumed from different steps %v", steps)
		}
	}
	return steps[0]
}

// startLines returns starts' lines, one a line.
func startLines(starts []worldStart) string {
	lines := make([]string, len(starts))
	for i, s := range starts {
		lines[i] = s.line
	}
	return strings.Join(lines, "\n")
}
