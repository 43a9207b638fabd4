package master

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/jobview"
	"github.com/roverml/rover/internal/master/jobstate"
	"github.com/roverml/rover/internal/store"
)

// TestRestartSaysWhereEachNodeRestoredFrom: after a restart in which node
// b fetched its shards from its backup peer a and a restored from its own
// memory, the master's restart line and the job's goodput (what rover
// status and the summary show) say so per node, with the times the agents
// reported; a resume event's oversized peer name is dropped.
func TestRestartSaysWhereEachNodeRestoredFrom(t *testing.T) {
	ctx := context.Background()
	t0 := time.Unix(1000, 0)
	c := restoredCore(t, store.NewMemory(), 2, t0)
	var logs bytes.Buffer
	c.log = slog.New(slog.NewTextHandler(&logs, nil))
	sec := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	join := func(id string, at time.Time) {
		t.Helper()
		joinNode(t, c, id, 2, 0, at)
		if err := c.connected(id, true, at); err != nil {
			t.Fatal(err)
		}
	}
	var done []string
	beat := func(node string, round, step int64, at time.Time, events ...*roverv1.NodeEvent) {
		t.Helper()
		hb := &roverv1.Heartbeat{SentUnixNanos: at.UnixNano(), Events: events}
		if step > 0 {
			hb.Progress = &roverv1.NodeProgress{Round: round, Workers: []*roverv1.WorkerProgress{{Step: step, StepUnixNanos: at.UnixNano()}}}
		}
		if err := c.seen(node, at); err != nil {
			t.Fatal(err)
		}
		if _, r := c.goodputHeartbeat(node, hb, at); r != nil {
			logRestart(c.log, *r, c.peerRestores(int(r.NewRound)))
			done = append(done, r.Reason)
		}
	}
	started := func(round int64, at time.Time) *roverv1.NodeEvent {
		return &roverv1.NodeEvent{Kind: roverv1.NodeEventKind_NODE_EVENT_KIND_WORKERS_STARTED, Round: round, TimeUnixNanos: at.UnixNano()}
	}
	join("a", sec(0))
	join("b", sec(0))
	for _, n := range []string{"a", "b"} {
		beat(n, 1, 0, sec(1), started(1, sec(1)))
	}
	for s := int64(1); s <= 5; s++ {
		beat("a", 1, s, sec(float64(s)+1))
		beat("b", 1, s, sec(float64(s)+1))
	}
	if err := c.apply(ctx, &jobstate.Event{Type: jobstate.EventWorkerFailed, Time: sec(7), Node: "b", Round: 1, DiedAt: sec(6.9)}); err != nil {
		t.Fatal(err)
	}
	join("a", sec(8))
	join("b", sec(8))
	resumed := func(src roverv1.CheckpointSource, peer string, fetch, load time.Duration) *roverv1.NodeEvent {
		return &roverv1.NodeEvent{Kind: roverv1.NodeEventKind_NODE_EVENT_KIND_RESUMED, Round: 2, Step: 5, Source: src,
			TimeUnixNanos: sec(9.5).UnixNano(), Peer: peer, FetchNanos: int64(fetch), LoadNanos: int64(load)}
	}
	beat("a", 2, 0, sec(9.5), started(2, sec(9)), resumed(roverv1.CheckpointSource_CHECKPOINT_SOURCE_MEMORY, strings.Repeat("x", 300), 0, 50*time.Millisecond))
	beat("b", 2, 0, sec(9.5), started(2, sec(9)), resumed(roverv1.CheckpointSource_CHECKPOINT_SOURCE_BACKUP, "a", 250*time.Millisecond, 40*time.Millisecond))
	beat("a", 2, 6, sec(10.5))
	beat("b", 2, 6, sec(10.5))
	if len(done) != 1 {
		t.Fatalf("%d restarts completed, want 1:\n%s", len(done), logs.String())
	}
	want := "restored: a memory step 5 load 0.05s, b backup peer a (fetch 0.25s) step 5 load 0.04s"
	if !strings.Contains(logs.String(), want) {
		t.Errorf("the restart's line lacks %q:\n%s", want, logs.String())
	}
	rs := c.jobAt(sec(11)).GetGoodput().GetLatestRestarts()
	if len(rs) != 1 {
		t.Fatalf("%d restarts in the job's goodput, want 1", len(rs))
	}
	if got, want := jobview.RestoredFrom(rs[0]), "a memory step 5 load 0.05s, b backup peer a step 5 fetch 0.25s load 0.04s"; got != want {
		t.Errorf("the job's restart says %q, want %q", got, want)
	}
}
