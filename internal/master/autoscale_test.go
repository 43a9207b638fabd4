package master

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/autoscale"
	"github.com/roverml/rover/internal/eventlog"
	"github.com/roverml/rover/internal/jobconfig/configwire"
	"github.com/roverml/rover/internal/store"
)

// fastScaling is a policy that decides from two samples per size, without
// warm-up or cool-down to speak of: the test drives it with heartbeats.
var fastScaling = autoscale.Config{WarmupSteps: -1, WarmupTime: -1, Window: 4, MinSamples: 2, CoolDown: time.Millisecond}

// TestAutoScaleGrowsTheFleet: a job of 1 to 3 nodes that starts on one,
// under auto-scaling, measures its one size from the heartbeats' progress
// (samples per step), decides to grow (one measured size: each added node
// is assumed to add 0.7 of a node's share), journals the decision and has
// the node manager create the second node, which joins the next round.
// GetJob shows the decision, the size measured and the unit; the event log
// has it; a master restarted on the same store has the same policy state.
func TestAutoScaleGrowsTheFleet(t *testing.T) {
	fake := newFake()
	sp := fleetJob(3)
	sp.Groups[0].MinNodes, sp.Groups[0].MaxNodes, sp.Groups[0].Nodes = 1, 3, 1
	st := store.NewMemory()
	knobs := fastScaling
	fm := startFleet(t, fleetOptions{spec: sp, platform: fake, rdzv: rdzvConfig(1, 3), store: st, autoScale: &knobs})
	waitCreated(t, fake, "train-worker-0-0")
	ctx, cancel := context.WithTimeout(context.Background(), waitDeadline)
	defer cancel()
	s := fm.join(ctx, t, "train-worker-0-0", 0, 1)
	step := int64(0)
	for len(fake.Created()) < 2 {
		step += 10
		w := worker(step, 10, 1, 1)
		w.Samples = 320 // 32 samples a step
		beat(s, t, &roverv1.NodeProgress{Round: 1, Workers: []*roverv1.WorkerProgress{w}})
		if ctx.Err() != nil {
			t.Fatalf("no second node created after %d steps: auto-scale %v", step, fm.job(t).GetAutoScale())
		}
	}
	waitCreated(t, fake, "train-worker-0-0", "train-worker-1-0")
	a := fm.job(t).GetAutoScale()
	last := a.GetLastChange()
	if last.GetAction() != "grow" || last.GetReason() != "predicted_gain" || last.GetFromNodes() != 1 || last.GetToNodes() != 2 ||
		a.GetTargetNodes() != 2 || a.GetChanges() != 1 || a.GetUnit() != "samples/s" {
		t.Fatalf("auto-scale status %v: want one grow from 1 to 2 for a predicted gain, in samples/s", a)
	}
	if len(a.GetSizes()) != 1 || a.GetSizes()[0].GetNodes() != 1 || !a.GetSizes()[0].GetTrusted() || a.GetSizes()[0].GetThroughput() <= 0 {
		t.Errorf("sizes %v: want size 1 measured and trusted", a.GetSizes())
	}
	if !strings.Contains(last.GetMessage(), "grow from 1 to 2 nodes") {
		t.Errorf("decision message %q", last.GetMessage())
	}
	evs, _ := fm.m.Events().Since(0, 0)
	found := false
	for _, e := range evs {
		found = found || e.Kind == eventlog.ScaleDecision && strings.HasPrefix(e.Reason, "auto-scale grow: predicted_gain") && e.Nodes == 2
	}
	if !found {
		t.Errorf("no auto-scale event in the log: %v", evs)
	}
	second := openSessionRank(ctx, t, fm.c, "train-worker-1-0", 1, fm.rdzv)
	nextView(t, s, func(v *roverv1.NodeView) bool { return v.GetRound() == 2 }) // the member rejoins the next round
	rejoin := joinReq("train-worker-0-0", fm.rdzv)
	rejoin.Msg.Round, rejoin.Msg.RequestedRank = 2, 0
	if _, err := fm.c.Join(ctx, rejoin); err != nil {
		t.Fatal(err)
	}
	nextView(t, second, func(v *roverv1.NodeView) bool { return v.GetAssignment().GetRound() == 2 })
	waitFor(t, "round 2 of 2 nodes", func() bool { j := fm.job(t); return j.GetRound() == 2 && !j.GetRoundOpen() && j.GetWorldSize() == 4 })

	if err := fm.stop(); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	again := startFleet(t, fleetOptions{spec: sp, platform: fake, rdzv: rdzvConfig(1, 3), store: st, autoScale: &knobs, keepNodes: true})
	b := again.job(t).GetAutoScale()
	if b.GetChanges() != 1 || b.GetLastChange().GetAction() != "grow" || len(b.GetSizes()) == 0 {
		t.Errorf("restarted master's auto-scale %v: want the journaled grow and measurements", b)
	}
}

// TestAutoScaleNeedsNodes: a master that does not create its nodes cannot
// scale them, and says so; knobs that do not fit the job are refused.
func TestAutoScaleNeedsNodes(t *testing.T) {
	knobs := fastScaling
	_, err := New(context.Background(), Config{Listen: "127.0.0.1:0", Token: testToken, AutoScale: &knobs})
	if err == nil || !strings.Contains(err.Error(), "rover submit --auto-scale") {
		t.Errorf("New without nodes = %v, want the auto-scaling refusal", err)
	}
	bad := autoscale.Config{MinSamples: 99, Window: 4}
	sp := fleetJob(3)
	preset := configwire.FromProto(rdzvConfig(1, 3))
	_, err = New(context.Background(), Config{Listen: "127.0.0.1:0", Token: testToken, Preset: &preset, AutoScale: &bad,
		Nodes: &NodesConfig{Platform: newFake(), Name: "fake", Spec: sp}})
	if !errors.Is(err, autoscale.ErrInvalidConfig) || !strings.Contains(err.Error(), "MinSamples") {
		t.Errorf("New with bad knobs = %v, want ErrInvalidConfig naming MinSamples", err)
	}
}

// TestAutoScaleReplacesAStraggler: in a job of two nodes, one takes three
// times the other's time per step in every heartbeat; once it has been
// the straggler for the policy's straggler-for, the policy replaces it:
// the node manager relaunches its rank as a new node, and the decision
// says why.
func TestAutoScaleReplacesAStraggler(t *testing.T) {
	fake := newFake()
	sp := fleetJob(3)
	knobs := fastScaling
	knobs.StragglerFor = time.Millisecond
	fm := startFleet(t, fleetOptions{spec: sp, platform: fake, autoScale: &knobs})
	waitCreated(t, fake, "train-worker-0-0", "train-worker-1-0")
	ctx, cancel := context.WithTimeout(context.Background(), waitDeadline)
	defer cancel()
	ss := fm.joinAll(ctx, t, "train-worker-0-0", "train-worker-1-0")
	for i := int64(1); len(fake.Created()) < 3; i++ {
		beat(ss[0], t, &roverv1.NodeProgress{Round: 1, Workers: []*roverv1.WorkerProgress{worker(10*i, 10, 1, 1)}})
		beat(ss[1], t, &roverv1.NodeProgress{Round: 1, Workers: []*roverv1.WorkerProgress{worker(10*i, 10, 3, 3)}})
		if ctx.Err() != nil {
			t.Fatalf("the straggler was not replaced: auto-scale %v", fm.job(t).GetAutoScale())
		}
	}
	waitCreated(t, fake, "train-worker-0-0", "train-worker-1-0", "train-worker-1-1")
	last := fm.job(t).GetAutoScale().GetLastChange()
	if last.GetAction() != "replace" || last.GetReason() != "straggler" || last.GetNodeId() != "train-worker-1-0" ||
		!strings.Contains(last.GetMessage(), "replace train-worker-1-0: a straggler") {
		t.Errorf("last change %v, want the straggler train-worker-1-0 replaced", last)
	}
}

// TestAutoScaleTimesOneNode: in a world of two nodes whose heartbeats
// alternate, a step or so apart, the throughput is sampled from one node's
// heartbeats only (the first to report in the round). Sampling both would
// make samples of half the interval, with twice the noise.
func TestAutoScaleTimesOneNode(t *testing.T) {
	fake := newFake()
	sp := fleetJob(3)
	knobs := fastScaling
	knobs.Window, knobs.MinSamples = 32, 32 // measure only: no decision
	fm := startFleet(t, fleetOptions{spec: sp, platform: fake, autoScale: &knobs})
	waitCreated(t, fake, "train-worker-0-0", "train-worker-1-0")
	ctx, cancel := context.WithTimeout(context.Background(), waitDeadline)
	defer cancel()
	ss := fm.joinAll(ctx, t, "train-worker-0-0", "train-worker-1-0")
	seen := func(rank int, step int64) {
		t.Helper()
		jobUntil(ctx, t, fm.c, fmt.Sprintf("rank %d's step %d", rank, step), func(j *roverv1.GetJobResponse) bool {
			for _, n := range j.GetProgress().GetNodes() {
				if int(n.GetNodeRank()) == rank && n.GetStep() == step {
					return true
				}
			}
			return false
		})
	}
	const beats = 6
	for i := int64(0); i <= beats; i++ {
		beat(ss[0], t, &roverv1.NodeProgress{Round: 1, Workers: []*roverv1.WorkerProgress{worker(10+10*i, 10, 1, 1)}})
		seen(0, 10+10*i)
		beat(ss[1], t, &roverv1.NodeProgress{Round: 1, Workers: []*roverv1.WorkerProgress{worker(15+10*i, 10, 1, 1)}})
		seen(1, 15+10*i)
	}
	sizes := fm.job(t).GetAutoScale().GetSizes()
	// The pace node's first heartbeat anchors; each later one is a sample.
	if len(sizes) != 1 || sizes[0].GetNodes() != 2 || sizes[0].GetSamples() != beats {
		t.Errorf("sizes %v: want %d samples at 2 nodes, one per heartbeat of one node", sizes, beats)
	}
}
