package master

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/master/jobstate"
	"github.com/roverml/rover/internal/nodecheck"
	"github.com/roverml/rover/internal/nodemanager"
	"github.com/roverml/rover/internal/shard"
	"github.com/roverml/rover/internal/store"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/testing/protocmp"
)

// The fixture journal: testdata/journal-v1/state is a state dir that a
// master of journal schema 2 and snapshot schema 1 wrote for a job that went
// through rendezvous rounds, node joins and losses, keys, worker failures
// and their diagnosis, datasets with leases and completions, a checkpoint
// storage declaration, memory snapshots, a node check that excluded a
// straggler and the node manager's state, with a snapshot and records after
// it. Every later master must restore it to the same views
// (testdata/journal-v1/views.json) and re-encode its records and snapshot
// byte for byte. `go test -run TestFixtureJournal -update-fixture` writes
// both again; do that only for a deliberate format change, and keep the old
// fixture too.

var updateFixture = flag.Bool("update-fixture", false, "rewrite testdata/journal-v1 (the fixture journal) with this code")

const (
	fixtureDir = "testdata/journal-v1"
	fixtureJob = "fixture"
)

// fixtureNow is when the fixture's masters restore it.
var fixtureNow = time.Unix(1_700_000_000, 0).UTC()

// fixtureViews is what the fixture test compares: the job's status, each
// node's view, the keys and the datasets of the restored master.
type fixtureViews struct {
	Job      json.RawMessage            `json:"job"`
	Views    map[string]json.RawMessage `json:"views"`
	Keys     map[string]string          `json:"keys"`
	Datasets map[string]shard.Status    `json:"datasets"`
	Config   json.RawMessage            `json:"config"`
}

var fixtureNodes = []string{"a", "b", "c"}

func TestFixtureJournal(t *testing.T) {
	if *updateFixture {
		writeFixture(t)
	}
	ctx := context.Background()
	dir := t.TempDir()
	db, err := os.ReadFile(filepath.Join(fixtureDir, "state", "journal.db"))
	if err != nil {
		t.Fatalf("read the fixture journal (write it with -update-fixture): %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "journal.db"), db, 0o600); err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	contents, err := st.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if contents.Snapshot == nil || len(contents.Records) < 5 {
		t.Fatalf("the fixture has no snapshot or too few records after it (%d)", len(contents.Records))
	}
	c := newCore(fixtureJob, st)
	if _, err := c.restore(ctx, fixtureNow); err != nil {
		t.Fatalf("restore the fixture journal: %v", err)
	}
	checkFixtureDetails(t, c)
	got := viewsOf(t, c)
	want := readFixtureViews(t)
	gotJob := decodeJob(t, got.Job)
	// The fixture predates the goodput accounting: a job without it is
	// accounted from the first round that forms after, in the replayed
	// records, and its goodput is in no views file.
	if g := gotJob.GetGoodput(); g.GetPhase() != "startup" {
		t.Errorf("restored goodput is %v, want an accounting started at the round the records form", g)
	}
	gotJob.Goodput = nil
	if diff := cmp.Diff(decodeJob(t, want.Job), gotJob, protocmp.Transform()); diff != "" {
		t.Errorf("restored job status differs (-want +got):\n%s", diff)
	}
	for _, id := range fixtureNodes {
		if diff := cmp.Diff(decodeView(t, want.Views[id]), decodeView(t, got.Views[id]), protocmp.Transform()); diff != "" {
			t.Errorf("restored view of node %s differs (-want +got):\n%s", id, diff)
		}
	}
	if diff := cmp.Diff(want.Keys, got.Keys); diff != "" {
		t.Errorf("restored keys differ (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want.Datasets, got.Datasets); diff != "" {
		t.Errorf("restored datasets differ (-want +got):\n%s", diff)
	}
	var compact bytes.Buffer
	_ = json.Compact(&compact, want.Config)
	if !bytes.Equal(compact.Bytes(), got.Config) {
		t.Errorf("restored configuration encodes as\n%s\nwant\n%s", got.Config, want.Config)
	}

	// The records and the snapshot re-encode byte for byte: the journal
	// format is unchanged.
	for i, rec := range contents.Records {
		e, err := jobstate.UnmarshalEvent(rec)
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		b, err := e.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b, rec) {
			t.Errorf("record %d re-encodes as\n%s\nwant\n%s", i, b, rec)
		}
	}
	snapOnly := store.NewMemory()
	_ = snapOnly.Snapshot(ctx, contents.Snapshot)
	s := newCore(fixtureJob, snapOnly)
	if _, err := s.restore(ctx, fixtureNow); err != nil {
		t.Fatal(err)
	}
	if got := stateOf(t, s); got != string(contents.Snapshot) {
		t.Errorf("the snapshot re-encodes differently:\n%s", cmp.Diff(string(contents.Snapshot), got))
	}
}

// checkFixtureDetails spells out the fixture's state, so that a reader sees
// what it holds (the views file has the rest).
func checkFixtureDetails(t *testing.T, c *core) {
	t.Helper()
	j := c.job()
	// b's loss came within the blame window of a's failure, so the
	// restart that failure spent was given back.
	if j.GetRound() != 4 || j.GetRestartCount() != 0 || j.GetJobState() != roverv1.JobState_JOB_STATE_RUNNING || j.GetRoundOpen() || j.GetWorldSize() != 4 {
		t.Errorf("job: round %d (open %v), world size %d, %d restarts, %v; want round 4 closed, world size 4, no restarts, running",
			j.GetRound(), j.GetRoundOpen(), j.GetWorldSize(), j.GetRestartCount(), j.GetJobState())
	}
	var causes []string
	for _, f := range j.GetFailures() {
		causes = append(causes, fmt.Sprintf("%s@%d:%s/%s", f.GetNodeId(), f.GetRound(), f.GetCause(), f.GetAction()))
	}
	if want := []string{"a@2:user-error/restart-in-place", "b@3:out-of-memory/re-form-world"}; !cmp.Equal(causes, want) {
		t.Errorf("failures %v, want %v", causes, want)
	}
	var members []string
	for _, n := range j.GetNodes() {
		if n.GetGroupRank() >= 0 {
			members = append(members, n.GetNodeId())
		}
	}
	if want := []string{"a", "c"}; !cmp.Equal(members, want) {
		t.Errorf("members %v, want %v", members, want)
	}
	// c, excluded by round 1's check, came back: round 4's world checks it.
	if nc := j.GetNodeCheck(); nc.GetRound() != 4 || !nc.GetRunning() || nc.GetStage() != 2 {
		t.Errorf("node check %v, want round 4's running in stage 2", nc)
	}
	cfg := c.config()
	if cfg.Checkpoint.URL != "/fixture/ckpt" || cfg.Checkpoint.Keep != 3 || cfg.Checkpoint.KeepDefault ||
		cfg.NodeCheck == nil || !cfg.NodeCheck.ExcludeStragglers || cfg.Hang.Timeout != 10*time.Minute || cfg.Hang.Policy != 1 {
		t.Errorf("configuration %+v, want the declared keep 3, a node check excluding stragglers, hang detection after 10m", cfg)
	}
	if v, ok, _ := c.key("rdzv/2"); !ok || string(v) != "world 2" {
		t.Errorf("key rdzv/2 = %q, %v", v, ok)
	}
	if s, err := c.datasetStatus("train"); err != nil || s.DoneSamples != 400 || s.TodoSamples != 600 || s.DoingSamples != 0 {
		t.Errorf("dataset train: %+v, %v; want 400 samples done, 600 to do (the last lease expired)", s, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if step, ok := c.st.Memory.Step(4); len(c.st.Memory.Held()["a"]) != 2 || step != 8 || !ok || len(c.st.Datasets.Holders()) != 1 || c.st.Fleet.Saved() == nil || c.st.Failures.History().Len() != 1 {
		t.Errorf("held %v, memory %v, lease holders %v, fleet %d bytes, %d diagnoses: want all set",
			c.st.Memory.Held(), c.st.Memory.Agreement(), c.st.Datasets.Holders(), len(c.st.Fleet.Saved()), c.st.Failures.History().Len())
	}
}

func viewsOf(t *testing.T, c *core) fixtureViews {
	t.Helper()
	out := fixtureViews{Views: map[string]json.RawMessage{}, Keys: map[string]string{}, Datasets: map[string]shard.Status{}}
	var err error
	if out.Job, err = protojson.Marshal(c.job()); err != nil {
		t.Fatal(err)
	}
	for _, id := range fixtureNodes {
		v, _ := c.view(id)
		if out.Views[id], err = protojson.Marshal(v); err != nil {
			t.Fatal(err)
		}
	}
	c.mu.Lock()
	for k, v := range c.st.Keys.Map() {
		out.Keys[k] = string(v)
	}
	datasets := c.st.Datasets.Machine().Datasets()
	c.mu.Unlock()
	for _, d := range datasets {
		if out.Datasets[d], err = c.datasetStatus(d); err != nil {
			t.Fatal(err)
		}
	}
	if out.Config, err = json.Marshal(c.config()); err != nil {
		t.Fatal(err)
	}
	return out
}

func readFixtureViews(t *testing.T) fixtureViews {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(fixtureDir, "views.json"))
	if err != nil {
		t.Fatal(err)
	}
	var v fixtureViews
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func decodeJob(t *testing.T, b []byte) *roverv1.GetJobResponse {
	t.Helper()
	m := &roverv1.GetJobResponse{}
	if err := protojson.Unmarshal(b, m); err != nil {
		t.Fatal(err)
	}
	return m
}

func decodeView(t *testing.T, b []byte) *roverv1.NodeView {
	t.Helper()
	m := &roverv1.NodeView{}
	if err := protojson.Unmarshal(b, m); err != nil {
		t.Fatal(err)
	}
	return m
}

// writeFixture runs the fixture's job against a state dir and writes it,
// with its views, to testdata/journal-v1.
func writeFixture(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st, err := store.Open(dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := newCore(fixtureJob, st)
	if _, err := c.restore(ctx, fixtureNow); err != nil {
		t.Fatal(err)
	}
	now := fixtureNow.Add(-time.Hour)
	step := func(d time.Duration) time.Time { now = now.Add(d); return now }
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("fixture: %s: %v", what, err)
		}
	}
	rc := &roverv1.RendezvousConfig{
		MinNodes: 2, MaxNodes: 3, NodeUnit: 1, MaxRestarts: 3,
		LastCallMillis: 1000, JoinTimeoutMillis: 600_000, HeartbeatTimeoutMillis: 600_000, DisconnectGraceMillis: 2000,
		NodeCheck:         &roverv1.NodeCheckConfig{Enabled: true, ExcludeStragglers: true},
		HangTimeoutMillis: 600_000, HangDetection: 1,
	}
	cfg, err := validateRendezvous(rc)
	must("validate the configuration", err)
	cfg.Checkpoint.URL, cfg.Checkpoint.Keep, cfg.Checkpoint.KeepDefault = "/fixture/ckpt", 1, true
	must("configure", c.configure(ctx, *cfg, step(time.Second)))

	mgr, err := nodemanager.New(nodemanager.Spec{Job: fixtureJob, Groups: []nodemanager.GroupSpec{{
		MinNodes: 2, MaxNodes: 3, RestartCount: 2, Argv: []string{"rover", "run", "train.py"},
	}}})
	must("node manager", err)
	mgr.Start(now)
	fleet, err := mgr.MarshalState()
	must("node manager state", err)
	must("fleet", c.apply(ctx, &jobstate.Event{Type: jobstate.EventFleet, Time: step(time.Second), Fleet: fleet, Nodes: 3}))

	join := func(id string, round int, snapStep int64) {
		t.Helper()
		req, _, err := validateJoin(&roverv1.JoinRequest{NodeId: id, RequestedRank: -1, LocalWorldSize: 2, Addr: "10.0.0." + id, Rendezvous: rc})
		must("validate join", err)
		held := []jobstate.MemorySnapshot{
			{LocalRank: 0, Step: snapStep, Rank: 0, WorldSize: 4, Mode: jobstate.ModeReplicated},
			{LocalRank: 1, Step: snapStep, Rank: 1, WorldSize: 4, Mode: jobstate.ModeReplicated},
		}
		_, _, err = c.join(ctx, req, memoryReport{snaps: held}, round, step(100*time.Millisecond))
		must("join "+id, err)
	}
	for _, id := range fixtureNodes {
		join(id, 0, 5)
	}
	must("tick", c.tick(ctx, step(2*time.Second)))

	// The node check of round 1's world: c is faulty, excluded.
	for i := 0; i < 10; i++ {
		ch := c.nodeCheck()
		if ch == nil || ch.Done {
			break
		}
		for _, id := range fixtureNodes {
			c.mu.Lock()
			world, stage, groups := c.st.Check.Machine().Tasks(id)
			c.mu.Unlock()
			for _, g := range groups {
				result := nodecheck.Result{OK: true, Elapsed: time.Second, Compute: time.Second / 2, Collective: time.Second / 2}
				if id == "c" {
					result = nodecheck.Result{Local: true, Error: "the check program could not start"}
				}
				err := c.apply(ctx, &jobstate.Event{Type: jobstate.EventCheckReport, Time: step(time.Second), Node: id, Round: world,
					Check: &jobstate.CheckReport{Stage: stage, Group: g.ID, Result: result}})
				must("node check report", err)
			}
		}
	}
	if ch := c.nodeCheck(); ch == nil || !ch.Done {
		t.Fatalf("fixture: the node check did not end: %+v", ch)
	}
	for _, id := range []string{"a", "b"} {
		join(id, 2, 6)
	}
	must("tick", c.tick(ctx, step(2*time.Second)))

	must("set key", c.apply(ctx, &jobstate.Event{Type: jobstate.EventSetKey, Time: step(time.Second), Key: "rdzv/2", Value: []byte("world 2")}))
	must("set key", c.apply(ctx, &jobstate.Event{Type: jobstate.EventSetKey, Time: step(time.Second), Key: "store/x", Value: []byte{0, 1, 2}}))
	keep := 3
	_, err = c.declareStorage(ctx, jobstate.StorageDeclaration{Node: "a", URL: "/fixture/ckpt", Keep: &keep})
	must("declare storage", err)

	train := shard.Dataset{Name: "train", Size: 1000, BatchSize: 10, ShardSize: 100, Epochs: 2, Shuffle: true, Seed: 7, Mode: shard.Leased, LeaseTimeout: time.Minute}
	_, err = c.shardCall(ctx, &jobstate.Event{Type: jobstate.EventRegisterDataset, Time: step(time.Second), Shard: &jobstate.ShardEvent{Dataset: "train", Spec: &train}})
	must("register", err)
	lease := func(worker string, max int) []shard.Lease {
		t.Helper()
		out, err := c.shardCall(ctx, &jobstate.Event{Type: jobstate.EventLease, Time: step(time.Second), Shard: &jobstate.ShardEvent{Dataset: "train", Worker: worker, Max: max}})
		must("lease", err)
		return out.Lease.Shards
	}
	complete := func(worker string, ls []shard.Lease, ok bool) {
		t.Helper()
		var rs []jobstate.ShardResult
		for _, l := range ls {
			rs = append(rs, jobstate.ShardResult{ID: l.ID, OK: ok})
		}
		_, err := c.shardCall(ctx, &jobstate.Event{Type: jobstate.EventCompleteShards, Time: step(time.Second), Shard: &jobstate.ShardEvent{Dataset: "train", Worker: worker, Results: rs}})
		must("complete", err)
	}
	complete("a/0", lease("a/0", 2), true)
	complete("b/0", lease("b/0", 1), false)
	held := lease("b/0", 1)
	_, _, err = c.shardBatch(ctx, step(time.Second), []jobstate.BatchOp{
		{Type: jobstate.BatchComplete, Shard: &jobstate.ShardEvent{Dataset: "train", Worker: "b/0", Results: []jobstate.ShardResult{{ID: held[0].ID, OK: true}}}},
		{Type: jobstate.BatchLease, Shard: &jobstate.ShardEvent{Dataset: "train", Worker: "b/0", Max: 1, Request: 1}},
	})
	must("batch", err)

	// A user error in round 2 restarts the workers in round 3.
	failure, err := protojson.Marshal(&roverv1.WorkerFailure{NodeId: "a", Rank: 1, NodeRank: 0, Host: "10.0.0.a", ExitCode: 1, Round: 2,
		Message: "ValueError: the batch has 3 columns, want 4", Traceback: valueErrorTrace})
	must("failure record", err)
	must("worker failed", c.apply(ctx, &jobstate.Event{Type: jobstate.EventWorkerFailed, Time: step(time.Second), Node: "a", Round: 2, Failures: []json.RawMessage{failure}}))
	for _, id := range []string{"a", "b"} {
		join(id, 3, 7)
	}
	must("tick", c.tick(ctx, step(2*time.Second)))
	must("snapshot", c.snapshotNow(ctx))

	// After the snapshot: more keys and leases, and b is killed for memory,
	// which ends round 3's world; c comes back.
	must("set key", c.apply(ctx, &jobstate.Event{Type: jobstate.EventSetKey, Time: step(time.Second), Key: "rdzv/3", Value: []byte("world 3")}))
	complete("a/0", lease("a/0", 1), true)
	lease("b/0", 2)
	must("node lost", c.apply(ctx, &jobstate.Event{Type: jobstate.EventNodeLost, Time: step(time.Second), Node: "b", Reason: "OOMKilled"}))
	join("a", 4, 8)
	join("c", 4, 8)
	must("tick", c.tick(ctx, step(2*time.Second)))
	lease("c/0", 1)
	must("shard tick", c.tick(ctx, step(2*time.Minute)))
	must("close the store", st.Close())

	if err := os.RemoveAll(filepath.Join(fixtureDir, "state")); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(fixtureDir, "state"), 0o755); err != nil {
		t.Fatal(err)
	}
	db, err := os.ReadFile(filepath.Join(dir, "journal.db"))
	must("read the journal", err)
	must("write the journal", os.WriteFile(filepath.Join(fixtureDir, "state", "journal.db"), db, 0o644))

	st2, err := store.Open(dir, store.Options{})
	must("reopen", err)
	defer st2.Close()
	r := newCore(fixtureJob, st2)
	_, err = r.restore(ctx, fixtureNow)
	must("restore", err)
	b, err := json.MarshalIndent(viewsOf(t, r), "", "  ")
	must("encode the views", err)
	must("write the views", os.WriteFile(filepath.Join(fixtureDir, "views.json"), append(b, '\n'), 0o644))
}
