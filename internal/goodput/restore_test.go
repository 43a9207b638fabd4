package goodput

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func nodeRestored(r int64, node string, st int64, from Source, peer string, fetch, load float64) event {
	return func(m *Machine) {
		m.NodeRestored(r, node, NodeRestore{Step: st, From: from, Peer: peer, Fetch: sec2(fetch), Load: sec2(load)})
	}
}

// TestRestartNodes: a restart lists where each node resumed from, in node
// order, with its fetch and load times; the job's first start and reports
// of another round or node list nothing; the list survives a marshal.
func TestRestartNodes(t *testing.T) {
	m := newMachine(t)
	evs := restartTimeline()
	// The first start's resume lists nothing: no restart is open.
	play(m, evs[:3])
	m.NodeRestored(1, "a", NodeRestore{Step: 0, From: FromStorage})
	play(m, evs[3:11])
	play(m, []event{
		nodeRestored(2, "b", 24, FromBackup, "a", 0.25, 0.5),
		nodeRestored(2, "a", 24, FromMemory, "", 0, 0.5),
		nodeRestored(1, "a", 24, FromStorage, "", 0, 0.5),     // an older round's
		nodeRestored(2, "zz", 24, FromStorage, "", 0, 0.5),    // not in the round
		nodeRestored(2, "b", 24, FromBackup, "a", 0.25, 0.75), // again: replaces
	})
	play(m, evs[11:])
	v := m.View(at(100))
	if len(v.Latest) != 1 {
		t.Fatalf("%d restarts, want 1", len(v.Latest))
	}
	want := []NodeRestore{
		{Node: "a", Step: 24, From: FromMemory, Load: sec2(0.5)},
		{Node: "b", Step: 24, From: FromBackup, Peer: "a", Fetch: sec2(0.25), Load: sec2(0.75)},
	}
	if diff := cmp.Diff(want, v.Latest[0].Nodes); diff != "" {
		t.Errorf("nodes (-want +got):\n%s", diff)
	}
	b, err := m.MarshalState()
	if err != nil {
		t.Fatal(err)
	}
	r, err := Restore(b)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, r.View(at(100)).Latest[0].Nodes); diff != "" {
		t.Errorf("nodes after a restore (-want +got):\n%s", diff)
	}
}

// TestRestartNodesBounded: a restart of many nodes lists MaxRestoreNodes
// and counts the rest.
func TestRestartNodesBounded(t *testing.T) {
	m := newMachine(t)
	nodes := make([]string, 40)
	for i := range nodes {
		nodes[i] = fmt.Sprintf("n%02d", i)
	}
	m.Launched(at(0))
	m.RoundFormed(1, nodes, at(1))
	m.Progress(Progress{Round: 1, Node: "n00", Step: 5, At: at(5)})
	m.WorkerFailed(Failure{Round: 1, Node: "n00", Cause: "oom", At: at(6)})
	m.RoundStopped(1, StopFailure, at(6))
	for _, n := range nodes {
		m.WorkersStopped(1, n, at(7))
	}
	m.RoundFormed(2, nodes, at(8))
	for i, n := range nodes {
		m.Resumed(2, n, 5, FromMemory, at(9))
		m.NodeRestored(2, n, NodeRestore{Step: 5, From: FromMemory, Load: time.Duration(i)})
	}
	r := m.View(at(10)).Latest[0]
	if len(r.Nodes) != MaxRestoreNodes || r.MoreNodes != len(nodes)-MaxRestoreNodes {
		t.Fatalf("%d nodes listed and %d more, want %d and %d", len(r.Nodes), r.MoreNodes, MaxRestoreNodes, len(nodes)-MaxRestoreNodes)
	}
	if _, err := m.MarshalState(); err != nil {
		t.Fatalf("a bounded list fails the state's checks: %v", err)
	}
}
