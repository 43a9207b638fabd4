package rendezvous

import (
	"fmt"
	"testing"
	"time"
)

func nodeIDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("node-%06d", i)
	}
	return ids
}

// round runs one rendezvous of len(ids) nodes: every join, then the close
// (rule (a), on the last join), then every node's assignment lookup.
func round(b *testing.B, ids []string) {
	now := t0
	m, err := New(Config{MinNodes: 1, MaxNodes: len(ids), LastCall: time.Minute}, now)
	if err != nil {
		b.Fatal(err)
	}
	for _, id := range ids {
		now = now.Add(time.Millisecond)
		if _, err := m.Join(JoinRequest{NodeID: id, RequestedRank: -1, LocalWorldSize: 8, Addr: id}, now); err != nil {
			b.Fatal(err)
		}
	}
	for _, id := range ids {
		if _, _, ok := m.Assignment(id); !ok {
			b.Fatalf("%s not assigned", id)
		}
	}
}

// BenchmarkRound10000 is 10,000 joins and the close of their round. The
// whole round is O(n log n): joins are amortised O(log n), the close sorts once.
func BenchmarkRound10000(b *testing.B) {
	ids := nodeIDs(10000)
	for b.Loop() {
		round(b, ids)
	}
}

// BenchmarkRound100000 is the same at ten times the size, to check that the
// cost grows as n log n and not n².
func BenchmarkRound100000(b *testing.B) {
	ids := nodeIDs(100000)
	for b.Loop() {
		round(b, ids)
	}
}

// BenchmarkRestart10000 is a failure restart of a 10,000-node world: the
// failure report, 10,000 rejoins and the early close under rule (c).
func BenchmarkRestart10000(b *testing.B) {
	ids := nodeIDs(10000)
	m, _ := New(Config{MinNodes: 1, MaxNodes: len(ids), MaxRestarts: 1 << 30, LastCall: time.Minute}, t0)
	req := func(id string) JoinRequest {
		return JoinRequest{NodeID: id, RequestedRank: -1, LocalWorldSize: 8, Addr: id}
	}
	for _, id := range ids {
		m.Join(req(id), t0)
	}
	for b.Loop() {
		r := m.Snapshot().Round
		if err := m.WorkerFailed(ids[0], r, t0); err != nil {
			b.Fatal(err)
		}
		for _, id := range ids {
			m.Join(req(id), t0)
		}
		if m.open {
			b.Fatal("restart round did not close")
		}
	}
}
