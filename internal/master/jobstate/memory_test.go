package jobstate

import (
	"testing"

	"github.com/roverml/rover/internal/rendezvous"
)

func replicated(local int, steps ...int64) []MemorySnapshot {
	var out []MemorySnapshot
	for _, s := range steps {
		out = append(out, MemorySnapshot{LocalRank: local, Step: s, Rank: 0, WorldSize: 1, Mode: ModeReplicated})
	}
	return out
}

func sharded(local, rank, world int, steps ...int64) []MemorySnapshot {
	var out []MemorySnapshot
	for _, s := range steps {
		out = append(out, MemorySnapshot{LocalRank: local, Step: s, Rank: rank, WorldSize: world, Mode: ModeSharded})
	}
	return out
}

func concat(parts ...[]MemorySnapshot) []MemorySnapshot {
	var out []MemorySnapshot
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
		held   map[string][]MemorySnapshot
		want   int64
		wantOK bool
	}{
		{"nothing held", two, 4, nil, 0, false},
		{"every rank holds both", two, 4, map[string][]MemorySnapshot{
			"a": concat(replicated(0, 23, 24), replicated(1, 23, 24)),
			"b": concat(replicated(0, 24, 23), replicated(1, 23, 24)),
		}, 24, true},
		{"one rank is a step behind", two, 4, map[string][]MemorySnapshot{
			"a": concat(replicated(0, 23, 24), replicated(1, 23, 24)),
			"b": concat(replicated(0, 22, 23), replicated(1, 23, 24)),
		}, 23, true},
		{"local rank 0's copy serves the node", two, 4, map[string][]MemorySnapshot{
			"a": concat(replicated(0, 23, 24), replicated(1, 23, 24)),
			"b": concat(replicated(0, 23, 24), replicated(1, 21, 22)),
		}, 24, true},
		{"only local rank 0's copy serves the node", two, 4, map[string][]MemorySnapshot{
			"a": concat(replicated(0, 23, 24), replicated(1, 23, 24)),
			"b": replicated(1, 23, 24),
		}, 0, false},
		{"a new node holds nothing", two, 4, map[string][]MemorySnapshot{
			"a": concat(replicated(0, 23, 24), replicated(1, 23, 24)),
		}, 0, false},
		{"one replicated copy per node", two, 4, map[string][]MemorySnapshot{
			"a": replicated(0, 23, 24),
			"b": replicated(0, 22, 23),
		}, 23, true},
		{"a sharded local rank holds nothing", two, 4, map[string][]MemorySnapshot{
			"a": concat(sharded(0, 0, 4, 9, 10), sharded(1, 1, 4, 9, 10)),
			"b": sharded(0, 2, 4, 9, 10),
		}, 0, false},
		{"no common step", two, 4, map[string][]MemorySnapshot{
			"a": concat(replicated(0, 23, 24), replicated(1, 23, 24)),
			"b": concat(replicated(0, 21, 22), replicated(1, 21, 22)),
		}, 0, false},
		{"sharded, same world", two, 4, map[string][]MemorySnapshot{
			"a": concat(sharded(0, 0, 4, 9, 10), sharded(1, 1, 4, 9, 10)),
			"b": concat(sharded(0, 2, 4, 9, 10), sharded(1, 3, 4, 9, 10)),
		}, 10, true},
		{"sharded, ranks moved", two, 4, map[string][]MemorySnapshot{
			"a": concat(sharded(0, 2, 4, 10), sharded(1, 3, 4, 10)),
			"b": concat(sharded(0, 0, 4, 10), sharded(1, 1, 4, 10)),
		}, 0, false},
		{"sharded, world shrank", one, 2, map[string][]MemorySnapshot{
			"a": concat(sharded(0, 0, 4, 10), sharded(1, 1, 4, 10)),
		}, 0, false},
		{"replicated, world shrank", one, 2, map[string][]MemorySnapshot{
			"a": concat(replicated(0, 10), replicated(1, 10)),
			"b": concat(replicated(0, 11), replicated(1, 11)),
		}, 10, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := agreedStep(tc.world, tc.size, tc.held)
			if got != tc.want || ok != tc.wantOK {
				t.Errorf("agreed %d, %v; want %d, %v", got, ok, tc.want, tc.wantOK)
			}
		})
	}
}
