package rendezvous

import (
	"testing"
	"time"
)

// TestExpect: a round closes as soon as the nodes the platform runs have
// joined, not after the last call; an expectation never delays a close,
// and it survives a restore.
func TestExpect(t *testing.T) {
	m, err := New(Config{MinNodes: 2, MaxNodes: 4, LastCall: time.Minute}, t0)
	if err != nil {
		t.Fatal(err)
	}
	joinAt := func(id string, at time.Time) {
		t.Helper()
		if _, err := m.Join(JoinRequest{NodeID: id, RequestedRank: -1, LocalWorldSize: 1, Addr: "h"}, at); err != nil {
			t.Fatal(err)
		}
	}
	m.Expect(3, t0)
	joinAt("a", t0)
	joinAt("b", t0)
	if !m.Status().Open {
		t.Fatal("round closed with 2 of the 3 expected nodes before the last call")
	}
	data, err := m.MarshalState()
	if err != nil {
		t.Fatal(err)
	}
	if m, err = Restore(data); err != nil {
		t.Fatalf("restore: %v", err)
	}
	joinAt("c", t0.Add(time.Second))
	if st := m.Status(); st.Open || st.WorldRound != 1 {
		t.Fatalf("round still open (%+v) once the 3 expected nodes joined", st)
	}

	// Fewer expected than joined, or than MinNodes: the usual rules.
	m, _ = New(Config{MinNodes: 2, MaxNodes: 4, LastCall: time.Minute}, t0)
	m.Expect(1, t0)
	joinAt("a", t0)
	if !m.Status().Open {
		t.Fatal("round closed below MinNodes")
	}
	joinAt("b", t0)
	if m.Status().Open {
		t.Fatal("round open with MinNodes joined and more than expected")
	}

	// Expecting more than MaxNodes is clamped; 0 is unknown.
	m, _ = New(Config{MinNodes: 1, MaxNodes: 2, LastCall: time.Minute}, t0)
	m.Expect(9, t0)
	joinAt("a", t0)
	m.Expect(0, t0)
	m.Tick(t0.Add(time.Second))
	if !m.Status().Open {
		t.Fatal("round closed before the last call with no expectation")
	}
	m.Tick(t0.Add(time.Minute))
	if m.Status().Open {
		t.Fatal("round open after the last call")
	}
}
