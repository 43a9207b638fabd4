package master

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/go-cmp/cmp"
	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/api/rover/v1/roverv1connect"
	"github.com/roverml/rover/internal/autoscale"
	"github.com/roverml/rover/internal/client"
	"github.com/roverml/rover/internal/jobconfig/configwire"
	"github.com/roverml/rover/internal/nodemanager"
	"github.com/roverml/rover/internal/platform"
	"github.com/roverml/rover/internal/platform/platformtest"
	"github.com/roverml/rover/internal/store"
)

// The tests of a master that owns its nodes (fleet.go) drive a real master
// on a loopback port whose platform is a platformtest.Fake: the test plays
// the platform (nodes start, exit, are evicted) and the agents (they join
// with the platform's node ids, report, go away), and waits, each time
// with a deadline, for what the master must do in answer.

// waitDeadline bounds the waits of these tests (and waitFor's, in
// commit_test.go): far more than any answer takes.
const waitDeadline = 30 * time.Second

// fleetJob is a job of two worker nodes ("train-worker-0-0" and
// "train-worker-1-0"), both needed, each relaunched at most restarts times.
func fleetJob(restarts int) nodemanager.Spec {
	return nodemanager.Spec{Job: "train", Groups: []nodemanager.GroupSpec{{
		MinNodes: 2, MaxNodes: 2, RestartCount: restarts,
		Argv: []string{"rover", "run", "--nnodes=2", "train.py"}, Env: map[string]string{"TRAIN_SEED": "7"},
	}}}
}

// fleetMaster is a running master that owns its nodes.
type fleetMaster struct {
	m    *Master
	c    roverv1connect.MasterServiceClient
	rdzv *roverv1.RendezvousConfig
	// stop cancels Run's context and returns what Run returned.
	stop func() error
}

type fleetOptions struct {
	spec      nodemanager.Spec
	platform  platform.Platform
	rdzv      *roverv1.RendezvousConfig // nil: rdzvConfig(2, 2)
	store     Store                     // nil: a new in-memory store
	exitGrace time.Duration             // 0: a minute (longer than any test waits)
	keepNodes bool                      // NodesConfig.KeepNodes
	autoScale *autoscale.Config         // Config.AutoScale
}

// startFleet runs a master whose rendezvous is preset and which owns the
// nodes of o.spec on o.platform, until the test ends or stop is called.
func startFleet(t *testing.T, o fleetOptions) fleetMaster {
	t.Helper()
	if o.rdzv == nil {
		o.rdzv = rdzvConfig(2, 2)
	}
	if o.store == nil {
		o.store = store.NewMemory()
	}
	if o.exitGrace == 0 {
		o.exitGrace = time.Minute
	}
	preset := configwire.FromProto(o.rdzv)
	ctx, cancel := context.WithCancel(context.Background())
	m, err := New(ctx, Config{Listen: "127.0.0.1:0", Job: o.spec.Job, Token: testToken, Store: o.store, Preset: &preset,
		Nodes:     &NodesConfig{Platform: o.platform, Name: "fake", Spec: o.spec, ExitGrace: o.exitGrace, KeepNodes: o.keepNodes},
		AutoScale: o.autoScale})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	stop := sync.OnceValue(func() error { cancel(); return <-done })
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("master Run: %v", err)
		}
	})
	hc := client.NewHTTPClient()
	t.Cleanup(hc.CloseIdleConnections)
	return fleetMaster{m: m, c: client.New(hc, m.Addr(), testToken), rdzv: o.rdzv, stop: stop}
}

func newFake() *platformtest.Fake {
	return platformtest.New(time.Now, platform.Capabilities{Hosts: true, AvoidHosts: true})
}

// createdIDs returns the id of every node created, sorted: the fleet
// makes the nodes of one decision concurrently, so they reach the
// platform in any order.
func createdIDs(f *platformtest.Fake) []string {
	var ids []string
	for _, s := range f.Created() {
		ids = append(ids, s.ID)
	}
	slices.Sort(ids)
	return ids
}

// heldIDs returns the nodes the platform holds, sorted (see createdIDs).
func heldIDs(f *platformtest.Fake) []string {
	return slices.Sorted(slices.Values(f.Held()))
}

// createdSpec returns the spec the platform was given for node id.
func createdSpec(t *testing.T, f *platformtest.Fake, id string) platform.NodeSpec {
	t.Helper()
	for _, s := range f.Created() {
		if s.ID == id {
			return s
		}
	}
	t.Fatalf("node %s was not created; created %v", id, createdIDs(f))
	return platform.NodeSpec{}
}

// waitCreated waits until the platform was asked for exactly the nodes
// ids, in whatever order, and for no other.
func waitCreated(t *testing.T, f *platformtest.Fake, ids ...string) {
	t.Helper()
	want := slices.Sorted(slices.Values(ids))
	waitFor(t, "create of "+strings.Join(ids, ", "), func() bool { return len(f.Created()) >= len(ids) })
	if got := createdIDs(f); !slices.Equal(got, want) {
		t.Fatalf("created %v, want %v", got, want)
	}
}

// waitDeleted waits until the platform has removed id.
func waitDeleted(t *testing.T, f *platformtest.Fake, id string) {
	t.Helper()
	waitFor(t, "delete of "+id, func() bool { return slices.Contains(f.Deleted(), id) })
}

func (fm fleetMaster) job(t *testing.T) *roverv1.GetJobResponse {
	t.Helper()
	r, err := fm.c.GetJob(context.Background(), connect.NewRequest(&roverv1.GetJobRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	return r.Msg
}

// join opens the session of the agent of a platform node, with ctx, and
// waits for its assignment in round.
func (fm fleetMaster) join(ctx context.Context, t *testing.T, id string, rank int, round int64) session {
	t.Helper()
	s := openSessionRank(ctx, t, fm.c, id, rank, fm.rdzv)
	nextView(t, s, func(v *roverv1.NodeView) bool { return v.GetAssignment().GetRound() == round })
	return s
}

// joinAll has the agents of ids (node ranks in order) join round 1.
func (fm fleetMaster) joinAll(ctx context.Context, t *testing.T, ids ...string) []session {
	t.Helper()
	var ss []session
	for i, id := range ids {
		ss = append(ss, openSessionRank(ctx, t, fm.c, id, i, fm.rdzv))
	}
	for _, s := range ss {
		nextView(t, s, func(v *roverv1.NodeView) bool { return v.GetAssignment().GetRound() == 1 })
	}
	return ss
}

func managed(t *testing.T, r *roverv1.GetJobResponse, rank int) *roverv1.ManagedNode {
	t.Helper()
	for _, n := range r.GetManagedNodes() {
		if int(n.GetRank()) == rank {
			return n
		}
	}
	t.Fatalf("no managed node of rank %d in %v", rank, r.GetManagedNodes())
	return nil
}

func nodeRow(t *testing.T, r *roverv1.GetJobResponse, id string) *roverv1.NodeStatus {
	t.Helper()
	for _, n := range r.GetNodes() {
		if n.GetNodeId() == id {
			return n
		}
	}
	t.Fatalf("no node %s in %v", id, r.GetNodes())
	return nil
}

func waitGone(t *testing.T, m *Master) {
	t.Helper()
	select {
	case <-m.NodesGone():
	case <-time.After(waitDeadline):
		t.Fatalf("NodesGone not closed within %v", waitDeadline)
	}
}

func waitOutcome(t *testing.T, m *Master) Outcome {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitDeadline)
	defer cancel()
	out, err := m.WaitFinished(ctx)
	if err != nil {
		t.Fatalf("the job did not end: %v", err)
	}
	return out
}

// TestFleetStartsNodes: the master creates MaxNodes nodes with the spec's
// command line, and GetJob shows them as managed, with what the platform
// and the agents report of them.
func TestFleetStartsNodes(t *testing.T) {
	fake := newFake()
	sp := fleetJob(2)
	fm := startFleet(t, fleetOptions{spec: sp, platform: fake})
	waitCreated(t, fake, "train-worker-0-0", "train-worker-1-0")
	for i, id := range []string{"train-worker-0-0", "train-worker-1-0"} {
		want := platform.NodeSpec{Job: "train", Group: "worker", Rank: i, ID: id, Argv: sp.Groups[0].Argv, Env: sp.Groups[0].Env}
		if diff := cmp.Diff(want, createdSpec(t, fake, id)); diff != "" {
			t.Errorf("node %d (-want +got):\n%s", i, diff)
		}
	}
	r := fm.job(t)
	if r.GetPlatform() != "fake" || r.GetRelaunches() != 0 || len(r.GetManagedNodes()) != 2 {
		t.Fatalf("platform %q, %d relaunches, managed nodes %v; want 2 nodes on fake", r.GetPlatform(), r.GetRelaunches(), r.GetManagedNodes())
	}
	for i, n := range r.GetManagedNodes() {
		if n.GetNodeId() != createdIDs(fake)[i] || n.GetGroup() != "worker" || n.GetState() != "Pending" || n.GetBudget() != 2 {
			t.Errorf("managed node %d: %v, want %s pending with a budget of 2", i, n, createdIDs(fake)[i])
		}
	}

	if err := fake.Start("train-worker-1-0", "host-b"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "node 1 running on host-b", func() bool {
		n := managed(t, fm.job(t), 1)
		return n.GetState() == "Running" && n.GetHost() == "host-b"
	})
	ctx, cancel := context.WithTimeout(context.Background(), waitDeadline)
	defer cancel()
	fm.joinAll(ctx, t, "train-worker-0-0", "train-worker-1-0")
	if n := nodeRow(t, fm.job(t), "train-worker-1-0"); n.GetHost() != "host-b" || n.GetRelaunchCount() != 0 {
		t.Errorf("agent row %v, want host-b and no relaunch", n)
	}
}

// TestFleetRelaunchesFailedNode: a node killed on the platform is lost to
// the rendezvous at once (its world ends), deleted, and relaunched as the
// same rank's next node, whose agent then joins as such.
func TestFleetRelaunchesFailedNode(t *testing.T) {
	fake := newFake()
	fm := startFleet(t, fleetOptions{spec: fleetJob(3), platform: fake})
	waitCreated(t, fake, "train-worker-0-0", "train-worker-1-0")
	ctx, cancel := context.WithTimeout(context.Background(), waitDeadline)
	defer cancel()
	fm.joinAll(ctx, t, "train-worker-0-0", "train-worker-1-0")
	for i, id := range []string{"train-worker-0-0", "train-worker-1-0"} {
		if err := fake.Start(id, []string{"host-a", "host-b"}[i]); err != nil {
			t.Fatal(err)
		}
	}

	if err := fake.Exit("train-worker-0-0", 137, 9, "OOMKilled"); err != nil {
		t.Fatal(err)
	}
	waitCreated(t, fake, "train-worker-0-0", "train-worker-1-0", "train-worker-0-1")
	waitDeleted(t, fake, "train-worker-0-0")
	if s := createdSpec(t, fake, "train-worker-0-1"); s.Rank != 0 || s.Relaunch != 1 {
		t.Errorf("relaunch spec: rank %d relaunch %d, want rank 0 relaunch 1", s.Rank, s.Relaunch)
	}
	r := fm.job(t)
	if r.GetRelaunches() != 1 || r.GetRound() != 2 || r.GetJobState() != roverv1.JobState_JOB_STATE_RUNNING {
		t.Errorf("relaunches %d, round %d, %v; want 1 relaunch and round 2 of a running job", r.GetRelaunches(), r.GetRound(), r.GetJobState())
	}
	wantCauses(t, r, map[string]int32{"oom": 1})
	if fs := r.GetFailures(); len(fs) != 1 || fs[0].GetNodeId() != "train-worker-0-0" || fs[0].GetAction() != "relaunch-node" ||
		!strings.Contains(fs[0].GetMessage(), "exited with code 137 (signal 9, OOMKilled) on host-a") {
		t.Errorf("failures %v, want the killed node lost, saying how it exited", fs)
	}
	if n := managed(t, r, 0); n.GetNodeId() != "train-worker-0-1" || n.GetRelaunches() != 1 || n.GetState() != "Pending" ||
		!strings.Contains(n.GetLastExit(), "signal 9") {
		t.Errorf("managed rank 0: %v, want train-worker-0-1 pending after 1 relaunch, saying how the last one ended", n)
	}
	if n := managed(t, r, 1); n.GetNodeId() != "train-worker-1-0" || n.GetRelaunches() != 0 {
		t.Errorf("managed rank 1: %v, want train-worker-1-0 untouched", n)
	}
	if n := nodeRow(t, r, "train-worker-0-0"); !n.GetLost() || !strings.Contains(n.GetLostReason(), "exited with code 137") {
		t.Errorf("node row of the killed node: %v, want it lost for the platform's reason", n)
	}

	// The survivor and the replacement's agent, under its own id, form
	// the next round.
	rejoin := joinReq("train-worker-1-0", fm.rdzv)
	rejoin.Msg.Round, rejoin.Msg.RequestedRank = 2, 1
	if _, err := fm.c.Join(ctx, rejoin); err != nil {
		t.Fatal(err)
	}
	fm.join(ctx, t, "train-worker-0-1", 0, 2)
	if n := nodeRow(t, fm.job(t), "train-worker-0-1"); n.GetRelaunchCount() != 1 {
		t.Errorf("the replacement's row %v, want relaunch count 1", n)
	}
}

// TestFleetBudgetExhaustedFailsJob: a rank out of relaunches leaves the
// group below its minimum, which fails the job, naming the budget; then
// every node is deleted, the one that never exits after ExitGrace.
func TestFleetBudgetExhaustedFailsJob(t *testing.T) {
	fake := newFake()
	fm := startFleet(t, fleetOptions{spec: fleetJob(1), platform: fake, exitGrace: 100 * time.Millisecond})
	waitCreated(t, fake, "train-worker-0-0", "train-worker-1-0")
	if err := fake.Exit("train-worker-0-0", 1, 0, ""); err != nil {
		t.Fatal(err)
	}
	waitCreated(t, fake, "train-worker-0-0", "train-worker-1-0", "train-worker-0-1")
	if err := fake.Exit("train-worker-0-1", 137, 9, ""); err != nil {
		t.Fatal(err)
	}
	out := waitOutcome(t, fm.m)
	if out.Succeeded || !strings.Contains(out.Reason, "relaunch budget of 1 is used up") || !strings.Contains(out.Reason, "train-worker-0-1") {
		t.Errorf("outcome %+v, want a failure naming the node and its used-up budget", out)
	}
	waitGone(t, fm.m)
	if held := fake.Held(); len(held) != 0 {
		t.Errorf("the platform still holds %v after NodesGone", held)
	}
	if d := fake.Deleted(); !slices.Contains(d, "train-worker-1-0") || !slices.Contains(d, "train-worker-0-1") {
		t.Errorf("deleted %v, want every node", d)
	}
	if got := createdIDs(fake); len(got) != 3 {
		t.Errorf("created %v after the failure, want no more nodes", got)
	}
	r := fm.job(t)
	if r.GetJobState() != roverv1.JobState_JOB_STATE_FAILED || r.GetReason() != out.Reason || r.GetRelaunches() != 1 {
		t.Errorf("GetJob: %v (%q), %d relaunches; want FAILED with the outcome's reason", r.GetJobState(), r.GetReason(), r.GetRelaunches())
	}
	if n := managed(t, r, 0); n.GetState() != "Failed" {
		t.Errorf("managed rank 0: %v, want Failed", n)
	}
}

// TestFleetEndsWithTheJob: once the job has succeeded, a node that exits
// with a failure is recorded, not relaunched, and the master deletes every
// node as soon as all have exited, without waiting out ExitGrace.
func TestFleetEndsWithTheJob(t *testing.T) {
	fake := newFake()
	fm := startFleet(t, fleetOptions{spec: fleetJob(3), platform: fake, exitGrace: time.Hour})
	waitCreated(t, fake, "train-worker-0-0", "train-worker-1-0")
	ctx, cancel := context.WithTimeout(context.Background(), waitDeadline)
	defer cancel()
	ids := []string{"train-worker-0-0", "train-worker-1-0"}
	fm.joinAll(ctx, t, ids...)
	for _, id := range ids {
		if _, err := fm.c.ReportSuccess(ctx, connect.NewRequest(&roverv1.ReportSuccessRequest{NodeId: id, Round: 1})); err != nil {
			t.Fatal(err)
		}
	}
	if out := waitOutcome(t, fm.m); !out.Succeeded {
		t.Fatalf("outcome %+v, want success", out)
	}
	// One agent is killed on its way out, the other exits cleanly.
	if err := fake.Exit("train-worker-0-0", 137, 9, ""); err != nil {
		t.Fatal(err)
	}
	if err := fake.Exit("train-worker-1-0", 0, 0, ""); err != nil {
		t.Fatal(err)
	}
	waitGone(t, fm.m)
	if got := createdIDs(fake); !slices.Equal(got, ids) {
		t.Errorf("created %v, want no relaunch after the job ended", got)
	}
	if held := fake.Held(); len(held) != 0 {
		t.Errorf("the platform still holds %v after NodesGone", held)
	}
	r := fm.job(t)
	if r.GetRelaunches() != 0 || r.GetJobState() != roverv1.JobState_JOB_STATE_SUCCEEDED {
		t.Errorf("%v with %d relaunches, want SUCCEEDED with none", r.GetJobState(), r.GetRelaunches())
	}
	if n := managed(t, r, 0); n.GetState() != "Failed" || !strings.Contains(n.GetReason(), "after the job ended; not relaunched") {
		t.Errorf("managed rank 0: %v, want Failed after the job ended", n)
	}
	if n := managed(t, r, 1); n.GetState() != "Succeeded" {
		t.Errorf("managed rank 1: %v, want Succeeded", n)
	}
}

// TestFleetRelaunchesLostAgent: an agent whose session ends and stays away
// past the disconnect grace is lost; its node is deleted and relaunched.
func TestFleetRelaunchesLostAgent(t *testing.T) {
	fake := newFake()
	cfg := rdzvConfig(2, 2)
	cfg.DisconnectGraceMillis = 100
	fm := startFleet(t, fleetOptions{spec: fleetJob(3), platform: fake, rdzv: cfg})
	waitCreated(t, fake, "train-worker-0-0", "train-worker-1-0")
	ctx, cancel := context.WithTimeout(context.Background(), waitDeadline)
	defer cancel()
	ss := fm.joinAll(ctx, t, "train-worker-0-0", "train-worker-1-0")
	if err := ss[1].CloseRequest(); err != nil {
		t.Fatal(err)
	}
	waitCreated(t, fake, "train-worker-0-0", "train-worker-1-0", "train-worker-1-1")
	waitDeleted(t, fake, "train-worker-1-0")
	r := fm.job(t)
	if n := nodeRow(t, r, "train-worker-1-0"); !n.GetLost() {
		t.Errorf("the silent agent's row %v, want it lost", n)
	}
	if n := managed(t, r, 1); n.GetRelaunches() != 1 || !strings.Contains(n.GetLastExit(), "was lost") {
		t.Errorf("managed rank 1: %v, want relaunched once because it was lost", n)
	}
	if r.GetRelaunches() != 1 || r.GetRound() != 2 {
		t.Errorf("%d relaunches in round %d, want 1 in round 2", r.GetRelaunches(), r.GetRound())
	}
	wantCauses(t, r, map[string]int32{"node_lost": 1})
}

// TestFleetRelaunchesOnDiagnosis: a worker failure whose diagnosis is a
// hardware fault relaunches the node it ran on, away from its host.
func TestFleetRelaunchesOnDiagnosis(t *testing.T) {
	tests := []struct {
		name    string
		failure *roverv1.WorkerFailure
	}{
		{"GPU driver exit code", &roverv1.WorkerFailure{ExitCode: 201, Message: "worker exited with 201"}},
		{"Xid in the log", &roverv1.WorkerFailure{ExitCode: 1, Message: "CUDA error",
			LogTail: "NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, GPU has fallen off the bus.\n"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fake := newFake()
			fm := startFleet(t, fleetOptions{spec: fleetJob(3), platform: fake})
			waitCreated(t, fake, "train-worker-0-0", "train-worker-1-0")
			ctx, cancel := context.WithTimeout(context.Background(), waitDeadline)
			defer cancel()
			fm.joinAll(ctx, t, "train-worker-0-0", "train-worker-1-0")
			f := tc.failure
			f.NodeRank, f.Rank, f.LocalRank, f.Host = 1, 2, 0, "gpu-7"
			if _, err := fm.c.ReportFailure(ctx, connect.NewRequest(&roverv1.ReportFailureRequest{
				NodeId: "train-worker-1-0", Round: 1, Failures: []*roverv1.WorkerFailure{f}})); err != nil {
				t.Fatal(err)
			}
			waitCreated(t, fake, "train-worker-0-0", "train-worker-1-0", "train-worker-1-1")
			waitDeleted(t, fake, "train-worker-1-0")
			if s := createdSpec(t, fake, "train-worker-1-1"); !slices.Contains(s.AvoidHosts, "gpu-7") {
				t.Errorf("the replacement avoids %v, want the bad host gpu-7", s.AvoidHosts)
			}
			r := fm.job(t)
			if fs := r.GetFailures(); len(fs) == 0 || fs[0].GetAction() != "relaunch-node" || fs[0].GetCause() != "hardware" {
				t.Errorf("failures %v, want the first diagnosed hardware, relaunch-node", fs)
			}
			if n := managed(t, r, 1); n.GetRelaunches() != 1 || !strings.Contains(n.GetLastExit(), "diagnosis") {
				t.Errorf("managed rank 1: %v, want relaunched once by the diagnosis", n)
			}
			wantCauses(t, r, map[string]int32{"diagnosis": 1})
			if n := managed(t, r, 0); n.GetRelaunches() != 0 {
				t.Errorf("managed rank 0: %v, want untouched", n)
			}
		})
	}
}
