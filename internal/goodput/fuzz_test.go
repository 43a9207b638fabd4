package goodput

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// fuzzPlay applies ops to m, three bytes each (kind, node, argument), and
// checks the invariants after each; a save-and-restore op must not change
// the view. It returns the final machine.
func fuzzPlay(t testing.TB, m *Machine, ops []byte) *Machine {
	t.Helper()
	now := t0
	for i := 0; i+2 < len(ops); i += 3 {
		kind, node, arg := ops[i]%20, fmt.Sprintf("n%d", ops[i+1]%3), int64(ops[i+2])
		round := m.round - arg%2 + arg/128                    // mostly current, sometimes old or next
		when := now.Add(time.Duration(arg%7-2) * time.Second) // sometimes in the past
		switch kind {
		case 0:
			m.Launched(when)
		case 1:
			m.RoundFormed(m.round+1+arg%2, []string{"n0", node}, when)
		case 2, 3, 4:
			st := arg * 7
			if arg == 255 {
				st = math.MaxInt64
			}
			if kind == 4 {
				m.LastStep(Progress{Round: round, Node: node, Step: st, At: when})
			} else {
				m.Progress(Progress{Round: round, Node: node, Step: st, At: when})
			}
		case 5:
			m.WorkerFailed(Failure{Round: round, Node: node, Cause: fmt.Sprint("c", arg%40), DiedAt: when.Add(-time.Second), At: when})
		case 6:
			m.RoundStopped(round, StopReason(arg%4), when)
		case 7:
			m.WorkersStopped(round, node, when)
		case 8:
			m.WorkersStarted(round, node, when)
		case 9:
			m.RestoreStarted(round, node, when)
		case 10:
			st := arg*5 - 10
			if arg == 255 {
				st = math.MaxInt64
			}
			m.Resumed(round, node, st, Source(arg%6), when)
			m.NodeRestored(round, node, NodeRestore{Step: st, From: Source(arg % 7), Peer: "p", Fetch: time.Duration(arg) - 50, Load: time.Duration(arg)})
		case 11:
			m.CheckpointSaved(Save{Round: round, Node: node, Step: arg * 3, Blocking: time.Duration(arg) * 10 * time.Millisecond, Durable: arg%2 == 0, At: when})
		case 12:
			m.NodeCheckStarted(when)
		case 13:
			m.NodeCheckEnded(when)
		case 14:
			m.HangDetected(when)
		case 15:
			m.HangEnded(when)
		case 16:
			m.WaitingForNodes(when)
		case 17:
			m.NodesJoined(when)
		case 18:
			if arg < 20 {
				m.Ended(arg%2 == 0, when)
			}
			now = now.Add(time.Duration(arg) * 100 * time.Millisecond)
		case 19:
			before := m.View(now)
			m = roundTrip(t, m)
			if diff := cmp.Diff(before, m.View(now)); diff != "" {
				t.Fatalf("op %d: the view changed in a round trip (-want +got):\n%s", i/3, diff)
			}
		}
		if when.After(now) {
			now = when
		}
		checkInvariants(t, m, now)
	}
	return m
}

func FuzzMachine(f *testing.F) {
	f.Add([]byte{0, 0, 2, 1, 0, 0, 2, 0, 10, 18, 0, 50, 2, 0, 20, 5, 1, 3, 19, 0, 0, 7, 0, 3, 1, 0, 0, 10, 0, 2, 2, 0, 30})
	f.Add([]byte{0, 0, 2, 12, 0, 3, 1, 1, 1, 2, 0, 5, 14, 0, 4, 13, 0, 4, 15, 0, 3, 18, 0, 90, 19, 0, 0, 11, 1, 4, 2, 1, 255, 18, 1, 1})
	f.Add([]byte{0, 0, 2, 1, 0, 2, 2, 0, 2, 2, 0, 9, 16, 0, 2, 6, 0, 1, 1, 0, 2, 8, 0, 2, 9, 0, 2, 10, 0, 20, 17, 0, 2, 2, 0, 12, 19, 1, 1})
	f.Fuzz(func(t *testing.T, ops []byte) {
		m, err := New(Config{KeepRestarts: 3, MaxSamples: 8})
		if err != nil {
			t.Fatal(err)
		}
		fuzzPlay(t, m, ops)
	})
}

// FuzzRestore: Restore never panics, and a state it accepts stays sound
// under further events.
func FuzzRestore(f *testing.F) {
	for k := 0; k <= len(restartTimeline()); k += 3 {
		m, _ := New(Config{})
		play(m, restartTimeline()[:k])
		data, _ := m.MarshalState()
		f.Add(data, []byte{2, 0, 9, 5, 1, 3, 1, 0, 4, 10, 0, 1, 2, 0, 30})
	}
	f.Fuzz(func(t *testing.T, data, ops []byte) {
		m, err := Restore(data)
		if err != nil {
			return
		}
		checkInvariants(t, m, m.at)
		fuzzPlay(t, m, ops)
	})
}
