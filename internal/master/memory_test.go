package master

import (
	"strings"
	"testing"

	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/rendezvous"
)

func replicated(local int, steps ...int64) []memorySnapshot {
	var out []memorySnapshot
	for _, s := range steps {
		out = append(out, memorySnapshot{LocalRank: local, Step: s, Rank: 0, WorldSize: 1, Mode: modeReplicated})
	}
	return out
}

func sharded(local, rank, world int, steps ...int64) []memorySnapshot {
	var out []memorySnapshot
	for _, s := range steps {
		out = append(out, memorySnapshot{LocalRank: local, Step: s, Rank: rank, WorldSize: world, Mode: modeSharded})
	}
	return out
}

func concat(parts ...[]memorySnapshot) []memorySnapshot {
	var out []memorySnapshot
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func TestAgreedMemoryStep(t *testing.T) {
	two := []rendezvous.Member{
		{NodeID: "a", LocalWorldSize: 2, RankOffset: 0},
		{NodeID: "b", LocalWorldSize: 2, RankOffset: 2},
	}
	one := []rendezvous.Member{{NodeID: "a", LocalWorldSize: 2, RankOffset: 0}}
	for _, tc := range []struct {
		name   string
		world  []rendezvous.Member
		size   int
		held   map[string][]memorySnapshot
		want   int64
		wantOK bool
	}{
		{"nothing held", two, 4, nil, 0, false},
		{"every rank holds both", two, 4, map[string][]memorySnapshot{
			"a": concat(replicated(0, 23, 24), replicated(1, 23, 24)),
			"b": concat(replicated(0, 24, 23), replicated(1, 23, 24)),
		}, 24, true},
		{"one rank is a step behind", two, 4, map[string][]memorySnapshot{
			"a": concat(replicated(0, 23, 24), replicated(1, 23, 24)),
			"b": concat(replicated(0, 22, 23), replicated(1, 23, 24)),
		}, 23, true},
		{"local rank 0's copy serves the node", two, 4, map[string][]memorySnapshot{
			"a": concat(replicated(0, 23, 24), replicated(1, 23, 24)),
			"b": concat(replicated(0, 23, 24), replicated(1, 21, 22)),
		}, 24, true},
		{"only local rank 0's copy serves the node", two, 4, map[string][]memorySnapshot{
			"a": concat(replicated(0, 23, 24), replicated(1, 23, 24)),
			"b": replicated(1, 23, 24),
		}, 0, false},
		{"a new node holds nothing", two, 4, map[string][]memorySnapshot{
			"a": concat(replicated(0, 23, 24), replicated(1, 23, 24)),
		}, 0, false},
		{"one replicated copy per node", two, 4, map[string][]memorySnapshot{
			"a": replicated(0, 23, 24),
			"b": replicated(0, 22, 23),
		}, 23, true},
		{"a sharded local rank holds nothing", two, 4, map[string][]memorySnapshot{
			"a": concat(sharded(0, 0, 4, 9, 10), sharded(1, 1, 4, 9, 10)),
			"b": sharded(0, 2, 4, 9, 10),
		}, 0, false},
		{"no common step", two, 4, map[string][]memorySnapshot{
			"a": concat(replicated(0, 23, 24), replicated(1, 23, 24)),
			"b": concat(replicated(0, 21, 22), replicated(1, 21, 22)),
		}, 0, false},
		{"sharded, same world", two, 4, map[string][]memorySnapshot{
			"a": concat(sharded(0, 0, 4, 9, 10), sharded(1, 1, 4, 9, 10)),
			"b": concat(sharded(0, 2, 4, 9, 10), sharded(1, 3, 4, 9, 10)),
		}, 10, true},
		{"sharded, ranks moved", two, 4, map[string][]memorySnapshot{
			"a": concat(sharded(0, 2, 4, 10), sharded(1, 3, 4, 10)),
			"b": concat(sharded(0, 0, 4, 10), sharded(1, 1, 4, 10)),
		}, 0, false},
		{"sharded, world shrank", one, 2, map[string][]memorySnapshot{
			"a": concat(sharded(0, 0, 4, 10), sharded(1, 1, 4, 10)),
		}, 0, false},
		{"replicated, world shrank", one, 2, map[string][]memorySnapshot{
			"a": concat(replicated(0, 10), replicated(1, 10)),
			"b": concat(replicated(0, 11), replicated(1, 11)),
		}, 10, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := agreedMemoryStep(tc.world, tc.size, tc.held)
			if got != tc.want || ok != tc.wantOK {
				t.Errorf("agreed %d, %v; want %d, %v", got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

func TestValidateSnapshots(t *testing.T) {
	snap := func(local int32, step int64, rank, world int32, mode string) *roverv1.MemorySnapshot {
		return &roverv1.MemorySnapshot{LocalRank: local, Step: step, Rank: rank, WorldSize: world, Mode: mode}
	}
	for _, tc := range []struct {
		snap *roverv1.MemorySnapshot
		want string // in the error; "" for valid
	}{
		{snap(1, 5, 3, 4, "sharded"), ""},
		{snap(0, 0, 0, 1, "replicated"), ""},
		{snap(2, 5, 0, 4, "sharded"), "local_rank 2"},
		{snap(-1, 5, 0, 4, "sharded"), "local_rank -1"},
		{snap(0, -5, 0, 4, "sharded"), "step -5"},
		{snap(0, 5, 4, 4, "sharded"), "rank 4"},
		{snap(0, 5, 0, 0, "sharded"), "world of size 0"},
		{snap(0, 5, 0, 4, "mirrored"), `mode "mirrored"`},
	} {
		req := &roverv1.JoinRequest{LocalWorldSize: 2, Snapshots: []*roverv1.MemorySnapshot{tc.snap}}
		_, err := validateSnapshots(req)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%v: %v", tc.snap, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%v: error %v, want one naming %q", tc.snap, err, tc.want)
		}
	}
	many := &roverv1.JoinRequest{LocalWorldSize: 1}
	for range maxSnapshotsPerRank + 1 {
		many.Snapshots = append(many.Snapshots, snap(0, 1, 0, 1, "sharded"))
	}
	if _, err := validateSnapshots(many); err == nil {
		t.Error("an oversized snapshot list was accepted")
	}
}
