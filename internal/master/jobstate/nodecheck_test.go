package jobstate

import (
	"errors"
	"testing"
	"time"

	"github.com/roverml/rover/internal/jobconfig"
	"github.com/roverml/rover/internal/nodecheck"
	"github.com/roverml/rover/internal/rendezvous"
)

// TestNodeCheckFollowsTheWorld: a job without a check has none; a closed
// round's world starts one, whose reports must name a group the node has;
// a round that opens again cancels it.
func TestNodeCheckFollowsTheWorld(t *testing.T) {
	if NewNodeCheck(nil, 2) != nil {
		t.Fatal("a job without a node check has one")
	}
	now := time.Unix(1000, 0)
	n := NewNodeCheck(&jobconfig.NodeCheck{}, 2)
	world := func() []rendezvous.Member {
		return []rendezvous.Member{{NodeID: "b", NodeRank: 1}, {NodeID: "a", NodeRank: 0}}
	}
	closed := rendezvous.Status{Job: rendezvous.Running, Round: 1, WorldRound: 1}
	n.World(closed, world, now)
	if r, ok := n.Machine().Running(); !ok || r != 1 {
		t.Fatalf("running %d, %v; want round 1's check", r, ok)
	}
	round, stage, groups := n.Machine().Tasks("a")
	if len(groups) == 0 {
		t.Fatal("node a has no group to check")
	}
	if err := n.CheckReport("a", round, stage, groups[0].ID); err != nil {
		t.Errorf("a's own group: %v", err)
	}
	if err := n.CheckReport("a", round, stage, 99); !errors.Is(err, ErrStaleRound) {
		t.Errorf("another group: %v, want ErrStaleRound", err)
	}
	ch, err := n.Report(round, stage, groups[0].ID, "a", nodecheck.Result{OK: true, Elapsed: time.Second}, now)
	if err != nil || ch.Ended != nil {
		t.Errorf("a's report: %+v, %v; want the check still running", ch, err)
	}
	n.World(rendezvous.Status{Job: rendezvous.Running, Round: 2, Open: true, WorldRound: 1}, world, now)
	if _, ok := n.Machine().Running(); ok {
		t.Error("the check still runs after its round ended")
	}
}
