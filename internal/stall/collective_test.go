package stall

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestWaitStragglers checks the rule from collective timing: in a
// synchronous job whose nodes' wall and busy times per step are the same
// (a node slowed by a CPU quota or a slow link uses no more CPU per step),
// the node the others wait for computes longest between collectives.
func TestWaitStragglers(t *testing.T) {
	type sample struct {
		node                         string
		wall, busy, compute, waiting float64
	}
	tests := []struct {
		name    string
		samples []sample
		want    []string
		why     string
	}{
		{"throttled node", []sample{{"a", 0.85, 0.08, 0.08, 0.77}, {"b", 0.85, 0.083, 0.09, 0.76}, {"c", 0.85, 0.081, 0.80, 0.05}},
			[]string{"c"}, "c computes 0.800s per step between collectives, 9.4x the others' median 0.085s: the others wait for it, 0.765s per step in their collectives against its 0.050s (over the last 10 samples; threshold 1.5x)"},
		{"healthy nodes", []sample{{"a", 0.1, 0.08, 0.07, 0.03}, {"b", 0.1, 0.08, 0.08, 0.02}, {"c", 0.1, 0.08, 0.09, 0.01}}, nil, ""},
		{"two nodes", []sample{{"a", 0.5, 0.1, 0.1, 0.4}, {"b", 0.5, 0.1, 0.45, 0.05}}, []string{"b"}, ""},
		{"the others untimed: nothing to compare", []sample{{"a", 0.5, 0.1, -1, 0}, {"b", 0.5, 0.1, 0.45, 0.05}}, nil, ""},
		// The slow node's reports lag (its agent shares its throttled CPU):
		// the others' recent samples show them waiting for it, its own
		// predate the slowdown. Waiting is not straggling.
		{"the waiting nodes' wall time is not theirs", []sample{{"a", 0.0296, 0.0044, 0.0057, 0.0239}, {"b", 0.0298, 0.0042, 0.0056, 0.0242},
			{"c", 0.0100, 0.0037, 0.0045, 0.0058}}, nil, ""},
		{"the waiting nodes' wall time is not theirs, by far", []sample{{"a", 0.0994, 0.0063, 0.0076, 0.0919}, {"b", 0.0288, 0.0049, 0.0142, 0.0146},
			{"c", 0.0987, 0.0064, 0.0074, 0.0911}}, nil, ""},
		{"under the minimum excess", []sample{{"a", 0.01, 0.01, 0.002, 0.008}, {"b", 0.01, 0.01, 0.008, 0.002}}, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := NewWindow(StragglerConfig{})
			for i := range 5 {
				for _, s := range tt.samples {
					w.Add(s.node, s.wall, s.busy, int64(i))
					if s.compute >= 0 {
						w.AddWait(s.node, s.compute, s.waiting)
					}
				}
			}
			got, why := w.Stragglers()
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Fatalf("stragglers (-want +got):\n%s\nwhy: %s", diff, why)
			}
			if tt.why != "" && why != tt.why {
				t.Errorf("why:\n got %s\nwant %s", why, tt.why)
			}
			for _, n := range w.Nodes() {
				if n.Straggler != slices.Contains(tt.want, n.Node) {
					t.Errorf("node %s: straggler %v, want %v", n.Node, n.Straggler, !n.Straggler)
				}
			}
		})
	}
}

func TestLocate(t *testing.T) {
	in := func(rank int32, node, op string, seq int64, done bool) RankCollective {
		return RankCollective{Rank: rank, Node: node, Collective: Collective{Op: op, Bytes: 8640, Group: "world", Seq: seq, Done: done}}
	}
	tests := []struct {
		name   string
		ranks  []RankCollective
		ok     bool
		want   string
		others int
	}{
		{"a rank in user code before the collective", []RankCollective{
			in(0, "n0", "all_reduce", 15, false), in(1, "n0", "all_reduce", 15, false),
			in(2, "n1", "all_reduce", 15, false), in(3, "n1", "all_reduce", 14, true)}, true,
			"ranks 0-2 wait in all_reduce #15 (group world, 8.4 KiB); rank 3 (n1) never arrived: it last completed all_reduce #14 (group world, 8.4 KiB)", 0},
		{"a rank stuck in an earlier collective", []RankCollective{
			in(0, "n0", "barrier", 9, false), in(2, "n1", "broadcast", 7, false)}, true,
			"rank 0 waits in barrier #9 (group world, 8.4 KiB); rank 2 (n1) never arrived: it waits in broadcast #7 (group world, 8.4 KiB)", 0},
		{"every rank completed the same collective: the hang is elsewhere", []RankCollective{
			in(0, "n0", "all_reduce", 15, true), in(1, "n1", "all_reduce", 15, true)}, false, "", 0},
		{"every rank in the same collective: nobody missing", []RankCollective{
			in(0, "n0", "all_reduce", 15, false), in(1, "n1", "all_reduce", 15, false)}, false, "", 0},
		{"another group's ranks are others", []RankCollective{
			in(0, "n0", "all_reduce", 15, false), in(1, "n1", "all_reduce", 12, true),
			{Rank: 2, Node: "n1", Collective: Collective{Op: "broadcast", Group: "ranks 2,3", Seq: 1}}}, true,
			"rank 0 waits in all_reduce #15 (group world, 8.4 KiB); rank 1 (n1) never arrived: it last completed all_reduce #12 (group world, 8.4 KiB)", 1},
		{"a rank that issued no collective is among the others", []RankCollective{
			in(0, "n0", "all_reduce", 2, false), in(1, "n1", "all_reduce", 1, true), {Rank: 2, Node: "n1", Step: DDPStep{Group: "world", Forwards: 3}}}, true,
			"rank 0 waits in all_reduce #2 (group world, 8.4 KiB); rank 1 (n1) never arrived: it last completed all_reduce #1 (group world, 8.4 KiB)", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, ok := Locate(tt.ranks)
			if ok != tt.ok {
				t.Fatalf("Locate ok = %v, want %v: %+v", ok, tt.ok, l)
			}
			if !ok {
				return
			}
			if got := l.String(); got != tt.want {
				t.Errorf("location:\n got %s\nwant %s", got, tt.want)
			}
			if len(l.Others) != tt.others {
				t.Errorf("others %v, want %d", l.Others, tt.others)
			}
		})
	}
}

// TestMatmulThroughput: a node's GPU matmul throughput is its operations
// over its kernel seconds across the window's samples, the oldest dropped;
// a node without GPU timing has none.
func TestMatmulThroughput(t *testing.T) {
	w := NewWindow(StragglerConfig{Window: 3})
	w.Add("cpu", 0.1, 0.1, 1)
	w.Add("gpu", 0.1, 0.1, 1)
	w.AddMatmul("gpu", 100e12, 100) // 1 TFLOPS: dropped from the window below
	for range 3 {
		w.AddMatmul("gpu", 30e12, 1) // 30 TFLOPS
	}
	got := map[string]float64{}
	for _, n := range w.Nodes() {
		got[n.Node] = n.MatmulTFLOPS
	}
	if want := map[string]float64{"cpu": 0, "gpu": 30}; !cmp.Equal(got, want) {
		t.Errorf("matmul TFLOPS %v, want %v", got, want)
	}
}

// TestLinkStragglers checks the rule from the nodes' links: in a
// synchronous job whose nodes compute and wait alike (a slow link costs no
// CPU), the node every busy connection of which has a long round trip,
// while the others have short ones between them, is behind a slow link.
func TestLinkStragglers(t *testing.T) {
	type sample struct {
		node string
		link float64 // -1: no link samples
	}
	tests := []struct {
		name    string
		samples []sample
		want    []string
		why     string
	}{
		{"slow link", []sample{{"a", 0.0004}, {"b", 0.0005}, {"c", 0.031}}, []string{"c"},
			"c's busy connections to the other nodes take 31.0 ms per round trip at best, 68.9x the others' median 0.5 ms: a slow link, which the others wait for in their collectives (over the last 10 samples; threshold 1.5x)"},
		{"healthy links", []sample{{"a", 0.0004}, {"b", 0.0009}, {"c", 0.0006}, {"d", 0.0005}}, nil, ""},
		// Two nodes share their one link: whose it is cannot be told.
		{"two nodes", []sample{{"a", 0.0004}, {"b", 0.030}}, nil, ""},
		{"the others without link samples", []sample{{"a", -1}, {"b", -1}, {"c", 0.030}}, nil, ""},
		{"one other with link samples", []sample{{"a", -1}, {"b", 0.0004}, {"c", 0.030}}, nil, ""},
		{"under the minimum excess", []sample{{"a", 0.0001}, {"b", 0.0001}, {"c", 0.0015}}, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := NewWindow(StragglerConfig{})
			for i := range 5 {
				for _, s := range tt.samples {
					w.Add(s.node, 0.5, 0.1, int64(i))
					w.AddWait(s.node, 0.1, 0.4)
					if s.link >= 0 {
						w.AddLink(s.node, s.link)
					}
				}
			}
			got, why := w.Stragglers()
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Fatalf("stragglers (-want +got):\n%s\nwhy: %s", diff, why)
			}
			if tt.why != "" && why != tt.why {
				t.Errorf("why:\n got %s\nwant %s", why, tt.why)
			}
			for _, n := range w.Nodes() {
				if want := max(tt.samples[slices.IndexFunc(tt.samples, func(s sample) bool { return s.node == n.Node })].link, 0); n.LinkRTT != want {
					t.Errorf("node %s: LinkRTT %v, want %v", n.Node, n.LinkRTT, want)
				}
			}
		})
	}
}
