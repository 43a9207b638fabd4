package master

import (
	"context"
	"slices"
	"testing"
	"time"

	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/master/jobstate"
	"github.com/roverml/rover/internal/nodemanager"
	"github.com/roverml/rover/internal/store"
	"google.golang.org/protobuf/proto"
)

func checkRdzv() *roverv1.RendezvousConfig {
	r := rdzvConfig(3, 4)
	r.NodeCheck = &roverv1.NodeCheckConfig{Enabled: true}
	return r
}

// checkedCore is a core of a job of 3 to 4 nodes with the node check,
// whose 4 nodes a, b, c, d joined: their world's check runs.
func checkedCore(t *testing.T, st Store, now time.Time) *core {
	t.Helper()
	ctx := context.Background()
	c := newCore("job", st)
	c.st.Owned, c.st.Live = true, true
	cfg, err := validateRendezvous(checkRdzv())
	if err != nil {
		t.Fatal(err)
	}
	if err := c.configure(ctx, *cfg, now); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b", "c", "d"} {
		req, _, err := validateJoin(joinReq(id, checkRdzv()).Msg)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := c.join(ctx, req, memoryReport{}, 0, now); err != nil {
			t.Fatalf("join %s: %v", id, err)
		}
	}
	return c
}

func reportCheck(t *testing.T, c *core, id string, round, stage, group int, ok, local bool, elapsed time.Duration, now time.Time) {
	t.Helper()
	e := &jobstate.Event{Type: jobstate.EventCheckReport, Time: now, Node: id, Round: round, Check: &jobstate.CheckReport{Stage: stage, Group: group}}
	e.Check.Result.OK, e.Check.Result.Local, e.Check.Result.Elapsed = ok, local, elapsed
	if err := c.apply(context.Background(), e); err != nil {
		t.Fatalf("report %s stage %d group %d: %v", id, stage, group, err)
	}
}

func groupOf(t *testing.T, c *core, id string) (stage, group int) {
	t.Helper()
	v, _ := c.view(id)
	nc := v.GetNodeCheck()
	if !nc.GetRunning() || len(nc.GetGroups()) == 0 {
		t.Fatalf("%s's view has no check task: %v", id, nc)
	}
	return int(nc.GetStage()), int(nc.GetGroups()[0].GetId())
}

func TestNodeCheckExcludesTheFaultyNodeAndReplays(t *testing.T) {
	st := store.NewMemory()
	now := time.Unix(1000, 0)
	c := checkedCore(t, st, now)
	v, _ := c.view("a")
	if v.GetAssignment() != nil || !v.GetNodeCheck().GetRunning() || v.GetRound() != 1 {
		t.Fatalf("view while the check runs: %v; want no assignment, a running check of round 1", v)
	}
	// Stage 1: (a, b) pass; c's program crashes, so (c, d) fails.
	reportCheck(t, c, "a", 1, 1, 0, true, false, 100*time.Millisecond, now)
	reportCheck(t, c, "b", 1, 1, 0, true, false, 120*time.Millisecond, now)
	reportCheck(t, c, "c", 1, 1, 1, false, true, 0, now)
	for _, id := range []string{"c", "d"} {
		if stage, _ := groupOf(t, c, id); stage != 2 {
			t.Fatalf("%s: stage %d, want 2", id, stage)
		}
	}
	// A restarted master is at the same point of the check.
	c2 := newCore("job", st)
	if _, err := c2.restore(context.Background(), now); err != nil {
		t.Fatal(err)
	}
	if got, want := c2.job().GetNodeCheck(), c.job().GetNodeCheck(); !proto.Equal(got, want) {
		t.Fatalf("restored check %v, want %v", got, want)
	}
	// Stage 2: c fails again with a node that passed; d passes.
	for _, id := range []string{"c", "d"} {
		_, g := groupOf(t, c, id)
		var partner string
		for _, grp := range c.st.Check.Machine().Last().Groups[1] {
			if grp.ID == g {
				partner = grp.Nodes[0]
			}
		}
		if id == "c" {
			reportCheck(t, c, id, 1, 2, g, false, true, 0, now)
			continue
		}
		reportCheck(t, c, partner, 1, 2, g, true, false, 100*time.Millisecond, now)
		reportCheck(t, c, id, 1, 2, g, true, false, 100*time.Millisecond, now)
	}
	j := c.job()
	var faulty []string
	for _, vd := range j.GetNodeCheck().GetVerdicts() {
		if vd.GetVerdict() == "faulty" {
			faulty = append(faulty, vd.GetNodeId())
		}
	}
	if !slices.Equal(faulty, []string{"c"}) || j.GetNodeCheck().GetRunning() {
		t.Fatalf("check %v: want it done, c faulty", j.GetNodeCheck())
	}
	if j.GetRound() != 2 || !j.GetRoundOpen() {
		t.Errorf("round %d open %v after the exclusion, want round 2 open", j.GetRound(), j.GetRoundOpen())
	}
	vc, _ := c.view("c")
	if !vc.GetNodeCheck().GetVerdict().GetExcluded() {
		t.Errorf("c's view %v does not say it is excluded", vc.GetNodeCheck())
	}
	var kinds []nodemanager.ActionKind
	for _, n := range c.takeNotices() {
		if n.Node == "c" {
			kinds = append(kinds, n.Action.Kind)
		}
		if n.Action.Kind == nodemanager.RelaunchNode && n.Action.Cause != nodemanager.CauseNodeCheck {
			t.Errorf("relaunch of %s has cause %q, want %q", n.Node, n.Action.Cause, nodemanager.CauseNodeCheck)
		}
	}
	if !slices.Equal(kinds, []nodemanager.ActionKind{nodemanager.MarkHostBad, nodemanager.RelaunchNode}) {
		t.Errorf("fleet notices for c: %v, want its host marked bad, then its relaunch", kinds)
	}
	// Replaying the whole journal gives the same verdicts and round.
	c3 := newCore("job", st)
	if _, err := c3.restore(context.Background(), now); err != nil {
		t.Fatal(err)
	}
	if got := c3.job(); !proto.Equal(got.GetNodeCheck(), j.GetNodeCheck()) || got.GetRound() != 2 {
		t.Errorf("replayed check %v round %d, want %v round 2", got.GetNodeCheck(), got.GetRound(), j.GetNodeCheck())
	}
}

func TestNodeCheckDeadlineAndStaleReports(t *testing.T) {
	now := time.Unix(1000, 0)
	c := checkedCore(t, store.NewMemory(), now)
	ctx := context.Background()
	if err := c.apply(ctx, &jobstate.Event{Type: jobstate.EventCheckReport, Time: now, Node: "a", Round: 1, Check: &jobstate.CheckReport{Stage: 2}}); err == nil {
		t.Error("a report for a stage that is not running was accepted")
	}
	if err := c.apply(ctx, &jobstate.Event{Type: jobstate.EventCheckReport, Time: now, Node: "a", Round: 1}); err == nil {
		t.Error("a report without a result was accepted")
	}
	// Nobody reports: at the deadline every group failed stage 1; stage 2
	// checks each alone; nobody reports again: all four are faulty, and
	// the job keeps none of them.
	for i := 0; i < 2; i++ {
		d, ok := c.st.Check.Machine().NextDeadline()
		if !ok {
			t.Fatal("no deadline while the check runs")
		}
		now = d
		c.mu.Lock()
		e := c.checkDeadlineLocked(now)
		early := c.checkDeadlineLocked(now.Add(-time.Millisecond))
		c.mu.Unlock()
		if e == nil || early != nil {
			t.Fatalf("deadline tick at the deadline: %v, a moment before: %v", e, early)
		}
		if err := c.apply(ctx, e); err != nil { // what tick proposes, without the liveness timeouts
			t.Fatal(err)
		}
	}
	if ch := c.st.Check.Machine().Last(); !ch.Done || len(ch.Verdicts) != 4 {
		t.Fatalf("check after two deadlines: %+v", ch)
	}
}

func TestNodeCheckOffLeavesViewsAlone(t *testing.T) {
	now := time.Unix(1000, 0)
	c := configuredCore(t, store.NewMemory(), now)
	for _, id := range []string{"a", "b"} {
		req, _, _ := validateJoin(joinReq(id, rdzvConfig(2, 2)).Msg)
		if _, _, err := c.join(context.Background(), req, memoryReport{}, 0, now); err != nil {
			t.Fatal(err)
		}
	}
	v, _ := c.view("a")
	if v.GetAssignment() == nil || v.GetNodeCheck() != nil {
		t.Errorf("view of a job without the check: %v", v)
	}
	if c.job().GetNodeCheck() != nil {
		t.Error("GetJob shows a node check for a job without one")
	}
}

func TestNodeCheckConfigMustAgree(t *testing.T) {
	now := time.Unix(1000, 0)
	c := checkedCore(t, store.NewMemory(), now)
	cfg, err := validateRendezvous(rdzvConfig(3, 4))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.configure(context.Background(), *cfg, now); err == nil {
		t.Error("an agent without --network-check joined a job with the node check")
	}
}
