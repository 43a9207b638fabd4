package nodemanager

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// pendingSpec is a job of MIN..3 workers whose nodes time out pending
// after 5 minutes, under strategy.
func pendingSpec(min int, strategy PendingStrategy) Spec {
	return Spec{Job: "train", Groups: []GroupSpec{workers(min, 3)}, PendingTimeout: 5 * time.Minute, PendingStrategy: strategy}
}

// TestGiveUpPendingNode: a node pending past the timeout, in a group that
// runs without it, is deleted as a planned removal that spends no relaunch
// and blames no failure; the rendezvous no longer expects it, the job does
// not fail, and its capacity is what was placed.
func TestGiveUpPendingNode(t *testing.T) {
	m := mustNew(t, pendingSpec(2, PendingNecessary))
	if got := m.Capacity("worker"); got != -1 {
		t.Fatalf("Capacity before any timeout = %d, want -1", got)
	}
	cmds := run(t, m, []step{
		start(), running("train-worker-0-0", "h"), running("train-worker-1-0", "h"),
		tick().after(5*time.Minute - 1).then(),
		tick().after(5 * time.Minute).then("Delete train-worker-2-0"),
		running("train-worker-2-0", "h").after(6 * time.Minute).then(), // too late: its events are ignored
	})
	c := cmds[len(cmds)-1]
	if !c.Removed || !c.GivenUp || c.Nodes != 2 || c.Cause != "" {
		t.Errorf("command %+v: want a planned removal (Removed, GivenUp) with no relaunch cause", c)
	}
	if want := "node train-worker-2-0 pended 5m0s past its 5m0s pending timeout: given up; the job runs with 2 nodes"; c.Reason != want {
		t.Errorf("reason %q, want %q", c.Reason, want)
	}
	if err := m.Err(); err != nil {
		t.Errorf("Err = %v, want the job to go on", err)
	}
	if live, desired, capacity := m.Live(), m.Desired("worker"), m.Capacity("worker"); live != 2 || desired != 2 || capacity != 2 {
		t.Errorf("Live %d, Desired %d, Capacity %d; want 2, 2, 2", live, desired, capacity)
	}
	st := m.Status()
	if st.Relaunches != 0 || st.RelaunchCauses != nil {
		t.Errorf("relaunches %d by cause %v, want none spent", st.Relaunches, st.RelaunchCauses)
	}
	if n := st.Nodes[2]; n.State != Removed || n.Reason != c.Reason || !strings.Contains(n.LastExit, "given up") {
		t.Errorf("rank 2: %+v, want Removed, saying why", n)
	}
	// A scale up brings the rank back as a new node, still without
	// spending its relaunch budget.
	up, err := m.Scale("worker", 3, "probe", t0.Add(7*time.Minute))
	if err != nil || len(up) != 1 || up[0].NodeID != "train-worker-2-1" || up[0].Kind != CreateNode || up[0].Cause != "" {
		t.Fatalf("Scale(3) = %v, %v; want Create train-worker-2-1", up, err)
	}
	if st := m.Status(); st.Relaunches != 0 || m.Live() != 3 {
		t.Errorf("after the scale up: relaunches %d, live %d; want 0, 3", st.Relaunches, m.Live())
	}
}

// TestPendingBelowMin: giving up the node that would leave the group
// fewer than MinNodes keeps each strategy's behaviour.
func TestPendingBelowMin(t *testing.T) {
	tests := []struct {
		name    string
		spec    Spec
		steps   []step
		wantErr error
		states  []NodeState
	}{{
		name: "necessary: the job fails",
		spec: pendingSpec(3, PendingNecessary),
		steps: []step{start(), running("train-worker-0-0", "h"), running("train-worker-1-0", "h"),
			tick().after(5 * time.Minute).then("Fail")},
		wantErr: ErrPendingTimeout,
		states:  []NodeState{Running, Running, Pending},
	}, {
		name: "all: the job fails even above its minimum",
		spec: pendingSpec(1, PendingAll),
		steps: []step{start(), running("train-worker-0-0", "h"), running("train-worker-1-0", "h"),
			tick().after(5 * time.Minute).then("Fail")},
		wantErr: ErrPendingTimeout,
		states:  []NodeState{Running, Running, Pending},
	}, {
		name: "skip: waits below its minimum, gives up once it can",
		spec: pendingSpec(2, PendingSkip),
		steps: []step{start(), running("train-worker-0-0", "h"),
			tick().after(5 * time.Minute).then(), // ranks 1 and 2 late, one ready: wait
			tick().after(time.Hour).then(),       // still waiting
			running("train-worker-1-0", "h").after(2 * time.Hour).then("Delete train-worker-2-0"), // two ready now
		},
		states: []NodeState{Running, Running, Removed},
	}, {
		name: "skip: waits for a critical node, gives up the others",
		spec: func() Spec { s := pendingSpec(1, PendingSkip); s.Groups[0].CriticalRanks = []int{1}; return s }(),
		steps: []step{start(), running("train-worker-0-0", "h"),
			tick().after(5 * time.Minute).then("Delete train-worker-2-0")},
		states: []NodeState{Running, Pending, Removed},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := mustNew(t, tc.spec)
			run(t, m, tc.steps)
			if err := m.Err(); !errors.Is(err, tc.wantErr) || (err == nil) != (tc.wantErr == nil) {
				t.Errorf("Err = %v, want %v", err, tc.wantErr)
			}
			var states []NodeState
			for _, n := range m.Status().Nodes {
				states = append(states, n.State)
			}
			if diff := cmp.Diff(tc.states, states); diff != "" {
				t.Errorf("states (-want +got):\n%s", diff)
			}
			if m.Status().Relaunches != 0 {
				t.Errorf("relaunches %d, want none", m.Status().Relaunches)
			}
		})
	}
}

// TestCapacityRetry: the capacity a timeout showed is forgotten after
// PendingRetry (default 10 min), at a deadline the driver is told of; a
// negative PendingRetry never forgets it.
func TestCapacityRetry(t *testing.T) {
	for _, tc := range []struct {
		retry, forgotten time.Duration // forgotten 0: never
	}{{0, DefaultPendingRetry}, {time.Minute, time.Minute}, {-1, 0}} {
		sp := pendingSpec(1, PendingNecessary)
		sp.PendingRetry = tc.retry
		m := mustNew(t, sp)
		gaveUp := 5 * time.Minute
		run(t, m, []step{start(), running("train-worker-0-0", "h"),
			tick().after(gaveUp).then("Delete train-worker-1-0", "Delete train-worker-2-0")})
		if got := m.Capacity("worker"); got != 1 {
			t.Fatalf("retry %v: Capacity = %d, want 1", tc.retry, got)
		}
		d, ok := m.NextDeadline()
		if tc.forgotten == 0 {
			m.Tick(t0.Add(100 * time.Hour))
			if ok || m.Capacity("") != 1 {
				t.Errorf("retry %v: deadline %v (%v), capacity %d; want none, 1", tc.retry, d, ok, m.Capacity(""))
			}
			continue
		}
		if want := t0.Add(gaveUp + tc.forgotten); !ok || !d.Equal(want) {
			t.Errorf("retry %v: NextDeadline = %v, %v; want %v", tc.retry, d, ok, want)
		}
		m.Tick(d.Add(-1))
		if got := m.Capacity("worker"); got != 1 {
			t.Errorf("retry %v: Capacity just before the retry = %d, want 1", tc.retry, got)
		}
		m.Tick(d)
		if got := m.Capacity("worker"); got != -1 {
			t.Errorf("retry %v: Capacity after the retry = %d, want -1", tc.retry, got)
		}
	}
	if got := mustNew(t, pendingSpec(1, PendingNecessary)).Capacity("other"); got != -1 {
		t.Errorf("Capacity of an unknown group = %d, want -1", got)
	}
}

// TestGiveUpMiddleRank: a relaunched rank that pends while higher ranks
// run is given up; scaling keeps counting nodes, not ranks: asking for
// the count the group has changes nothing, a scale down removes the
// highest rank and keeps the given-up one, a scale up brings it back first.
func TestGiveUpMiddleRank(t *testing.T) {
	m := mustNew(t, pendingSpec(1, PendingNecessary))
	run(t, m, []step{start(), running("train-worker-0-0", "h"), running("train-worker-1-0", "h"), running("train-worker-2-0", "h"),
		exit("train-worker-1-0", 1).after(time.Minute).then("Delete train-worker-1-0", "Create train-worker-1-1"),
		tick().after(6 * time.Minute).then("Delete train-worker-1-1"),
		scale("worker", 2).after(7 * time.Minute).then(),
		scale("worker", 1).after(8 * time.Minute).then("Delete train-worker-2-0"),
		scale("worker", 2).after(9 * time.Minute).then("Create train-worker-1-2"),
		scale("worker", 3).after(10 * time.Minute).then("Create train-worker-2-1"),
	})
	if got := m.Desired("worker"); got != 3 || m.Live() != 3 {
		t.Errorf("Desired %d, Live %d; want 3, 3", got, m.Live())
	}
	if st := m.Status(); st.Relaunches != 1 {
		t.Errorf("relaunches %d, want the one exit's", st.Relaunches)
	}
}

// TestGiveUpPersists: the given-up rank and the capacity survive a
// restore, which then answers as the manager that kept running; a bad
// saved capacity is refused.
func TestGiveUpPersists(t *testing.T) {
	sp := pendingSpec(1, PendingNecessary)
	sp.PendingRetry = time.Hour
	steps := []step{start(), running("train-worker-0-0", "h"), running("train-worker-1-0", "h"),
		tick().after(5 * time.Minute).then("Delete train-worker-2-0"),
		tick().after(time.Hour).then(),
		scale("worker", 3).after(5*time.Minute + time.Hour).then("Create train-worker-2-1"),
	}
	orig := mustNew(t, sp)
	want := run(t, orig, steps)
	m := mustNew(t, sp)
	head := run(t, m, steps[:5])
	data, err := m.MarshalState()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), `"capacity":[{"nodes":2`) {
		t.Fatalf("saved state lacks the capacity: %s", data)
	}
	r, err := Restore(data)
	if err != nil {
		t.Fatal(err)
	}
	if r.Capacity("worker") != 2 || r.Desired("worker") != 2 || r.Live() != 2 {
		t.Errorf("restored: capacity %d, desired %d, live %d; want 2, 2, 2", r.Capacity("worker"), r.Desired("worker"), r.Live())
	}
	if d1, _ := m.NextDeadline(); !cmp.Equal(d1, func() time.Time { d, _ := r.NextDeadline(); return d }()) {
		t.Errorf("restored NextDeadline differs from %v", d1)
	}
	if diff := cmp.Diff(m.Status(), r.Status()); diff != "" {
		t.Errorf("status (-orig +restored):\n%s", diff)
	}
	tail := run(t, r, steps[5:])
	if diff := cmp.Diff(want, append(head, tail...)); diff != "" {
		t.Errorf("commands (-uninterrupted +restored):\n%s", diff)
	}
	if r.Capacity("worker") != -1 {
		t.Errorf("capacity %d after PendingRetry, want -1", r.Capacity("worker"))
	}
	for _, bad := range []struct{ from, to string }{
		{`"capacity":[{"nodes":2`, `"capacity":[{"nodes":9`},
		{`"capacity":[{"nodes":2`, `"capacity":[{"nodes":-1,"at":"2026-01-01T00:00:00Z"},{"nodes":2`},
		{`"capacity":[{"nodes":2,"at":"2026-01-01T00:05:00Z"}`, `"capacity":[{"nodes":2}`},
	} {
		d := strings.Replace(string(data), bad.from, bad.to, 1)
		if d == string(data) {
			t.Fatalf("%q not in %s", bad.from, data)
		}
		if _, err := Restore([]byte(d)); !errors.Is(err, ErrBadState) {
			t.Errorf("Restore with %s: %v, want ErrBadState", bad.to, err)
		}
	}
}
