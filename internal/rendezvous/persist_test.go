package rendezvous

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestPersistRoundTrip(t *testing.T) {
	// Save after every step of a busy scenario, restore, and check that the
	// restored machine reports the same state and reacts to the rest of the
	// scenario exactly like the original.
	steps := []step{
		join("a").asks(1), join("b"), join("c"), join("d"),
		tick(10 * sec), join("e"), join("f").at(sec), lost("b"),
		join("a"), join("c"), join("d"), join("f"),
		tick(10 * sec), fail("d", 2), join("a"), join("c"),
		join("d"), join("e"), join("f"), succeed("a", 3), lost("a"),
		succeed("c", 3), succeed("d", 3), succeed("e", 3), succeed("f", 3),
	}
	roundTrips(t, cfg(minmax(2, 5)), steps)
}

// TestPersistRoundTripAwaiting: a master restarted while a restart round
// waits for the members of the last world (a live node left out of it
// among the nodes it knows) closes the round as the original does.
func TestPersistRoundTripAwaiting(t *testing.T) {
	roundTrips(t, cfg(), []step{
		join("a"), join("b"), join("c"), tick(10 * sec),
		fail("c", 1).at(sec), join("a"), join("b"), tick(10 * sec),
		fail("a", 2).at(sec), join("b"), join("a"), join("c"),
		fail("b", 4), lost("a"), join("c"), join("b"),
	})
}

// roundTrips plays steps, saves and restores the machine after each, and
// checks that the restored machine reacts to the rest like the original.
func roundTrips(t *testing.T, c Config, steps []step) {
	t.Helper()
	for cut := 0; cut <= len(steps); cut++ {
		orig := runScenario(t, c, steps[:cut])
		data, err := orig.MarshalState()
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(data), `"schema":1`) {
			t.Fatalf("no schema field in %s", data)
		}
		restored, err := Restore(data)
		if err != nil {
			t.Fatalf("cut %d: Restore: %v\n%s", cut, err, data)
		}
		cmpMachines(t, orig, restored)
		again, _ := restored.MarshalState()
		if string(again) != string(data) {
			t.Fatalf("cut %d: re-marshal differs:\n%s\n%s", cut, data, again)
		}
		// Continue both with the rest of the scenario.
		now := t0.Add(time.Hour)
		for _, s := range steps[cut:] {
			now = now.Add(s.after)
			for _, m := range []*Machine{orig, restored} {
				switch s.op {
				case "join":
					m.Join(JoinRequest{NodeID: s.id, RequestedRank: s.rank, LocalWorldSize: 1, Addr: s.id}, now)
				case "lost":
					m.NodeLost(s.id, now)
				case "fail":
					m.WorkerFailed(s.id, s.round, now)
				case "ok":
					m.NodeSucceeded(s.id, s.round, now)
				case "tick":
					m.Tick(now)
				}
			}
			cmpMachines(t, orig, restored)
		}
	}
}

func cmpMachines(t *testing.T, a, b *Machine) {
	t.Helper()
	if diff := cmp.Diff(a.Snapshot(), b.Snapshot()); diff != "" {
		t.Fatalf("snapshots differ (-a +b):\n%s", diff)
	}
	if a.Version() != b.Version() {
		t.Fatalf("versions differ: %d, %d", a.Version(), b.Version())
	}
	da, oka := a.NextDeadline()
	db, okb := b.NextDeadline()
	if oka != okb || !da.Equal(db) {
		t.Fatalf("deadlines differ: %v %v, %v %v", da, oka, db, okb)
	}
	if (a.Err() == nil) != (b.Err() == nil) || a.Err() != nil && a.Err().Error() != b.Err().Error() {
		t.Fatalf("Err differs: %v, %v", a.Err(), b.Err())
	}
}

func TestRestoreFailedJob(t *testing.T) {
	m, _ := New(Config{MinNodes: 1, MaxNodes: 1}, t0)
	m.Join(JoinRequest{NodeID: "a", RequestedRank: -1, LocalWorldSize: 1, Addr: "h"}, t0)
	m.WorkerFailed("a", 1, t0)
	data, _ := m.MarshalState()
	r, err := Restore(data)
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(r.Err(), ErrRestartsExhausted) || r.Err().Error() != m.Err().Error() {
		t.Fatalf("restored Err = %v, want %v", r.Err(), m.Err())
	}
}

func TestRestoreRejects(t *testing.T) {
	m, _ := New(cfg(), t0)
	m.Join(JoinRequest{NodeID: "a", RequestedRank: -1, LocalWorldSize: 1, Addr: "h"}, t0)
	m.Join(JoinRequest{NodeID: "b", RequestedRank: -1, LocalWorldSize: 1, Addr: "h"}, t0)
	m.Tick(t0.Add(time.Minute))
	good, _ := m.MarshalState()
	tests := []struct {
		name      string
		old, new  string
		wantErr   error
		wantInMsg string
	}{
		{"unknown schema", `"schema":1`, `"schema":2`, ErrBadState, "schema 2"},
		{"missing schema", `"schema":1,`, ``, ErrBadState, "schema 0"},
		{"unknown field", `"schema":1,`, `"schema":1,"extra":true,`, ErrBadState, "extra"},
		{"bad config", `"min_nodes":2`, `"min_nodes":0`, ErrInvalidConfig, "MinNodes"},
		{"bad duration", `"last_call":"10s"`, `"last_call":"ten"`, ErrBadState, "duration"},
		{"bad job", `"job":"Running"`, `"job":"Sleeping"`, ErrBadState, "Sleeping"},
		{"failed without reason", `"job":"Running"`, `"job":"Failed"`, ErrBadState, "failure_kind"},
		{"round zero", `"round":1`, `"round":0`, ErrBadState, "round 0"},
		{"duplicate node", `{"id":"b"`, `{"id":"a"`, ErrBadState, "twice"},
		{"member not a node", `"node_id":"b"`, `"node_id":"z"`, ErrBadState, "not a known node"},
		{"bad offset", `"rank_offset":1`, `"rank_offset":7`, ErrBadState, "offset"},
		{"shared rank", `"rank":1,"holds_rank":true`, `"rank":0,"holds_rank":true`, ErrBadState, "rank 0"},
		{"truncated", `}`, ``, ErrBadState, ""},
		{"trailing data", `"world_round":1}`, `"world_round":1}{}`, ErrBadState, "after"},
		{"member also joined", `"addr":"h"},{"id":"b"`, `"addr":"h","joined":true},{"id":"b"`, ErrBadState, "joined"},
		{"succeeded without successes", `"job":"Running"`, `"job":"Succeeded"`, ErrBadState, "succeeded"},
		{"world below min", `"min_nodes":2`, `"min_nodes":3`, ErrBadState, "does not fit"},
		{"open round owns the world", `"open":false`, `"open":true`, ErrBadState, "world of round 1"},
		{"rank out of range", `"rank":1,`, `"rank":99,`, ErrBadState, "rank 99"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := strings.Replace(string(good), tt.old, tt.new, 1)
			if data == string(good) {
				t.Fatalf("replacement %q not found in %s", tt.old, good)
			}
			_, err := Restore([]byte(data))
			if !errors.Is(err, tt.wantErr) || !strings.Contains(err.Error(), tt.wantInMsg) {
				t.Fatalf("Restore = %v, want %v mentioning %q", err, tt.wantErr, tt.wantInMsg)
			}
		})
	}
}

// TestSucceedNodes: the node manager's verdict ends a job nobody joined as
// succeeded, survives a restore, and changes nothing once the job is over.
func TestSucceedNodes(t *testing.T) {
	m, _ := New(Config{MinNodes: 1, MaxNodes: 6}, t0)
	m.SucceedNodes()
	if s := m.Status(); s.Job != Succeeded || m.Err() != nil {
		t.Fatalf("after SucceedNodes: job %v, err %v; want Succeeded", s.Job, m.Err())
	}
	data, _ := m.MarshalState()
	r, err := Restore(data)
	if err != nil {
		t.Fatal(err)
	}
	if r.Status().Job != Succeeded {
		t.Fatalf("restored job %v, want Succeeded", r.Status().Job)
	}
	r.FailNodes("late")
	if r.Status().Job != Succeeded {
		t.Errorf("a failure after the success changed the job to %v", r.Status().Job)
	}
	f, _ := New(Config{MinNodes: 1, MaxNodes: 1}, t0)
	f.Cancel("stopped")
	f.SucceedNodes()
	if f.Status().Job != Failed {
		t.Errorf("SucceedNodes changed a cancelled job to %v", f.Status().Job)
	}
}
