package nodemanager

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestScale(t *testing.T) {
	g := workers(1, 3)
	g.Nodes = 2
	g.RestartCount = 1
	m := mustNew(t, spec(g))
	run(t, m, []step{
		start().then("Create train-worker-0-0", "Create train-worker-1-0"),
		running("train-worker-0-0", "h"), running("train-worker-1-0", "h"),
		scale("worker", 2).then(),
		scale("worker", 3).then("Create train-worker-2-0"),
		running("train-worker-2-0", "h"),
		scale("", 2).then("Delete train-worker-2-0"),
		// Late events of the removed node change nothing.
		exit("train-worker-2-0", 143).then(),
		scale("worker", 3).then("Create train-worker-2-1"),
		// Coming back by scaling spent none of rank 2's one relaunch.
		exit("train-worker-2-1", 1).then("Delete train-worker-2-1", "Create train-worker-2-2"),
		scale("worker", 1).then("Delete train-worker-1-0", "Delete train-worker-2-2"),
	})
	var states []string
	for _, n := range m.Status().Nodes {
		states = append(states, n.NodeID+" "+n.State.String())
	}
	want := []string{"train-worker-0-0 Running", "train-worker-1-0 Removed", "train-worker-2-2 Removed"}
	if diff := cmp.Diff(want, states); diff != "" {
		t.Errorf("nodes (-want +got):\n%s", diff)
	}
	if got := m.Status().Relaunches; got != 1 {
		t.Errorf("relaunches %d, want 1 (rescaled nodes are not relaunches)", got)
	}
	if m.Desired("worker") != 1 || m.Live() != 1 {
		t.Errorf("desired %d, live %d; want 1 and 1", m.Desired("worker"), m.Live())
	}
	data, err := m.MarshalState()
	if err != nil {
		t.Fatal(err)
	}
	twin, err := Restore(data)
	if err != nil {
		t.Fatalf("restore a scaled manager: %v", err)
	}
	if cmds, err := twin.Scale("worker", 2, "test", t0); err != nil || len(cmds) != 1 || cmds[0].NodeID != "train-worker-1-1" {
		t.Fatalf("restored Scale(2) = %v, %v; want Create train-worker-1-1", summary(cmds), err)
	}
}

func TestScaleRemovesAsPlanned(t *testing.T) {
	m := mustNew(t, spec(workers(1, 2)))
	run(t, m, []step{start(), running("train-worker-1-0", "h")})
	cmds, err := m.Scale("worker", 1, "kubectl scale", t0)
	if err != nil || len(cmds) != 1 || !cmds[0].Removed || !strings.Contains(cmds[0].Reason, "kubectl scale") {
		t.Fatalf("Scale(1) = %+v, %v; want one Delete marked Removed that says why", cmds, err)
	}
	if m.Err() != nil {
		t.Fatalf("scaling down failed the job: %v", m.Err())
	}
}

func TestScaleRefuses(t *testing.T) {
	g := workers(2, 3)
	g.RestartCount = -1
	tests := []struct {
		name  string
		group string
		n     int
		prep  []step
		want  error
	}{
		{"below min", "worker", 1, nil, ErrBadScale},
		{"zero", "worker", 0, nil, ErrBadScale},
		{"above max", "worker", 4, nil, ErrBadScale},
		{"unknown group", "ps", 2, nil, ErrBadScale},
		{"job failed", "worker", 3, []step{exit("train-worker-0-0", 1), exit("train-worker-1-0", 1)}, ErrJobOver},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := mustNew(t, spec(g))
			run(t, m, append([]step{start()}, tc.prep...))
			cmds, err := m.Scale(tc.group, tc.n, "test", t0)
			if !errors.Is(err, tc.want) || len(cmds) != 0 {
				t.Fatalf("Scale(%q, %d) = %v, %v; want no commands and %v", tc.group, tc.n, summary(cmds), err, tc.want)
			}
		})
	}
}

func TestScaleBeforeStart(t *testing.T) {
	m := mustNew(t, spec(workers(1, 3)))
	if cmds, err := m.Scale("worker", 2, "test", t0); err != nil || len(cmds) != 0 {
		t.Fatalf("Scale before Start = %v, %v", summary(cmds), err)
	}
	run(t, m, []step{start().then("Create train-worker-0-0", "Create train-worker-1-0")})
}

func TestOOMKilledRelaunchesWithMoreMemory(t *testing.T) {
	const gib = int64(1) << 30
	g := workers(1, 1)
	g.Resources.MemoryBytes = 12 * gib
	g.RestartCount = 3
	m := mustNew(t, spec(g))
	cmds := run(t, m, []step{
		start(),
		oom("train-worker-0-0").then("Delete train-worker-0-0", "Create train-worker-0-1"),
		oom("train-worker-0-1").then("Delete train-worker-0-1", "Create train-worker-0-2"),
		exit("train-worker-0-2", 1).then("Delete train-worker-0-2", "Create train-worker-0-3"),
	})
	var got []int64
	for _, c := range cmds {
		if c.Kind == CreateNode {
			got = append(got, c.Spec.Resources.MemoryBytes/gib)
		}
	}
	// Doubling, at most 8 GiB more per relaunch; kept for later relaunches.
	if diff := cmp.Diff([]int64{12, 20, 28, 28}, got); diff != "" {
		t.Errorf("memory GiB per node (-want +got):\n%s", diff)
	}

	// A template's limit (MemoryLimit) grows the same way.
	g = workers(1, 1)
	g.MemoryLimit = 2 * gib
	m = mustNew(t, spec(g))
	cmds = run(t, m, []step{start(), oom("train-worker-0-0").then("Delete train-worker-0-0", "Create train-worker-0-1")})
	if mem := cmds[len(cmds)-1].Spec.Resources.MemoryBytes; mem != 4*gib {
		t.Errorf("memory %d after an OOM kill at a 2 GiB limit, want 4 GiB", mem)
	}
	if cmds[0].Spec.Resources.MemoryBytes != 0 {
		t.Errorf("the first node asks for %d bytes; a template's limit is the platform's to give", cmds[0].Spec.Resources.MemoryBytes)
	}

	// Unknown memory: relaunched as it was.
	m = mustNew(t, spec(workers(1, 1)))
	cmds = run(t, m, []step{start(), oom("train-worker-0-0").then("Delete train-worker-0-0", "Create train-worker-0-1")})
	if mem := cmds[len(cmds)-1].Spec.Resources.MemoryBytes; mem != 0 {
		t.Errorf("memory %d for a node whose memory was unknown, want 0 (the platform's default)", mem)
	}
}

func TestRestoreSchema1(t *testing.T) {
	m := mustNew(t, spec(workers(1, 2)))
	run(t, m, []step{start(), exit("train-worker-0-0", 1)})
	data, err := m.MarshalState()
	if err != nil {
		t.Fatal(err)
	}
	old := strings.Replace(strings.Replace(string(data), `"schema":2`, `"schema":1`, 1), `"desired":[2],`, "", 1)
	r, err := Restore([]byte(old))
	if err != nil {
		t.Fatalf("restore schema 1: %v", err)
	}
	if r.Desired("worker") != 2 || r.Live() != 2 {
		t.Fatalf("schema 1: desired %d, live %d; want 2 and 2", r.Desired("worker"), r.Live())
	}
}

// TestRankRestartCounts: a rank with its own budget (a critical node's
// "RANK:RELAUNCHES") is relaunched that often, the others by the group's.
func TestRankRestartCounts(t *testing.T) {
	g := workers(1, 2)
	g.RestartCount = 1
	g.RestartCounts = map[int]int{0: 2}
	g.CriticalRanks = []int{0}
	m := mustNew(t, spec(g))
	run(t, m, []step{
		start(),
		exit("train-worker-1-0", 1).then("Delete train-worker-1-0", "Create train-worker-1-1"),
		exit("train-worker-1-1", 1).then("Delete train-worker-1-1"),
		exit("train-worker-0-0", 1).then("Delete train-worker-0-0", "Create train-worker-0-1"),
		exit("train-worker-0-1", 1).then("Delete train-worker-0-1", "Create train-worker-0-2"),
		exit("train-worker-0-2", 1).then("Delete train-worker-0-2", "Fail"),
	})
	if !errors.Is(m.Err(), ErrCriticalNode) {
		t.Fatalf("Err = %v, want ErrCriticalNode", m.Err())
	}
	if err := (Spec{Job: "j", Groups: []GroupSpec{{MaxNodes: 1, Argv: []string{"x"}, RestartCounts: map[int]int{3: 1}}}}).Validate(); !errors.Is(err, ErrInvalidSpec) {
		t.Fatalf("Validate of a budget for rank 3 of 1 node = %v, want ErrInvalidSpec", err)
	}
}
