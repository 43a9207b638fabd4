package nodemanager

import (
	"fmt"
	"testing"

	"github.com/roverml/rover/internal/platform"
)

// TestStartWindow: a group of a million replicas holds startWindow slots
// at Start, not a million; each node the platform reports makes room for
// the next rank; the rest count as expected and usable all along.
func TestStartWindow(t *testing.T) {
	const replicas = 1 << 20
	m := mustNew(t, spec(workers(replicas-10, replicas)))
	cmds := m.Start(t0)
	if len(cmds) != startWindow {
		t.Fatalf("Start asked for %d nodes, want startWindow (%d)", len(cmds), startWindow)
	}
	if got := m.Live(); got != replicas {
		t.Errorf("Live() = %d, want %d: the ranks still to create are expected at the rendezvous", got, replicas)
	}
	state, err := m.MarshalState()
	if err != nil {
		t.Fatal(err)
	}
	if len(state) > 64<<10 {
		t.Errorf("the state of a started million-replica group is %d bytes: it holds more than the window", len(state))
	}
	if got := len(m.Status().Nodes); got != startWindow {
		t.Errorf("Status lists %d nodes, want %d", got, startWindow)
	}

	// The platform takes the first node: one more rank is created.
	next := m.Observe(platform.Event{NodeID: cmds[0].NodeID, Kind: platform.Pending}, t0)
	if len(next) != 1 || next[0].Kind != CreateNode || next[0].NodeID != nodeID("train", "worker", startWindow, 0) {
		t.Fatalf("after a node was reported: %q, want the create of rank %d", summary(next), startWindow)
	}
	// A repeat of its event makes no more room.
	if again := m.Observe(platform.Event{NodeID: cmds[0].NodeID, Kind: platform.Running}, t0); len(again) != 0 {
		t.Errorf("a second event of the same node: %q, want nothing", summary(again))
	}

	// A rank that fails for good leaves replicas-1 usable, counting those
	// not created yet: the job goes on (its minimum is replicas-10).
	budget := m.spec.Groups[0].budget(1)
	id := cmds[1].NodeID
	for i := 0; i <= budget; i++ {
		out := m.Observe(platform.Event{NodeID: id, Kind: platform.Exited, ExitCode: 1}, t0)
		for _, c := range out {
			if c.Kind == CreateNode && c.Spec.Rank == 1 {
				id = c.NodeID
			}
		}
	}
	if err := m.Err(); err != nil {
		t.Fatalf("one failed rank of %d failed the job: %v", replicas, err)
	}
	if got := m.usable(0); got != replicas-1 {
		t.Errorf("usable = %d, want %d", got, replicas-1)
	}
}

// TestStartWindowScale: scaling up creates the new ranks through the
// window too, with the scale's reason.
func TestStartWindowScale(t *testing.T) {
	m := mustNew(t, Spec{Job: "train", Groups: []GroupSpec{{MinNodes: 1, MaxNodes: 1000, Nodes: 1, Argv: []string{"rover", "run", "train.py"}}}})
	first := m.Start(t0)
	if len(first) != 1 {
		t.Fatalf("Start: %q, want one create", summary(first))
	}
	cmds, err := m.Scale("worker", 1000, "more data", t0)
	if err != nil {
		t.Fatal(err)
	}
	if len(cmds) != startWindow-1 {
		t.Fatalf("Scale to 1000 asked for %d nodes, want %d (the window, less the node not yet reported)", len(cmds), startWindow-1)
	}
	want := fmt.Sprintf("scaled worker from 1 to 1000 nodes (more data): adding rank %d", 1)
	if cmds[0].Reason != want {
		t.Errorf("reason %q, want %q", cmds[0].Reason, want)
	}
	if got := m.Live(); got != 1000 {
		t.Errorf("Live() = %d, want 1000", got)
	}
}
