package nodemanager

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func end() step {
	return step{do: func(m *Manager, now time.Time) []Command { m.End(); return nil }}
}

// reopen swaps m for a manager restored from its saved state, as a
// restarted master would have.
func reopen(t *testing.T) step {
	return step{do: func(m *Manager, now time.Time) []Command {
		t.Helper()
		data, err := m.MarshalState()
		if err != nil {
			t.Fatal(err)
		}
		r, err := Restore(data)
		if err != nil {
			t.Fatalf("restore: %v\n%s", err, data)
		}
		*m = *r
		return nil
	}}
}

// TestEnd: once the job has ended, the manager records how its nodes end
// but creates none and fails nothing, whatever ends them, and that holds
// across a restore.
func TestEnd(t *testing.T) {
	pendingAll := Spec{Job: "train", Groups: []GroupSpec{workers(2, 2)}, PendingTimeout: time.Minute, PendingStrategy: PendingAll}
	never := workers(2, 2)
	never.RestartCount = -1
	tests := []struct {
		name    string
		spec    Spec
		steps   func(t *testing.T) []step
		wantErr error          // the job's failure, if any
		states  []NodeState    // by rank
		reason  map[int]string // rank: a substring of its reason
		check   func(*testing.T, *Manager)
	}{{
		name: "a failed exit is recorded, not relaunched",
		spec: spec(workers(1, 2)),
		steps: func(*testing.T) []step {
			return []step{start(), running("train-worker-0-0", "h1"), end(),
				exit("train-worker-0-0", 1).then("Delete train-worker-0-0"),
				exit("train-worker-1-0", 0).then()}
		},
		states: []NodeState{Failed, Succeeded},
		reason: map[int]string{0: "exited with code 1 after the job ended; not relaunched"},
	}, {
		name: "an OOM kill, an eviction and a loss are recorded, not relaunched",
		spec: spec(workers(3, 3)),
		steps: func(*testing.T) []step {
			return []step{start(), end(),
				oom("train-worker-0-0").then("Delete train-worker-0-0"),
				evicted("train-worker-1-0").then(), // the platform holds it no more
				lost("train-worker-2-0").then("Delete train-worker-2-0"),
				exit("train-worker-2-0", 1).then()} // replaced: ignored
		},
		states: []NodeState{Failed, Failed, Failed},
		reason: map[int]string{0: "OOMKilled", 1: "Evicted", 2: "was lost"},
	}, {
		name: "diagnosis actions relaunch nothing",
		spec: spec(workers(1, 1)),
		steps: func(*testing.T) []step {
			return []step{start(), end(),
				act(Action{Kind: MarkHostBad, Host: "h1"}).then(),
				act(Action{Kind: RelaunchNode, NodeID: "train-worker-0-0", Reason: "node check failed"}).then("Delete train-worker-0-0")}
		},
		states: []NodeState{Failed},
		reason: map[int]string{0: "diagnosis: node check failed after the job ended"},
	}, {
		name: "no pending timeout fires",
		spec: pendingAll,
		steps: func(*testing.T) []step {
			return []step{start(), end(),
				tick().after(time.Hour).then(),
				running("train-worker-0-0", "h").after(2 * time.Hour).then()}
		},
		states: []NodeState{Running, Pending},
		check: func(t *testing.T, m *Manager) {
			if d, ok := m.NextDeadline(); ok {
				t.Errorf("NextDeadline = %v after End, want none", d)
			}
		},
	}, {
		name: "End survives a restore",
		spec: Spec{Job: "train", Groups: []GroupSpec{workers(2, 2)}, PendingTimeout: time.Minute},
		steps: func(t *testing.T) []step {
			return []step{start(), exit("train-worker-0-0", 1).then("Delete train-worker-0-0", "Create train-worker-0-1"),
				end(), reopen(t),
				tick().after(time.Hour).then(),
				exit("train-worker-0-1", 1).after(time.Hour).then("Delete train-worker-0-1"),
				reopen(t),
				exit("train-worker-1-0", 2).after(time.Hour).then("Delete train-worker-1-0")}
		},
		states: []NodeState{Failed, Failed},
		reason: map[int]string{0: "after the job ended", 1: "after the job ended"},
		check: func(t *testing.T, m *Manager) {
			if st := m.Status(); st.Relaunches != 1 || st.Nodes[0].Relaunches != 1 {
				t.Errorf("relaunches %d (rank 0: %d), want 1 from before the end", st.Relaunches, st.Nodes[0].Relaunches)
			}
		},
	}, {
		name: "after the manager failed the job, End still records exits",
		spec: spec(never),
		steps: func(t *testing.T) []step {
			return []step{start(),
				exit("train-worker-0-0", 1).then("Delete train-worker-0-0", "Fail"),
				end(), reopen(t),
				exit("train-worker-1-0", 3).then("Delete train-worker-1-0")} // no second Fail
		},
		wantErr: ErrTooFewNodes,
		states:  []NodeState{Failed, Failed},
		reason:  map[int]string{1: "exited with code 3 after the job ended"},
	}, {
		name: "after the manager failed the job, exits without End are not recorded",
		spec: spec(never),
		steps: func(*testing.T) []step {
			return []step{start(),
				exit("train-worker-0-0", 1).then("Delete train-worker-0-0", "Fail"),
				exit("train-worker-1-0", 3).then()}
		},
		wantErr: ErrTooFewNodes,
		states:  []NodeState{Failed, Pending},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := mustNew(t, tc.spec)
			run(t, m, tc.steps(t)) // each step's commands are checked: no Create after End
			if err := m.Err(); !errors.Is(err, tc.wantErr) || (err == nil) != (tc.wantErr == nil) {
				t.Errorf("Err = %v, want %v", err, tc.wantErr)
			}
			st := m.Status()
			for r, want := range tc.states {
				if got := st.Nodes[r].State; got != want {
					t.Errorf("rank %d: %v, want %v (%s)", r, got, want, st.Nodes[r].Reason)
				}
			}
			for r, want := range tc.reason {
				if got := st.Nodes[r].Reason; !strings.Contains(got, want) {
					t.Errorf("rank %d: reason %q, want it to contain %q", r, got, want)
				}
			}
			if tc.check != nil {
				tc.check(t, m)
			}
		})
	}
}
