package master

import (
	"context"
	"errors"
	"slices"
	"testing"

	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/nodemanager"
)

// TestFleetScale: a job of 1 to 3 nodes that starts with 2 closes its
// first round as soon as both joined (the rendezvous expects the nodes
// the manager runs, and does not wait out its minute-long last call);
// scaled to 3, the third node is created and joins the next round without
// spending a restart; scaled back to 2, the third node is deleted as a
// planned departure: no failure is blamed on it. Counts outside 1..3 are
// refused.
func TestFleetScale(t *testing.T) {
	fake := newFake()
	sp := fleetJob(3)
	sp.Groups[0].MinNodes, sp.Groups[0].MaxNodes, sp.Groups[0].Nodes = 1, 3, 2
	rdzv := rdzvConfig(1, 3)
	rdzv.LastCallMillis = 3_600_000 // an hour: only Expect closes round 1 in time
	fm := startFleet(t, fleetOptions{spec: sp, platform: fake, rdzv: rdzv})
	waitCreated(t, fake, "train-worker-0-0", "train-worker-1-0")
	ctx, cancel := context.WithTimeout(context.Background(), waitDeadline)
	defer cancel()
	ss := fm.joinAll(ctx, t, "train-worker-0-0", "train-worker-1-0")

	for _, n := range []int{0, 4} {
		if err := fm.m.Scale(ctx, "worker", n, "test"); !errors.Is(err, nodemanager.ErrBadScale) {
			t.Errorf("Scale(%d) = %v, want ErrBadScale", n, err)
		}
	}
	if err := fm.m.Scale(ctx, "worker", 3, "kubectl scale"); err != nil {
		t.Fatalf("Scale(3): %v", err)
	}
	waitCreated(t, fake, "train-worker-0-0", "train-worker-1-0", "train-worker-2-0")
	third := openSessionRank(ctx, t, fm.c, "train-worker-2-0", 2, fm.rdzv)
	for i, s := range ss { // the members see round 2 open and rejoin it
		nextView(t, s, func(v *roverv1.NodeView) bool { return v.GetRound() == 2 })
		rejoin := joinReq([]string{"train-worker-0-0", "train-worker-1-0"}[i], fm.rdzv)
		rejoin.Msg.Round, rejoin.Msg.RequestedRank = 2, int32(i)
		if _, err := fm.c.Join(ctx, rejoin); err != nil {
			t.Fatal(err)
		}
	}
	nextView(t, third, func(v *roverv1.NodeView) bool { return v.GetAssignment().GetRound() == 2 })
	r := fm.job(t)
	if r.GetWorldSize() != 6 || r.GetRestartCount() != 0 {
		t.Fatalf("round 2: world size %d, restarts %d; want 3 nodes of 2 and no restart spent", r.GetWorldSize(), r.GetRestartCount())
	}

	if err := fm.m.Scale(ctx, "worker", 2, "kubectl scale"); err != nil {
		t.Fatalf("Scale(2): %v", err)
	}
	waitDeleted(t, fake, "train-worker-2-0")
	waitFor(t, "round 3", func() bool { return fm.job(t).GetRound() == 3 })
	r = fm.job(t)
	if r.GetRestartCount() != 0 || len(r.GetFailures()) != 0 || r.GetRelaunches() != 0 {
		t.Errorf("after scaling down: restarts %d, failures %v, relaunches %d; want none", r.GetRestartCount(), r.GetFailures(), r.GetRelaunches())
	}
	if n := managed(t, r, 2); n.GetState() != "Removed" {
		t.Errorf("rank 2 is %v, want Removed", n)
	}
	if got := createdIDs(fake); !slices.Equal(got, []string{"train-worker-0-0", "train-worker-1-0", "train-worker-2-0"}) {
		t.Errorf("created %v: scaling down must create nothing", got)
	}
}

// TestScaleWithoutNodes: a master that does not own its nodes refuses.
func TestScaleWithoutNodes(t *testing.T) {
	m := &Master{}
	if err := m.Scale(context.Background(), "worker", 2, "test"); !errors.Is(err, ErrNoNodes) {
		t.Fatalf("Scale = %v, want ErrNoNodes", err)
	}
}
