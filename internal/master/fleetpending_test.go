package master

import (
	"context"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/nodemanager"
)

// pendingJob is a job of 2..3 worker nodes whose nodes time out pending
// after timeout.
func pendingJob(timeout time.Duration) nodemanager.Spec {
	return nodemanager.Spec{Job: "train", PendingTimeout: timeout, Groups: []nodemanager.GroupSpec{{
		MinNodes: 2, MaxNodes: 3, Argv: []string{"rover", "run", "--nnodes=2:3", "train.py"},
	}}}
}

// TestFleetGivesUpPendingNode: the platform places two of three nodes;
// the third, pending past its timeout, is deleted as a planned removal,
// the rendezvous stops expecting it and closes with the two that joined
// without waiting out its hour-long last call, and GetJob says why.
func TestFleetGivesUpPendingNode(t *testing.T) {
	fake := newFake()
	rdzv := rdzvConfig(2, 3)
	rdzv.LastCallMillis = time.Hour.Milliseconds()
	fm := startFleet(t, fleetOptions{spec: pendingJob(300 * time.Millisecond), platform: fake, rdzv: rdzv})
	ids := []string{"train-worker-0-0", "train-worker-1-0"}
	waitCreated(t, fake, append(ids, "train-worker-2-0")...)
	for _, id := range ids {
		if err := fake.Start(id, "h"); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitDeadline)
	defer cancel()
	fm.joinAll(ctx, t, ids...) // round 1 forms with the two: the third was given up
	waitDeleted(t, fake, "train-worker-2-0")
	r := fm.job(t)
	if r.GetWorldSize() != 4 || r.GetRelaunches() != 0 {
		t.Errorf("world %d, relaunches %d; want 2 nodes of 2 workers and no relaunch", r.GetWorldSize(), r.GetRelaunches())
	}
	n := managed(t, r, 2)
	if n.GetState() != "Removed" || !strings.Contains(n.GetReason(), "node train-worker-2-0 pended") ||
		!strings.Contains(n.GetReason(), "past its 300ms pending timeout: given up; the job runs with 2 nodes") {
		t.Errorf("managed rank 2: %v, want Removed, given up", n)
	}
}

// TestFleetEndDeletesPendingNodes: a node still pending when the job ends
// is deleted at once; the end does not wait out the exit grace for it.
func TestFleetEndDeletesPendingNodes(t *testing.T) {
	fake := newFake()
	fm := startFleet(t, fleetOptions{spec: pendingJob(time.Hour), platform: fake, rdzv: rdzvConfig(2, 3), exitGrace: time.Hour})
	ids := []string{"train-worker-0-0", "train-worker-1-0"}
	waitCreated(t, fake, append(ids, "train-worker-2-0")...)
	ctx, cancel := context.WithTimeout(context.Background(), waitDeadline)
	defer cancel()
	fm.joinAll(ctx, t, ids...) // the last call of 200 ms closes the round with two
	for _, id := range ids {
		if _, err := fm.c.ReportSuccess(ctx, connect.NewRequest(&roverv1.ReportSuccessRequest{NodeId: id, Round: 1})); err != nil {
			t.Fatal(err)
		}
	}
	if out := waitOutcome(t, fm.m); !out.Succeeded {
		t.Fatalf("outcome %+v, want success", out)
	}
	waitDeleted(t, fake, "train-worker-2-0")
	for _, id := range ids {
		if err := fake.Exit(id, 0, 0, ""); err != nil {
			t.Fatal(err)
		}
	}
	waitGone(t, fm.m)
}
