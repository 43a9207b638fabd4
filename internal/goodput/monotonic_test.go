package goodput

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestMonotonicReadingsDoNotBreakTheState: the master's times are its
// clock's readings, with a monotonic reading whose differences can be a
// few nanoseconds off the wall times' (the two are read apart), mixed with
// agents' times (wall only). The state keeps wall times, so the time
// attributed must be the wall time since the launch: else Restore refuses
// the state ("attributed 6.043402032s, but 6.043402033s passed since
// launch"), and a restarted master went on from an older state: the
// TestSoakShort mix reported 0.38 against 0.60 offline.
func TestMonotonicReadingsDoNotBreakTheState(t *testing.T) {
	// Two clock readings whose monotonic difference is not their wall
	// one: the machine gets them as inputs (it never reads the clock).
	var x, y time.Time
	for range 100000 {
		x, y = time.Now(), time.Now()
		if y.Sub(x) != y.Round(0).Sub(x.Round(0)) {
			break
		}
	}
	if y.Sub(x) == y.Round(0).Sub(x.Round(0)) {
		t.Fatal("the clock gave no two readings whose monotonic and wall differences differ: nothing to check with")
	}
	agent := func(d time.Duration) time.Time { return time.Unix(0, x.UnixNano()).Add(d) } // wall only
	m := newMachine(t)
	m.Launched(x)
	m.RoundFormed(1, []string{"a"}, y.Add(time.Millisecond)) // monotonic, from the other reading
	m.Progress(Progress{Round: 1, Node: "a", Step: 1, At: agent(2 * time.Millisecond)})
	m.Progress(Progress{Round: 1, Node: "a", Step: 2, At: y.Add(time.Second)})
	m.Progress(Progress{Round: 1, Node: "a", Step: 3, At: x.Add(2 * time.Second)}) // and back
	m.Progress(Progress{Round: 1, Node: "a", Step: 4, At: y.Add(3 * time.Second)})
	b, err := m.MarshalState()
	if err != nil {
		t.Fatal(err)
	}
	r, err := Restore(b)
	if err != nil {
		t.Fatalf("Restore of the machine's own state: %v", err)
	}
	end := y.Round(0).Add(5 * time.Second)
	if diff := cmp.Diff(m.View(end), r.View(end)); diff != "" {
		t.Errorf("restored view (-live +restored):\n%s", diff)
	}
	if v := m.View(end); v.Wall != end.Sub(x.Round(0)) {
		t.Errorf("wall %v, want the wall time since the launch, %v", v.Wall, end.Sub(x.Round(0)))
	}
}
