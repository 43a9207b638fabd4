package goodput

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestResentMilestonesChangeNothing: an agent on a new session sends its
// round's milestones again (WorkersStarted, RestoreStarted, Resumed, with
// their own, older times). Whenever they come (within the restore, the
// first step or training), the view is the one without them.
func TestResentMilestonesChangeNothing(t *testing.T) {
	base := restartTimeline()
	want := func() View { m := newMachine(t); play(m, base); return m.View(at(100)) }()
	resent := []event{
		started(2, "a", 41), started(2, "b", 42), restoreBegun(2, "a", 44),
		resumed(2, "a", 24, FromMemory, 45), resumed(2, "b", 24, FromMemory, 45.5),
	}
	// Indexes into restartTimeline: after the spawn (10), the restore's
	// start (11), its first node (12), its last (13), the first step (14),
	// training (15).
	for _, c := range []struct {
		after int
		n     int // how many of resent had happened
	}{{10, 2}, {11, 3}, {12, 4}, {13, 5}, {14, 5}, {15, 5}} {
		evs := slices.Concat(base[:c.after+1], resent[:c.n], base[c.after+1:])
		m := newMachine(t)
		play(m, evs)
		if diff := cmp.Diff(want, m.View(at(100))); diff != "" {
			t.Errorf("milestones resent after event %d (-want +got):\n%s", c.after, diff)
		}
	}
}
