package autoscale

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestRestoreDecidesTheSame: a policy restored from its journaled state at
// any point (mid-measurement, waiting for a change, with a straggler, after
// a shrink) makes the same decisions as the one that kept running, and
// writes the same state.
func TestRestoreDecidesTheSame(t *testing.T) {
	curve := func(n int) float64 { return 100 * float64(min(n, 3)) }
	for _, cut := range []int{0, 1, 7, 40, 120, 300, 600} {
		a := newSim(t, Config{MinNodes: 1, MaxNodes: 5, StragglerFor: time.Minute}, 1, curve, 0.1, 42)
		a.p.Capacity(5)
		a.run(cut)
		a.slow, a.slowdown, a.slowFrom = "node-0", 1.8, a.now.Add(10*time.Minute)
		data, err := a.p.MarshalState()
		if err != nil {
			t.Fatal(err)
		}
		p2, err := Restore(data)
		if err != nil {
			t.Fatalf("cut %d: restore: %v\n%s", cut, err, data)
		}
		again, _ := p2.MarshalState()
		if !bytes.Equal(data, again) {
			t.Fatalf("cut %d: restored state differs:\n%s\n%s", cut, data, again)
		}
		b := a.fork(p2)
		a.run(800 - cut)
		b.run(800 - cut)
		if diff := cmp.Diff(a.changes, b.changes); diff != "" {
			t.Fatalf("cut %d: decisions differ after restore (-kept +restored):\n%s", cut, diff)
		}
		if len(a.changes) < 3 {
			t.Fatalf("cut %d: only %d changes; the scenario must exercise the policy", cut, len(a.changes))
		}
		sa, _ := a.p.MarshalState()
		sb, _ := b.p.MarshalState()
		if !bytes.Equal(sa, sb) {
			t.Fatalf("cut %d: final states differ", cut)
		}
	}
}

// TestRestoreRejectsBadState: data that is not a saved state fails with
// ErrBadState and says what was wrong.
func TestRestoreRejectsBadState(t *testing.T) {
	p, _ := New(Config{MinNodes: 1, MaxNodes: 3})
	good, _ := p.MarshalState()
	for _, bad := range []string{
		``, `{`, `[]`, `{"schema":2}`, `{"schema":1,"unknown":1}`,
		string(bytes.Replace(good, []byte(`"max_nodes":3`), []byte(`"max_nodes":0`), 1)),
		string(bytes.Replace(good, []byte(`"sizes":[]`), []byte(`"sizes":[{"size":9,"rates":[1]}]`), 1)),
		string(bytes.Replace(good, []byte(`"sizes":[]`), []byte(`"sizes":[{"size":1,"rates":[-1]}]`), 1)),
		string(bytes.Replace(good, []byte(`"nodes":[]`), []byte(`"nodes":["b","a"]`), 1)),
		string(bytes.Replace(good, []byte(`"rejected":{}`), []byte(`"rejected":{"7":"2026-01-01T00:00:00Z"}`), 1)),
	} {
		if _, err := Restore([]byte(bad)); !errors.Is(err, ErrBadState) {
			t.Errorf("Restore(%.80q): %v, want ErrBadState", bad, err)
		}
	}
	if _, err := Restore(good); err != nil {
		t.Errorf("Restore of a fresh state: %v", err)
	}
}

// TestHoldChangesNothing: a Hold leaves the state as it was, so the master
// may call Decide on every tick and journal only on changes.
func TestHoldChangesNothing(t *testing.T) {
	s := newSim(t, Config{MinNodes: 1, MaxNodes: 4, StragglerFor: time.Minute}, 1, func(n int) float64 { return 100 * float64(min(n, 3)) }, 0.1, 9)
	s.slow, s.slowdown, s.slowFrom = "node-0", 2, t0.Add(3*time.Hour)
	holds := 0
	for range 600 {
		before, _ := s.p.MarshalState()
		d := s.p.Decide(s.now)
		after, _ := s.p.MarshalState()
		if d.Action == Hold {
			holds++
			if !bytes.Equal(before, after) {
				t.Fatalf("hold %+v changed the state:\n%s\n%s", d, before, after)
			}
		} else if bytes.Equal(before, after) {
			t.Fatalf("change %+v left the state as it was", d)
		}
		s.run(1)
	}
	if holds < 100 || len(s.changes) < 3 {
		t.Fatalf("%d holds and %d changes: the scenario must exercise both", holds, len(s.changes))
	}
}
