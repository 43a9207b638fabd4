package nodemanager

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestScenarios(t *testing.T) {
	const gib = 1 << 30
	mem := func(g GroupSpec, b int64) GroupSpec { g.Resources.MemoryBytes = b; return g }
	critical := func(g GroupSpec, r ...int) GroupSpec { g.CriticalRanks = r; return g }
	restarts := func(g GroupSpec, n int) GroupSpec { g.RestartCount = n; return g }
	tests := []struct {
		name    string
		spec    Spec
		steps   []step
		wantErr error    // nil: the job has not failed
		reason  []string // substrings of the failure reason
		check   func(t *testing.T, m *Manager, cmds []Command)
	}{{
		name: "start creates max nodes",
		spec: spec(workers(1, 3)),
		steps: []step{
			start().then("Create train-worker-0-0", "Create train-worker-1-0", "Create train-worker-2-0"),
			start().then(),
		},
	}, {
		name: "relaunch within budget: same rank, relaunch+1, new id, old deleted first",
		spec: spec(workers(2, 2)),
		steps: []step{
			start(), running("train-worker-1-0", "h1"),
			exit("train-worker-1-0", 1).then("Delete train-worker-1-0", "Create train-worker-1-1"),
			running("train-worker-1-1", "h2"),
			lost("train-worker-1-1").then("Delete train-worker-1-1", "Create train-worker-1-2"),
			evicted("train-worker-1-2").then("Create train-worker-1-3"),
		},
		check: func(t *testing.T, m *Manager, cmds []Command) {
			last := cmds[len(cmds)-1].Spec
			if last.Rank != 1 || last.Relaunch != 3 || last.Group != "worker" || last.Job != "train" {
				t.Errorf("relaunch spec %+v", last)
			}
			n := m.Status().Nodes[1]
			if n.Relaunches != 3 || n.State != Pending || !strings.Contains(n.LastExit, "Evicted") {
				t.Errorf("status %+v", n)
			}
		},
	}, {
		name: "budget exhausted with enough nodes left: job continues below max",
		spec: spec(restarts(workers(1, 3), 1)),
		steps: []step{
			start(),
			exit("train-worker-2-0", 1).then("Delete train-worker-2-0", "Create train-worker-2-1"),
			exit("train-worker-2-1", 1).then("Delete train-worker-2-1"),
			exit("train-worker-2-1", 1).then(), // repeat
		},
		check: func(t *testing.T, m *Manager, _ []Command) {
			n := m.Status().Nodes[2]
			if n.State != Failed || !strings.Contains(n.Reason, "budget of 1 is used up") {
				t.Errorf("status %+v", n)
			}
		},
	}, {
		name: "budget exhausted below min: job fails naming the node",
		spec: spec(restarts(workers(3, 3), 2)),
		steps: []step{
			start(),
			exit("train-worker-0-0", 1), exit("train-worker-0-1", 2),
			oom("train-worker-0-2").then("Delete train-worker-0-2", "Fail"),
			running("train-worker-1-0", "h").then(),
		},
		wantErr: ErrTooFewNodes,
		reason:  []string{"train-worker-0-2", "after 2 relaunches", "OOMKilled", "2 usable nodes left, fewer than its minimum 3"},
	}, {
		name: "job-wide relaunch budget",
		spec: Spec{Job: "train", Groups: []GroupSpec{workers(2, 2)}, MaxRelaunches: 1},
		steps: []step{
			start(),
			exit("train-worker-0-0", 1).then("Delete train-worker-0-0", "Create train-worker-0-1"),
			exit("train-worker-1-0", 1).then("Delete train-worker-1-0", "Fail"),
		},
		wantErr: ErrTooFewNodes,
		reason:  []string{"train-worker-1-0", "job's relaunch budget of 1"},
	}, {
		name: "default budget is 3",
		spec: spec(workers(0, 1)),
		steps: []step{
			start(), exit("train-worker-0-0", 1), exit("train-worker-0-1", 1), exit("train-worker-0-2", 1),
			exit("train-worker-0-3", 1).then("Delete train-worker-0-3"),
		},
	}, {
		name: "critical node fails the job at once when its budget is used up",
		spec: spec(critical(restarts(workers(1, 3), -1), 0)),
		steps: []step{
			start(),
			exit("train-worker-1-0", 1).then("Delete train-worker-1-0"),
			exit("train-worker-0-0", 1).then("Delete train-worker-0-0", "Fail"),
		},
		wantErr: ErrCriticalNode,
		reason:  []string{"critical node train-worker-0-0", "budget of 0"},
	}, {
		name: "exit 0 is success, not relaunched, and counts as usable",
		spec: spec(restarts(workers(2, 2), -1)),
		steps: []step{
			start(), running("train-worker-0-0", "h"),
			exit("train-worker-0-0", 0).then(),
			lost("train-worker-0-0").then(),
			exit("train-worker-1-0", 0).then(),
		},
		check: func(t *testing.T, m *Manager, _ []Command) {
			for _, n := range m.Status().Nodes {
				if n.State != Succeeded || n.Relaunches != 0 {
					t.Errorf("status %+v", n)
				}
			}
		},
	}, {
		name: "stale, repeated and unknown events are ignored",
		spec: spec(workers(1, 2)),
		steps: []step{
			start(),
			exit("train-worker-0-0", 1).then("Delete train-worker-0-0", "Create train-worker-0-1"),
			exit("train-worker-0-0", 1).then(),
			evicted("train-worker-0-0").then(),
			running("train-worker-0-0", "h").then(),
			lost("train-worker-0-0").then(),
			act(Action{Kind: RelaunchNode, NodeID: "train-worker-0-0"}).then(),
			exit("other-worker-0-0", 1).then(),
			running("train-worker-0-1", "h2").then(),
			pending("train-worker-0-1").then(),
			running("train-worker-0-1", "h2").then(),
		},
		check: func(t *testing.T, m *Manager, _ []Command) {
			if n := m.Status().Nodes[0]; n.State != Running || n.Host != "h2" || n.Relaunches != 1 {
				t.Errorf("status %+v", n)
			}
		},
	}, {
		name: "pending timeout below min fails the job (default strategy)",
		spec: spec(workers(2, 3)),
		steps: []step{
			start(), running("train-worker-0-0", "h"), running("train-worker-1-0", "h"),
			tick().after(DefaultPendingTimeout).then("Delete train-worker-2-0"), // one late node, two ready: given up
			exit("train-worker-1-0", 1).after(DefaultPendingTimeout+time.Minute).then("Delete train-worker-1-0", "Create train-worker-1-1"),
			tick().after(2*DefaultPendingTimeout + time.Minute).then("Fail"),
		},
		wantErr: ErrPendingTimeout,
		reason:  []string{"train-worker-1-1 pending for more than 15m0s", "leave worker 1 nodes, fewer than its minimum 2"},
	}, {
		name: "pending timeout of a critical node",
		spec: Spec{Job: "train", Groups: []GroupSpec{critical(workers(0, 2), 1)}, PendingTimeout: time.Minute},
		steps: []step{
			start(), running("train-worker-0-0", "h"),
			tick().after(time.Minute - 1).then(),
			running("train-worker-0-0", "h").after(time.Minute).then("Fail"),
		},
		wantErr: ErrPendingTimeout,
		reason:  []string{"critical node train-worker-1-0"},
	}, {
		name: "pending strategy all and skip",
		spec: Spec{Job: "train", Groups: []GroupSpec{workers(0, 2)}, PendingTimeout: time.Minute, PendingStrategy: PendingAll},
		steps: []step{
			start(), running("train-worker-0-0", "h"),
			tick().after(time.Minute).then("Fail"),
		},
		wantErr: ErrPendingTimeout,
		reason:  []string{"train-worker-1-0", "pending strategy: all"},
	}, {
		name:  "pending strategy skip never fails",
		spec:  Spec{Job: "train", Groups: []GroupSpec{workers(2, 2)}, PendingTimeout: time.Minute, PendingStrategy: PendingSkip},
		steps: []step{start(), tick().after(time.Hour).then()},
	}, {
		name: "OOM relaunch with more memory passes the new memory on",
		spec: spec(mem(workers(1, 2), 8*gib)),
		steps: []step{
			start(), running("train-worker-0-0", "h"),
			act(Action{Kind: RelaunchWithMoreMemory, NodeID: "train-worker-0-0", MemoryBytes: 4 * gib, Reason: "less"}).then(),
			act(Action{Kind: RelaunchWithMoreMemory, NodeID: "train-worker-0-0", MemoryBytes: 16 * gib, Reason: "OOMKilled"}).
				then("Delete train-worker-0-0", "Create train-worker-0-1"),
			exit("train-worker-0-1", 1).then("Delete train-worker-0-1", "Create train-worker-0-2"),
		},
		check: func(t *testing.T, m *Manager, cmds []Command) {
			var got []int64
			for _, c := range cmds {
				if c.Kind == CreateNode && c.Spec.Rank == 0 {
					got = append(got, c.Spec.Resources.MemoryBytes/gib)
				}
			}
			if diff := cmp.Diff([]int64{8, 16, 16}, got); diff != "" {
				t.Errorf("rank 0 memory GiB (-want +got):\n%s", diff)
			}
		},
	}, {
		name: "bad hosts are recorded and passed as the avoid list",
		spec: spec(workers(1, 2)),
		steps: []step{
			start(), running("train-worker-0-0", "h2"),
			act(Action{Kind: MarkHostBad, Host: "h2", Reason: "node check"}).then(),
			act(Action{Kind: MarkHostBad, Host: "h1"}).then(),
			act(Action{Kind: MarkHostBad, Host: "h2"}).then(),
			act(Action{Kind: RelaunchNode, NodeID: "train-worker-0-0", Reason: "on a bad host"}).
				then("Delete train-worker-0-0", "Create train-worker-0-1"),
		},
		check: func(t *testing.T, m *Manager, cmds []Command) {
			if diff := cmp.Diff([]string{"h1", "h2"}, cmds[len(cmds)-1].Spec.AvoidHosts); diff != "" {
				t.Errorf("avoid hosts (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]string{"h1", "h2"}, m.Status().BadHosts); diff != "" {
				t.Errorf("status bad hosts (-want +got):\n%s", diff)
			}
			if cmds[0].Spec.AvoidHosts != nil {
				t.Errorf("first node avoids %q", cmds[0].Spec.AvoidHosts)
			}
		},
	}, {
		name: "two groups keep their own ranks and budgets",
		spec: spec(GroupSpec{Name: "chief", MinNodes: 1, MaxNodes: 1, RestartCount: -1, Argv: []string{"a"}}, workers(1, 2)),
		steps: []step{
			start().then("Create train-chief-0-0", "Create train-worker-0-0", "Create train-worker-1-0"),
			exit("train-worker-0-0", 1).then("Delete train-worker-0-0", "Create train-worker-0-1"),
			exit("train-chief-0-0", 1).then("Delete train-chief-0-0", "Fail"),
		},
		wantErr: ErrTooFewNodes,
		reason:  []string{"train-chief-0-0 (chief rank 0)"},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := mustNew(t, tc.spec)
			cmds := run(t, m, tc.steps)
			err := m.Err()
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("Err() = %v, want %v", err, tc.wantErr)
			}
			for _, s := range tc.reason {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("reason %q lacks %q", err, s)
				}
			}
			if st := m.Status(); st.Failed != (err != nil) || (err != nil && st.Reason != err.Error()) {
				t.Errorf("status failed %v %q, Err %v", st.Failed, st.Reason, err)
			}
			if tc.check != nil {
				tc.check(t, m, cmds)
			}
		})
	}
}

func TestNextDeadline(t *testing.T) {
	m := mustNew(t, Spec{Job: "train", Groups: []GroupSpec{workers(0, 2)}, PendingTimeout: time.Minute})
	if _, ok := m.NextDeadline(); ok {
		t.Fatal("deadline before start")
	}
	run(t, m, []step{start(), running("train-worker-0-0", "h"), exit("train-worker-1-0", 1).after(10 * time.Second)})
	if d, ok := m.NextDeadline(); !ok || !d.Equal(t0.Add(70*time.Second)) {
		t.Fatalf("NextDeadline = %v, %v; want t0+70s", d, ok)
	}
	m.Tick(t0.Add(70 * time.Second))
	// The node was given up: the capacity it showed is forgotten after
	// PendingRetry.
	if d, ok := m.NextDeadline(); !ok || !d.Equal(t0.Add(70*time.Second+DefaultPendingRetry)) {
		t.Fatalf("NextDeadline = %v, %v after the only pending node timed out; want t0+70s+%v", d, ok, DefaultPendingRetry)
	}
	m.Tick(t0.Add(70*time.Second + DefaultPendingRetry))
	if d, ok := m.NextDeadline(); ok || m.Capacity("worker") != -1 {
		t.Fatalf("NextDeadline = %v, capacity %d once the capacity is forgotten", d, m.Capacity("worker"))
	}
}

func TestSpecValidate(t *testing.T) {
	tests := []struct {
		name string
		spec Spec
		want []string // substrings of the error; none: valid
	}{
		{"valid", spec(workers(1, 2)), nil},
		{"no job", Spec{Groups: []GroupSpec{workers(1, 2)}}, []string{"Job"}},
		{"bad job", Spec{Job: "Train_1", Groups: []GroupSpec{workers(1, 2)}}, []string{"DNS label"}},
		{"no groups", Spec{Job: "train"}, []string{"Groups is empty"}},
		{"all at once", Spec{Job: "train", MaxRelaunches: -1, PendingStrategy: 7, Groups: []GroupSpec{
			{MinNodes: 3, MaxNodes: 2, RestartCount: 6, CriticalRanks: []int{2}}, workers(1, 1)}},
			[]string{"MaxRelaunches", "PendingStrategy", "MinNodes 3, MaxNodes 2", "RestartCount 6", "critical rank 2", "Argv", `group "worker" listed twice`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.spec.Validate()
			if (err == nil) != (tc.want == nil) {
				t.Fatalf("Validate() = %v", err)
			}
			if err != nil && !errors.Is(err, ErrInvalidSpec) {
				t.Errorf("%v does not wrap ErrInvalidSpec", err)
			}
			for _, s := range tc.want {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q lacks %q", err, s)
				}
			}
		})
	}
}
