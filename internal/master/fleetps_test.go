package master

import (
	"slices"
	"testing"
	"time"

	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/nodemanager"
)

// TestFleetParameterServerJob: in a job of agentless roles nobody joins the
// rendezvous; a worker that fails is relaunched, the chief's exit 0 ends the
// job as succeeded, and the PS, which serve until stopped, are deleted at
// once rather than after the exit grace.
func TestFleetParameterServerJob(t *testing.T) {
	g := func(name string, n int) nodemanager.GroupSpec {
		return nodemanager.GroupSpec{Name: name, MinNodes: n, MaxNodes: n, Argv: []string{"python", "train.py"}, Agentless: true}
	}
	ps, chief, worker := g("ps", 2), g("chief", 1), g("worker", 1)
	chief.DecidesJob = true
	fake := newFake()
	fm := startFleet(t, fleetOptions{spec: nodemanager.Spec{Job: "train", Groups: []nodemanager.GroupSpec{ps, chief, worker}},
		platform: fake, rdzv: rdzvConfig(1, 4), exitGrace: time.Hour})
	waitCreated(t, fake, "train-ps-0-0", "train-ps-1-0", "train-chief-0-0", "train-worker-0-0")
	for _, id := range []string{"train-ps-0-0", "train-ps-1-0", "train-chief-0-0", "train-worker-0-0"} {
		if err := fake.Start(id, "h"); err != nil {
			t.Fatal(err)
		}
	}
	if err := fake.Exit("train-worker-0-0", 1, 0, ""); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the worker's relaunch", func() bool {
		return len(fake.Created()) == 5
	})
	if err := fake.Exit("train-worker-0-1", 0, 0, ""); err != nil {
		t.Fatal(err)
	}
	if err := fake.Exit("train-chief-0-0", 0, 0, ""); err != nil {
		t.Fatal(err)
	}
	if out := waitOutcome(t, fm.m); !out.Succeeded {
		t.Fatalf("outcome %+v, want success", out)
	}
	waitGone(t, fm.m) // well within the hour of exit grace: the PS were deleted
	for _, id := range []string{"train-ps-0-0", "train-ps-1-0"} {
		if !slices.Contains(fake.Deleted(), id) {
			t.Errorf("%s was not deleted", id)
		}
	}
	if r := fm.job(t); r.GetJobState() != roverv1.JobState_JOB_STATE_SUCCEEDED || r.GetRelaunches() != 1 {
		t.Errorf("%v with %d relaunches, want SUCCEEDED with 1", r.GetJobState(), r.GetRelaunches())
	}
}
