package master

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/roverml/rover/internal/eventlog"
	"github.com/roverml/rover/internal/master/jobstate"
	"github.com/roverml/rover/internal/nodecheck"
	"github.com/roverml/rover/internal/nodemanager"
	"github.com/roverml/rover/internal/platform"
	"github.com/roverml/rover/internal/rendezvous"
	"github.com/roverml/rover/internal/stall"
	"github.com/roverml/rover/internal/store"
)

// eventsCore is a master's core restored from st with its event log in
// dir, as New makes it, configured for a job of exactly 2 nodes.
func eventsCore(t *testing.T, st Store, dir string, now time.Time) *core {
	t.Helper()
	c, err := restoreCore(context.Background(), Config{Job: "job", Store: st, StateDir: dir, Clock: &fakeClock{now: now}}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.events.Close() })
	cfg, err := validateRendezvous(rdzvConfig(2, 2))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.configure(context.Background(), *cfg, now); err != nil {
		t.Fatal(err)
	}
	return c
}

func failRank(t *testing.T, c *core, node string, round, rank, exit int, traceback string, at time.Time) {
	t.Helper()
	raw, err := failureCodec{}.Encode(jobstate.Failure{NodeID: node, Rank: rank, ExitCode: exit, Round: int64(round),
		TimeUnixNanos: at.UnixNano(), Message: "boom", Traceback: traceback})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.apply(context.Background(), &jobstate.Event{Type: jobstate.EventWorkerFailed, Time: at, Node: node, Round: round,
		Failures: []json.RawMessage{raw}}); err != nil {
		t.Fatal(err)
	}
}

func succeed(t *testing.T, c *core, node string, round int, at time.Time) {
	t.Helper()
	if err := c.apply(context.Background(), &jobstate.Event{Type: jobstate.EventNodeSucceeded, Time: at, Node: node, Round: round}); err != nil {
		t.Fatal(err)
	}
}

// eventRow is what the test compares of an event.
type eventRow struct {
	Seq      uint64
	Kind     eventlog.Kind
	Severity eventlog.Severity
	Node     string
	Round    int
	Cause    string
	Action   string
}

func rows(evs []eventlog.Event) []eventRow {
	out := make([]eventRow, len(evs))
	for i, e := range evs {
		out[i] = eventRow{e.Seq, e.Kind, e.Severity, e.Node, e.Round, e.Cause, e.Action}
	}
	return out
}

// TestEventsOfATimeline drives a job through a world, a worker's crash,
// its restart, a master restart and the job's end, and checks the event
// log the transitions make: each kind once, in order, numbered on across
// the master's restart, and nothing derived from the journal's replay.
func TestEventsOfATimeline(t *testing.T) {
	st, dir := store.NewMemory(), t.TempDir()
	t0 := time.Unix(1000, 0).UTC()
	c := eventsCore(t, st, dir, t0)
	joinNode(t, c, "a", 2, 0, t0)
	joinNode(t, c, "b", 2, 0, t0.Add(time.Second))
	failRank(t, c, "b", 1, 3, 1, "Traceback (most recent call last):\n  File \"train.py\"\nRuntimeError: boom", t0.Add(time.Minute))
	joinNode(t, c, "a", 2, 2, t0.Add(61*time.Second))
	joinNode(t, c, "b", 2, 2, t0.Add(62*time.Second))

	got, _ := c.events.Since(0, 0)
	want := []eventRow{
		{1, eventlog.MasterStarted, eventlog.Normal, "", 0, "", ""},
		{2, eventlog.RendezvousCompleted, eventlog.Normal, "", 1, "", ""},
		{3, eventlog.WorkerFailed, eventlog.Warning, "b", 1, "user-error", "restart-in-place"},
		{4, eventlog.Restart, eventlog.Warning, "", 2, "", ""},
		{5, eventlog.RendezvousCompleted, eventlog.Normal, "", 2, "", ""},
	}
	if diff := cmp.Diff(want, rows(got)); diff != "" {
		t.Fatalf("events (-want +got):\n%s", diff)
	}
	f := got[2]
	if f.Rank == nil || *f.Rank != 3 || f.ExitCode == nil || *f.ExitCode != 1 || !strings.Contains(f.Excerpt, "RuntimeError: boom") {
		t.Errorf("worker_failed: rank %v exit %v excerpt %q; want rank 3, exit 1 and the traceback", f.Rank, f.ExitCode, f.Excerpt)
	}
	if !f.Time.Equal(t0.Add(time.Minute)) {
		t.Errorf("worker_failed at %v, want the transition's time %v", f.Time, t0.Add(time.Minute))
	}
	if got[4].WorldSize != 4 || got[4].Nodes != 2 {
		t.Errorf("rendezvous_completed: %d workers on %d nodes, want 4 on 2", got[4].WorldSize, got[4].Nodes)
	}

	// The master restarts: the replay derives nothing, numbering goes on.
	c.events.Close()
	c2 := eventsCore(t, st, dir, t0.Add(2*time.Minute))
	succeed(t, c2, "a", 2, t0.Add(3*time.Minute))
	succeed(t, c2, "b", 2, t0.Add(3*time.Minute))
	got, oldest := c2.events.Since(5, 0)
	want = []eventRow{
		{6, eventlog.MasterStarted, eventlog.Normal, "", 2, "", ""},
		{7, eventlog.JobSucceeded, eventlog.Normal, "", 2, "", ""},
	}
	if diff := cmp.Diff(want, rows(got)); diff != "" {
		t.Fatalf("events after the master's restart (-want +got):\n%s", diff)
	}
	if oldest != 1 {
		t.Errorf("the restarted master's ring starts at %d, want 1 (read back from events.jsonl)", oldest)
	}
}

// TestEventsOfALostNodeAndAFailedJob: a node lost by its heartbeats takes
// the blame for its world; a job out of restarts fails.
func TestEventsOfALostNodeAndAFailedJob(t *testing.T) {
	t0 := time.Unix(1000, 0).UTC()
	c := eventsCore(t, store.NewMemory(), "", t0)
	joinNode(t, c, "a", 2, 0, t0)
	joinNode(t, c, "b", 2, 0, t0)
	if err := c.apply(context.Background(), &jobstate.Event{Type: jobstate.EventNodeLost, Time: t0.Add(time.Minute), Node: "b", Reason: "no heartbeat for 30s"}); err != nil {
		t.Fatal(err)
	}
	if err := c.apply(context.Background(), &jobstate.Event{Type: jobstate.EventFailNodes, Time: t0.Add(2 * time.Minute), Reason: "the node manager gave up"}); err != nil {
		t.Fatal(err)
	}
	got, _ := c.events.Since(2, 0) // after master_started and the world
	kinds := make([]eventlog.Kind, len(got))
	for i, e := range got {
		kinds[i] = e.Kind
	}
	want := []eventlog.Kind{eventlog.WorkerFailed, eventlog.NodeLost, eventlog.Restart, eventlog.JobFailed}
	if diff := cmp.Diff(want, kinds); diff != "" {
		t.Fatalf("event kinds (-want +got):\n%s\n%+v", diff, got)
	}
	if got[0].Node != "b" || !strings.Contains(got[0].Message, "was lost") {
		t.Errorf("the lost node's failure: %+v", got[0])
	}
	if got[1].Reason != "no heartbeat for 30s" || got[1].Severity != eventlog.Warning {
		t.Errorf("node_lost: %+v", got[1])
	}
	if got[3].Reason != "the node manager gave up" {
		t.Errorf("job_failed: reason %q", got[3].Reason)
	}
}

// TestDeriveEvents: the events of single transitions, from the status
// before and after and the effects, with the transition's time.
func TestDeriveEvents(t *testing.T) {
	at := time.Unix(2000, 0).UTC()
	running := rendezvous.Status{Job: rendezvous.Running, Round: 3, WorldRound: 3, WorldSize: 4, GroupWorldSize: 2, MaxRestarts: 3}
	ended := running
	ended.Job, ended.Reason = rendezvous.Failed, "out of restarts"
	relaunch := running
	relaunch.Round, relaunch.Open = 4, true
	check := &nodecheck.Check{World: 3, Verdicts: []nodecheck.Verdict{
		{Node: "a", Kind: nodecheck.Passed, Reason: "fine"},
		{Node: "b", Kind: nodecheck.Faulty, Excluded: true, Reason: "its group timed out"},
	}}
	for _, tc := range []struct {
		name          string
		e             jobstate.Event
		before, after rendezvous.Status
		fx            jobstate.Effects
		want          []eventRow
	}{
		{"a node lost while the job runs", jobstate.Event{Type: jobstate.EventNodeLost, Node: "b", Reason: "pod deleted"}, running, relaunch, jobstate.Effects{},
			[]eventRow{{0, eventlog.NodeLost, eventlog.Warning, "b", 4, "", ""}, {0, eventlog.Restart, eventlog.Normal, "", 4, "", ""}}},
		{"a node scaled away", jobstate.Event{Type: jobstate.EventNodeLost, Node: "c", Planned: true}, running, running, jobstate.Effects{},
			[]eventRow{{0, eventlog.NodeLost, eventlog.Normal, "c", 3, "", ""}}},
		{"agents leaving after the end", jobstate.Event{Type: jobstate.EventNodeLost, Node: "b", Reason: "disconnected"}, ended, ended, jobstate.Effects{}, nil},
		{"the job fails", jobstate.Event{Type: jobstate.EventFailNodes, Reason: "out of restarts"}, running, ended, jobstate.Effects{},
			[]eventRow{{0, eventlog.JobFailed, eventlog.Warning, "", 3, "", ""}}},
		{"a node check's verdicts", jobstate.Event{Type: jobstate.EventCheckTick}, running, running, jobstate.Effects{CheckEnded: check},
			[]eventRow{{0, eventlog.NodeCheck, eventlog.Normal, "a", 3, "", ""}, {0, eventlog.NodeCheck, eventlog.Warning, "b", 3, "", ""}}},
		{"a key set", jobstate.Event{Type: jobstate.EventSetKey, Key: "k"}, running, running, jobstate.Effects{Keys: true}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.e.Time = at
			got := deriveEvents(&tc.e, tc.before, tc.after, tc.fx)
			if diff := cmp.Diff(tc.want, rows(got), cmpopts.EquateEmpty()); diff != "" {
				t.Fatalf("events (-want +got):\n%s", diff)
			}
			for _, e := range got {
				if !e.Time.Equal(at) || e.Message == "" {
					t.Errorf("%s at %v with message %q: want the transition's time and a message", e.Kind, e.Time, e.Message)
				}
			}
		})
	}
	if got := deriveEvents(&jobstate.Event{Type: jobstate.EventCheckTick, Time: at}, running, running, jobstate.Effects{CheckEnded: check}); !strings.Contains(got[1].Message, "leaves the job") || got[1].Verdict != "faulty" {
		t.Errorf("an excluded node's verdict: %+v", got[1])
	}
}

// TestDriverEvents: the events the master's loops derive from what the
// progress tracker and the node manager return.
func TestDriverEvents(t *testing.T) {
	at := time.Unix(3000, 0).UTC()
	tick := jobstate.ProgressTick{StragglersChanged: true, Stragglers: []string{"b"}, StragglerReason: "b takes 3x the median",
		Hang: &jobstate.HangNotice{ID: 1, Policy: stall.Restart, Reason: "no worker made progress for 10s"}}
	got := progressEvents(tick, 2, at)
	want := []eventRow{{0, eventlog.Straggler, eventlog.Warning, "b", 2, "", ""}, {0, eventlog.Hang, eventlog.Warning, "", 2, "", stall.Restart.String()}}
	if diff := cmp.Diff(want, rows(got)); diff != "" {
		t.Errorf("progress events (-want +got):\n%s", diff)
	}
	if got := progressEvents(jobstate.ProgressTick{StragglersChanged: true}, 2, at); len(got) != 1 || got[0].Severity != eventlog.Normal {
		t.Errorf("stragglers gone: %+v, want one Normal straggler event", got)
	}
	if got := progressEvents(jobstate.ProgressTick{}, 2, at); len(got) != 0 {
		t.Errorf("a quiet tick made events: %+v", got)
	}
	cmds := []nodemanager.Command{
		{Kind: nodemanager.CreateNode, NodeID: "w-0-0", Spec: platform.NodeSpec{Rank: 0}, Reason: "start worker rank 0 of 2"},
		{Kind: nodemanager.DeleteNode, NodeID: "w-1-0", Reason: "its pod was deleted"},
		{Kind: nodemanager.CreateNode, NodeID: "w-1-1", Spec: platform.NodeSpec{Rank: 1, Relaunch: 1}, Cause: nodemanager.CauseDeleted, Reason: "relaunch rank 1: its pod was deleted"},
	}
	got = commandEvents(cmds, at)
	if diff := cmp.Diff([]eventRow{{0, eventlog.NodeRelaunched, eventlog.Warning, "w-1-1", 0, "deleted", ""}}, rows(got)); diff != "" {
		t.Errorf("node manager events (-want +got):\n%s", diff)
	}
	if want := "node w-1-1 (node rank 1) is relaunched (cause deleted): relaunch rank 1: its pod was deleted"; len(got) != 1 || got[0].Message != want {
		t.Errorf("node manager events %+v, want one saying %q", got, want)
	}
}

// TestCheckpointCommitEvent: a step committed once its last rank is
// durable is one checkpoint_committed event, with its step; the reports
// before it make none.
func TestCheckpointCommitEvent(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	j := newCkptJob(t, ctx, 2)
	before := j.m.core.events.Last()
	if !j.commit(ctx, 10) {
		t.Fatal("step 10 was not committed")
	}
	evs, _ := j.m.core.events.Since(before, 0)
	var commits []eventlog.Event
	for _, e := range evs {
		if e.Kind == eventlog.CheckpointCommitted {
			commits = append(commits, e)
		}
	}
	if len(commits) != 1 || commits[0].Step == nil || *commits[0].Step != 10 || commits[0].Round != 1 {
		t.Fatalf("checkpoint events %+v, want one for step 10 of round 1", commits)
	}
}
