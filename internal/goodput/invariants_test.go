package goodput

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// checkInvariants fails t unless m's view at now is sound: no negative
// time, a ratio in 0..1, goodput + badput == wall == the time since launch
// (unless the sums saturated), memory within its bounds.
func checkInvariants(t testing.TB, m *Machine, now time.Time) {
	t.Helper()
	v := m.View(now)
	if diff := cmp.Diff(v, m.View(now)); diff != "" {
		t.Fatalf("View changed the machine (-first +second):\n%s", diff)
	}
	sum := v.Goodput
	for c, d := range v.Badput {
		if d < 0 {
			t.Fatalf("badput %s is %v", Cause(c), d)
		}
		sum = addSat(sum, d)
	}
	if v.Goodput < 0 || sum != v.Wall || v.Ratio < 0 || v.Ratio > 1 || math.IsNaN(v.Ratio) {
		t.Fatalf("goodput %v + badput = %v, wall %v, ratio %v", v.Goodput, sum, v.Wall, v.Ratio)
	}
	if m.launched {
		end := m.at
		if m.live() && now.After(end) {
			end = now
		}
		if want := end.Sub(m.launchAt); v.Wall != want && v.Wall != math.MaxInt64 { // saturated: a clock 292 years on
			t.Fatalf("wall %v, want %v since launch", v.Wall, want)
		}
	}
	for _, r := range v.Latest {
		for _, d := range []time.Duration{r.Detect, r.Stop, r.Rendezvous, r.Spawn, r.Init, r.Restore, r.FirstStep, r.Lost} {
			if d < 0 {
				t.Fatalf("restart %+v has a negative phase", r)
			}
		}
	}
	if len(m.samples) > m.cfg.MaxSamples || len(v.Latest) > m.cfg.KeepRestarts || len(v.Failures) > MaxFailureCauses {
		t.Fatalf("%d samples, %d restarts, %d causes: over the bounds", len(m.samples), len(v.Latest), len(v.Failures))
	}
	for i := 1; i < len(m.samples); i++ {
		if a, b := m.samples[i-1], m.samples[i]; a.step >= b.step || a.good > b.good || b.good > m.goodput {
			t.Fatalf("samples out of order: %+v", m.samples)
		}
	}
}

func roundTrip(t testing.TB, m *Machine) *Machine {
	t.Helper()
	data, err := m.MarshalState()
	if err != nil {
		t.Fatalf("MarshalState: %v", err)
	}
	r, err := Restore(data)
	if err != nil {
		t.Fatalf("Restore(%s): %v", data, err)
	}
	again, err := r.MarshalState()
	if err != nil || string(again) != string(data) {
		t.Fatalf("state changed in a round trip:\n%s\n%s", data, again)
	}
	return r
}

// TestRestoreAnywhereChangesNothing: a master restart (the state saved and
// restored) between any two events of a timeline changes nothing.
func TestRestoreAnywhereChangesNothing(t *testing.T) {
	for name, evs := range map[string][]event{
		"restart":  restartTimeline(),
		"rollback": rollbackTimeline(11, FromStorage),
	} {
		ref := newMachine(t)
		play(ref, evs)
		want := ref.View(at(100))
		for k := 0; k <= len(evs); k++ {
			m := newMachine(t)
			play(m, evs[:k])
			m = roundTrip(t, m)
			play(m, evs[k:])
			if diff := cmp.Diff(want, m.View(at(100))); diff != "" {
				t.Fatalf("%s: restored after event %d (-want +got):\n%s", name, k, diff)
			}
		}
	}
}

func TestRestoreRejectsBadState(t *testing.T) {
	m := newMachine(t)
	play(m, restartTimeline()[:8])
	good, err := m.MarshalState()
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{
		"", "{}", `{"schema":2}`, string(good[:len(good)-1]),
		replace(string(good), `"phase":"rendezvous"`, `"phase":"running"`),
		replace(string(good), `"goodput_ns":20000000000`, `"goodput_ns":-1`),
		replace(string(good), `"schema":1`, `"schema":1,"extra":1`),
	} {
		if _, err := Restore([]byte(bad)); !errors.Is(err, ErrBadState) {
			t.Errorf("Restore(%.60q) = %v, want ErrBadState", bad, err)
		}
	}
}

func replace(s, old, new string) string {
	if !strings.Contains(s, old) {
		panic("no " + old + " in " + s)
	}
	return strings.Replace(s, old, new, 1)
}

// TestHostileProgress: reports no sane agent sends keep the view sound.
func TestHostileProgress(t *testing.T) {
	m := newMachine(t)
	evs := []event{
		launched(0), formed(1, 0, "a", "b"),
		step(1, "a", 5, 10),
		step(1, "a", 3, 11),             // backwards: ignored
		step(1, "a", math.MaxInt64, 12), // step 2^63-1
		step(1, "b", -4, 13),            // negative: ignored
		step(0, "a", 50, 14),            // an old round
		step(1, "zz", 60, 15),           // a node not in the round
		step(1, "a", math.MaxInt64, 9),  // time backwards, a duplicate
		failed(1, "a", "oom", 30, 20),   // died after it was reported
		formed(2, 19, "a"),              // time backwards
		formed(2, 21, "a"),              // a duplicate
		resumed(2, "a", 0, FromNothing, 22),
		step(1, "b", 100, 23), // the old round's node
		step(2, "a", math.MaxInt64, 24),
		saved(2, "a", 7, 1e6, false, 25), // blocking beyond any step time
		resumed(2, "a", math.MaxInt64, FromMemory, 26),
		endedAt(false, 27), endedAt(true, 28), step(2, "a", 9, 29),
	}
	for _, e := range evs {
		e(m)
		checkInvariants(t, m, at(30))
	}
	if v := m.View(at(30)); v.Wall != sec2(27) {
		t.Errorf("wall %v, want 27s", v.Wall)
	}
	// Resumed at the largest step, with a step time known: the first
	// step's arithmetic must not overflow.
	m = newMachine(t)
	for _, e := range []event{
		launched(0), formed(1, 0, "a"), step(1, "a", 1, 1), step(1, "a", 11, 11),
		failed(1, "a", "oom", 0, 12), formed(2, 13, "a"),
		resumed(2, "a", math.MaxInt64, FromMemory, 14),
		step(2, "a", math.MaxInt64, 15),
		step(2, "a", math.MaxInt64, 16),
	} {
		e(m)
		checkInvariants(t, m, at(20))
	}
	if g := m.View(at(16)).Goodput; g != sec2(12) { // 10 s, the 1 s tail kept, 1 s since the first step
		t.Errorf("goodput %v, want 12s", g)
	}
}
