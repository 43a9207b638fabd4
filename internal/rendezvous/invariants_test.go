package rendezvous

import (
	"slices"
	"testing"
)

// checkInvariants verifies the machine's invariants, on its snapshot and on
// its internal indexes.
func checkInvariants(t testing.TB, m *Machine) {
	t.Helper()
	s := m.Snapshot()
	c := s.Config
	seen := map[string]bool{}
	off := 0
	for i, mb := range s.World {
		if mb.GroupRank != i || mb.RankOffset != off {
			t.Fatalf("member %d %+v: want group rank %d, offset %d", i, mb, i, off)
		}
		if i > 0 && mb.NodeRank <= s.World[i-1].NodeRank {
			t.Fatalf("world not in node-rank order: %+v", s.World)
		}
		if seen[mb.NodeID] {
			t.Fatalf("node %q in world twice", mb.NodeID)
		}
		seen[mb.NodeID] = true
		off += mb.LocalWorldSize
		if got, ok := s.Member(mb.NodeID); !ok || got != mb {
			t.Fatalf("Snapshot.Member(%q) = %+v, %v", mb.NodeID, got, ok)
		}
		a, r, ok := m.Assignment(mb.NodeID)
		if want := !s.Open; ok != want || ok && (a != mb || r != s.Round) {
			t.Fatalf("Assignment(%q) = %+v, %d, %v; want %+v, %d, %v", mb.NodeID, a, r, ok, mb, s.Round, want)
		}
	}
	if off != s.WorldSize {
		t.Fatalf("WorldSize %d, sum of local world sizes %d", s.WorldSize, off)
	}
	if n := len(s.World); s.WorldRound > 0 && (n%c.NodeUnit != 0 || n < c.MinNodes || n > c.MaxNodes) {
		t.Fatalf("world of %d nodes breaks min %d max %d unit %d", n, c.MinNodes, c.MaxNodes, c.NodeUnit)
	}
	if (s.WorldRound == 0) != (len(s.World) == 0) || s.WorldRound > s.Round || !s.Open && s.WorldRound != s.Round {
		t.Fatalf("world round %d, round %d, open %v, %d members", s.WorldRound, s.Round, s.Open, len(s.World))
	}
	if s.Restarts < 0 || s.Restarts > s.MaxRestarts {
		t.Fatalf("restarts %d of %d", s.Restarts, s.MaxRestarts)
	}
	if (s.Job == Failed) != (s.Reason != "") || (s.Job == Failed) != (m.Err() != nil) {
		t.Fatalf("job %v, reason %q, err %v", s.Job, s.Reason, m.Err())
	}
	if s.Job == Succeeded && s.Open {
		t.Fatal("job succeeded with an open round")
	}
	// Joined: sorted by rank, unique, live, not in the current world.
	if len(s.Joined) != len(m.joined) {
		t.Fatalf("Joined %v, joined set has %d", s.Joined, len(m.joined))
	}
	prev := -1
	for _, id := range s.Joined {
		n := m.nodes[id]
		if n == nil || n.lost || !n.joined || n.rank <= prev {
			t.Fatalf("Joined %v: %q bad or out of rank order", s.Joined, id)
		}
		prev = n.rank
		if !s.Open && seen[id] {
			t.Fatalf("%q both in the closed world and waiting", id)
		}
	}
	// Ranks: every live node holds its own rank, no two live nodes share one,
	// and every free rank is a candidate in the free heap.
	live := 0
	holders := map[int]string{}
	for id, n := range m.nodes {
		if n.lost {
			continue
		}
		live++
		if h, dup := holders[n.rank]; dup {
			t.Fatalf("live nodes %q and %q share rank %d", h, id, n.rank)
		}
		holders[n.rank] = id
		if m.ranks.owner(n.rank) != n {
			t.Fatalf("live node %q does not own its rank %d", id, n.rank)
		}
	}
	if live != m.live {
		t.Fatalf("live count %d, counted %d", m.live, live)
	}
	for r, o := range m.ranks.owners {
		if (o == nil || o.lost) && !slices.Contains(m.ranks.free, r) {
			t.Fatalf("free rank %d missing from the free heap", r)
		}
	}
	if m.open == false && m.job == Running && m.nSucceeded >= len(m.world) {
		t.Fatalf("%d of %d succeeded but the job runs", m.nSucceeded, len(m.world))
	}
	// awaiting: the members of the last world an open round waits for.
	awaiting := 0
	for _, mb := range m.world {
		if n := m.nodes[mb.NodeID]; m.open && !n.lost && !n.joined {
			awaiting++
		}
	}
	if m.open && m.awaiting != awaiting {
		t.Fatalf("awaiting %d, counted %d members of %v neither lost nor joined", m.awaiting, awaiting, s.World)
	}
	if x := m.suspect; x != nil && (s.Job != Running || x.round > s.WorldRound || !x.charged && (x.round != s.WorldRound || s.Open) || c.BlameWindow <= 0) {
		t.Fatalf("suspect failure %+v in state %+v", *x, s)
	}
	if d, ok := m.NextDeadline(); ok != (s.Job == Running && (m.suspect != nil || s.Open && (c.JoinTimeout > 0 || c.take(len(s.Joined)) >= c.MinNodes))) {
		t.Fatalf("NextDeadline = %v, %v in state %+v", d, ok, s)
	}
}
