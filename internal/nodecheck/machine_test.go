package nodecheck

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// fault is how a simulated faulty node behaves.
type fault int

const (
	noFault   fault = iota
	crash           // its check program crashes: it reports a failure of its own
	silent          // its network is cut: it never reports, its peers fail
	ambiguous       // its peers and it see a broken collective; alone it passes
)

// cluster simulates the agents: base times per node, one faulty node.
type cluster struct {
	times map[string]time.Duration
	bad   string
	kind  fault
	// first overrides times in stage 1 (noise that stage 2 does not see).
	first map[string]time.Duration
}

// run reports every group of the running stage as the agents would.
func (cl cluster) run(t *testing.T, m *Machine, now time.Time) {
	t.Helper()
	world, stage, _ := m.Tasks("")
	c := m.check
	for _, g := range c.Groups[c.Stage-1] {
		var slowest time.Duration
		hasBad := false
		for _, n := range g.Nodes {
			t := cl.times[n]
			if f, ok := cl.first[n]; ok && c.Stage == 1 {
				t = f
			}
			slowest = max(slowest, t)
			hasBad = hasBad || n == cl.bad
		}
		failed := hasBad && (cl.kind != ambiguous || len(g.Nodes) > 1)
		for _, n := range g.Nodes {
			r := Result{OK: !failed, Elapsed: slowest}
			if n == cl.bad && failed {
				if cl.kind == silent {
					continue
				}
				r.Local = cl.kind == crash
			}
			if c.Done || c.World != world || c.Stage != stage {
				return // the stage ended early (a failed group decides it)
			}
			if err := m.Report(world, stage, g.ID, n, r, now); err != nil {
				t.Fatalf("report %s group %d stage %d: %v", n, g.ID, stage, err)
			}
		}
	}
}

// drive runs a whole check and returns the verdicts by node.
func drive(t *testing.T, m *Machine, cl cluster, nodes []string) map[string]Verdict {
	t.Helper()
	now := t0
	if !m.Start(1, nodes, now) {
		t.Fatal("the check did not start")
	}
	for i := 0; i < 4 && !m.check.Done; i++ {
		stage := m.check.Stage
		cl.run(t, m, now)
		if !m.check.Done && m.check.Stage == stage {
			d, _ := m.NextDeadline()
			now = d
			m.Tick(now)
		}
	}
	if !m.check.Done {
		t.Fatal("the check did not finish within two stages")
	}
	out := map[string]Verdict{}
	for _, v := range m.Status().Verdicts {
		out[v.Node] = v
	}
	return out
}

func names(n int) []string {
	ns := make([]string, n)
	for i := range ns {
		ns[i] = fmt.Sprintf("n%d", i)
	}
	return ns
}

func evenTimes(nodes []string, d time.Duration) map[string]time.Duration {
	ts := map[string]time.Duration{}
	for _, n := range nodes {
		ts[n] = d
	}
	return ts
}

func TestNeighbours(t *testing.T) {
	tests := []struct {
		n    int
		want [][]string
	}{
		{1, [][]string{{"n0"}}},
		{2, [][]string{{"n0", "n1"}}},
		{3, [][]string{{"n0", "n1", "n2"}}},
		{4, [][]string{{"n0", "n1"}, {"n2", "n3"}}},
		{5, [][]string{{"n0", "n1"}, {"n2", "n3", "n4"}}},
	}
	for _, tt := range tests {
		var got [][]string
		for _, g := range neighbours(names(tt.n)) {
			got = append(got, g.Nodes)
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("neighbours(%d) (-want +got):\n%s", tt.n, diff)
		}
	}
}

func TestIsolatesTheFaultyNode(t *testing.T) {
	tests := []struct {
		name   string
		n      int
		bad    string
		kind   fault
		faulty []string
		stages int
	}{
		{"healthy", 4, "", noFault, nil, 1},
		{"crash in a pair", 4, "n1", crash, []string{"n1"}, 2},
		{"network cut", 4, "n2", silent, []string{"n2"}, 2},
		{"broken collective", 6, "n5", ambiguous, []string{"n5"}, 2},
		{"crash in the triple", 5, "n3", crash, []string{"n3"}, 2},
		{"ambiguous in the triple, 5 nodes", 5, "n4", ambiguous, []string{"n4"}, 2},
		{"two nodes, one crashes", 2, "n0", crash, []string{"n0"}, 2},
		{"two nodes, one cut off", 2, "n1", silent, []string{"n1"}, 2},
		{"two nodes, ambiguous: nobody is blamed", 2, "n1", ambiguous, nil, 2},
		{"one node crashes", 1, "n0", crash, []string{"n0"}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			nodes := names(tt.n)
			m := New(Config{MinNodes: 1})
			got := drive(t, m, cluster{times: evenTimes(nodes, 100*time.Millisecond), bad: tt.bad, kind: tt.kind}, nodes)
			var faulty []string
			for _, n := range nodes {
				if got[n].Kind == Faulty {
					faulty = append(faulty, n)
					if !got[n].Excluded {
						t.Errorf("faulty %s is not excluded", n)
					}
				} else if got[n].Kind != Passed {
					t.Errorf("%s: verdict %s (%s), want passed", n, got[n].Kind, got[n].Reason)
				}
			}
			if diff := cmp.Diff(tt.faulty, faulty); diff != "" {
				t.Errorf("faulty nodes (-want +got):\n%s", diff)
			}
			if s := len(m.check.Groups); s != tt.stages {
				t.Errorf("ran %d stages, want %d", s, tt.stages)
			}
		})
	}
}

// TestRandomFaultNeverBlamesHealthy: for any N and any one faulty node of
// any kind, no healthy node is faulty, and the faulty node is isolated
// whenever the evidence allows (it reports or hides its own failure, or
// four or more nodes give it a partner that passed).
func TestRandomFaultNeverBlamesHealthy(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 2000; i++ {
		n := 1 + r.IntN(16)
		nodes := names(n)
		bad := nodes[r.IntN(n)]
		kind := fault(1 + r.IntN(3))
		times := map[string]time.Duration{}
		for _, x := range nodes {
			times[x] = time.Duration(50+r.IntN(100)) * time.Millisecond
		}
		m := New(Config{MinNodes: 1})
		got := drive(t, m, cluster{times: times, bad: bad, kind: kind}, nodes)
		for _, x := range nodes {
			if x != bad && got[x].Kind != Passed {
				t.Fatalf("n=%d bad=%s kind=%d: healthy %s got %s (%s)", n, bad, kind, x, got[x].Kind, got[x].Reason)
			}
		}
		mustFind := kind != ambiguous || n >= 4
		if mustFind && got[bad].Kind != Faulty {
			t.Fatalf("n=%d bad=%s kind=%d: the faulty node got %s (%s)", n, bad, kind, got[bad].Kind, got[bad].Reason)
		}
	}
}

func TestStraggler(t *testing.T) {
	tests := []struct {
		name     string
		n        int
		slow     time.Duration
		exclude  bool
		min      int
		want     Kind
		excluded bool
	}{
		{"slow node", 4, 3 * time.Second, false, 3, Straggler, false},
		{"slow node excluded", 4, 3 * time.Second, true, 3, Straggler, true},
		{"kept for min nodes", 4, 3 * time.Second, true, 4, Straggler, false},
		{"below the ratio", 4, 180 * time.Millisecond, true, 1, Passed, false},
		{"above the ratio, below the floor", 4, 400 * time.Millisecond, true, 1, Passed, false},
		{"odd count", 7, 5 * time.Second, true, 1, Straggler, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			nodes := names(tt.n)
			times := evenTimes(nodes, 100*time.Millisecond)
			times["n1"] = tt.slow
			m := New(Config{ExcludeStragglers: tt.exclude, MinNodes: tt.min})
			got := drive(t, m, cluster{times: times}, nodes)
			if v := got["n1"]; v.Kind != tt.want || v.Excluded != tt.excluded {
				t.Errorf("n1: %s excluded=%v (%s), want %s excluded=%v", v.Kind, v.Excluded, v.Reason, tt.want, tt.excluded)
			}
			for _, x := range nodes[2:] {
				if got[x].Kind != Passed {
					t.Errorf("%s: %s (%s), want passed", x, got[x].Kind, got[x].Reason)
				}
			}
			if got["n0"].Kind != Passed {
				t.Errorf("n1's stage-1 partner n0: %s (%s), want passed", got["n0"].Kind, got["n0"].Reason)
			}
		})
	}
}

func TestRandomStragglerIsTheOnlyOne(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 1000; i++ {
		n := 4 + r.IntN(13)
		nodes := names(n)
		times := map[string]time.Duration{}
		for _, x := range nodes {
			times[x] = time.Duration(80+r.IntN(40)) * time.Millisecond
		}
		slow := nodes[r.IntN(n)]
		times[slow] = time.Duration(2+r.IntN(5)) * time.Second
		got := drive(t, New(Config{ExcludeStragglers: true, MinNodes: 1}), cluster{times: times}, nodes)
		for _, x := range nodes {
			want := Passed
			if x == slow {
				want = Straggler
			}
			if got[x].Kind != want || got[x].Excluded != (x == slow) {
				t.Fatalf("n=%d slow=%s: %s got %s excluded=%v (%s)", n, slow, x, got[x].Kind, got[x].Excluded, got[x].Reason)
			}
		}
	}
}

func TestPassedWorldIsNotCheckedAgain(t *testing.T) {
	nodes := names(4)
	m := New(Config{})
	drive(t, m, cluster{times: evenTimes(nodes, time.Millisecond)}, nodes)
	if m.Start(2, nodes, t0) {
		t.Error("a world of nodes that passed was checked again")
	}
	if !m.Start(3, append(nodes[:3:3], "replacement"), t0) {
		t.Error("a world with a new node was not checked")
	}
}

func TestStaleReports(t *testing.T) {
	m := New(Config{})
	m.Start(5, names(4), t0)
	for _, tt := range []struct {
		world, stage, group int
		node                string
	}{{4, 1, 0, "n0"}, {5, 2, 0, "n0"}, {5, 1, 1, "n0"}, {5, 1, 9, "n0"}} {
		if err := m.Report(tt.world, tt.stage, tt.group, tt.node, Result{OK: true}, t0); err == nil {
			t.Errorf("report %+v accepted", tt)
		}
	}
	m.Cancel()
	if _, ok := m.Running(); ok {
		t.Error("a cancelled check still runs")
	}
}

// TestReplay: a machine restored from its state at any point ends with the
// same verdicts as one that ran through.
func TestReplay(t *testing.T) {
	nodes := names(6)
	cl := cluster{times: evenTimes(nodes, 100*time.Millisecond), bad: "n3", kind: crash}
	want := drive(t, New(Config{MinNodes: 2}), cl, nodes)

	m := New(Config{MinNodes: 2})
	m.Start(1, nodes, t0)
	b, err := m.MarshalState()
	if err != nil {
		t.Fatal(err)
	}
	m2, err := Restore(b)
	if err != nil {
		t.Fatal(err)
	}
	now := t0
	for !m2.check.Done {
		stage := m2.check.Stage
		cl.run(t, m2, now)
		if b, err = m2.MarshalState(); err != nil {
			t.Fatal(err)
		}
		if m2, err = Restore(b); err != nil {
			t.Fatal(err)
		}
		if !m2.check.Done && m2.check.Stage == stage {
			now, _ = m2.NextDeadline()
			m2.Tick(now)
		}
	}
	got := map[string]Verdict{}
	for _, v := range m2.Status().Verdicts {
		got[v.Node] = v
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("verdicts after restores (-through +restored):\n%s", diff)
	}
	if _, err := Restore([]byte(`{"check":{"stage":3,"groups":[[]]}}`)); err == nil {
		t.Error("a state with stage 3 restored")
	}
}

// TestNoisyFastNodeIsNoStraggler: a node of a fast stage-1 group whose
// first time was noisy, paired in stage 2 with the straggler, is not one.
func TestNoisyFastNodeIsNoStraggler(t *testing.T) {
	nodes := names(4)
	times := evenTimes(nodes, 800*time.Millisecond)
	times["n2"] = 4 * time.Second
	cl := cluster{times: times, first: map[string]time.Duration{"n0": 1900 * time.Millisecond}}
	got := drive(t, New(Config{ExcludeStragglers: true, MinNodes: 3}), cl, nodes)
	for _, n := range nodes {
		want := Passed
		if n == "n2" {
			want = Straggler
		}
		if got[n].Kind != want {
			t.Errorf("%s: %s (%s), want %s", n, got[n].Kind, got[n].Reason, want)
		}
	}
}
