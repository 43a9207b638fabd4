package master

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/api/rover/v1/roverv1connect"
	"github.com/roverml/rover/internal/client"
	"github.com/roverml/rover/internal/master/jobstate"
	"github.com/roverml/rover/internal/store"
)

const testToken = "secret-token"

// startMaster runs a real master on a loopback port for the test's duration.
func startMaster(t testing.TB, cfg Config) (*Master, roverv1connect.MasterServiceClient) {
	t.Helper()
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	if cfg.Token == "" {
		cfg.Token = testToken
	}
	ctx, cancel := context.WithCancel(context.Background())
	m, err := New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("master Run: %v", err)
		}
	})
	hc := client.NewHTTPClient()
	t.Cleanup(hc.CloseIdleConnections)
	return m, client.New(hc, m.Addr(), cfg.Token)
}

func rdzvConfig(min, max int) *roverv1.RendezvousConfig {
	return &roverv1.RendezvousConfig{
		MinNodes: int32(min), MaxNodes: int32(max), NodeUnit: 1, MaxRestarts: 1,
		LastCallMillis: 200, JoinTimeoutMillis: 60_000, HeartbeatTimeoutMillis: 60_000, DisconnectGraceMillis: 1000,
	}
}

func joinReq(id string, cfg *roverv1.RendezvousConfig) *connect.Request[roverv1.JoinRequest] {
	return connect.NewRequest(&roverv1.JoinRequest{NodeId: id, RequestedRank: -1, LocalWorldSize: 2, Addr: "127.0.0.1", Rendezvous: cfg})
}

type session = *connect.BidiStreamForClient[roverv1.SessionRequest, roverv1.SessionResponse]

// openSessionRank opens a node's session with a join asking for a node rank.
func openSessionRank(ctx context.Context, t testing.TB, c roverv1connect.MasterServiceClient, id string, rank int, cfg *roverv1.RendezvousConfig) session {
	t.Helper()
	s := c.Session(ctx)
	t.Cleanup(func() { _ = s.CloseRequest() })
	join := joinReq(id, cfg).Msg
	join.RequestedRank = int32(rank)
	if err := s.Send(&roverv1.SessionRequest{Msg: &roverv1.SessionRequest_Join{Join: join}}); err != nil {
		t.Fatalf("join %s: %v", id, err)
	}
	return s
}

// nextView receives views until one satisfies ok.
func nextView(t testing.TB, s session, ok func(*roverv1.NodeView) bool) *roverv1.NodeView {
	t.Helper()
	for {
		msg, err := s.Receive()
		if err != nil {
			t.Fatalf("session ended: %v", err)
		}
		if v := msg.GetView(); ok(v) {
			return v
		}
	}
}

func TestRoundOverRPC(t *testing.T) {
	_, c := startMaster(t, Config{Job: "job1"})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := rdzvConfig(2, 2)
	var streams []session
	for i, id := range []string{"a", "b"} {
		streams = append(streams, openSessionRank(ctx, t, c, id, i, cfg))
	}
	for i, s := range streams {
		v := nextView(t, s, func(v *roverv1.NodeView) bool { return v.GetAssignment() != nil })
		a := v.GetAssignment()
		if a.GetGroupRank() != int32(i) || a.GetWorldSize() != 4 || a.GetRankOffset() != int32(2*i) || v.GetRound() != 1 {
			t.Errorf("node %d: assignment %v in round %d, want group rank %d, world 4, offset %d, round 1", i, a, v.GetRound(), i, 2*i)
		}
	}
	// A failure on node a opens round 2, and node b hears of it at once.
	_, err := c.ReportFailure(ctx, connect.NewRequest(&roverv1.ReportFailureRequest{NodeId: "a", Round: 1,
		Failures: []*roverv1.WorkerFailure{{Rank: 1, ExitCode: 1, Message: "boom"}}}))
	if err != nil {
		t.Fatal(err)
	}
	v := nextView(t, streams[1], func(v *roverv1.NodeView) bool { return v.GetRound() == 2 })
	if !v.GetRoundOpen() || v.GetRestartCount() != 1 {
		t.Errorf("after failure: round open %v restarts %d, want open and 1", v.GetRoundOpen(), v.GetRestartCount())
	}
	// Both rejoin; the round closes without waiting for the last call.
	for _, id := range []string{"a", "b"} {
		req := joinReq(id, cfg)
		req.Msg.Round = 2
		req.Msg.RequestedRank = map[string]int32{"a": 0, "b": 1}[id]
		if _, err := c.Join(ctx, req); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Join(ctx, req); err != nil { // a retried join is idempotent
			t.Fatal(err)
		}
	}
	nextView(t, streams[0], func(v *roverv1.NodeView) bool { return v.GetAssignment().GetRound() == 2 })
	// A second failure exhausts the budget of one restart.
	if _, err := c.ReportFailure(ctx, connect.NewRequest(&roverv1.ReportFailureRequest{NodeId: "b", Round: 2,
		Failures: []*roverv1.WorkerFailure{{Rank: 3, ExitCode: 7, Message: "bad"}}})); err != nil {
		t.Fatal(err)
	}
	v = nextView(t, streams[0], func(v *roverv1.NodeView) bool { return v.GetJobState() != roverv1.JobState_JOB_STATE_RUNNING })
	if v.GetJobState() != roverv1.JobState_JOB_STATE_FAILED || len(v.GetFailures()) != 2 || v.GetFailures()[1].GetRound() != 2 {
		t.Errorf("final view: state %v, failures %v; want failed with both failures", v.GetJobState(), v.GetFailures())
	}
}

func TestKeyValueWaits(t *testing.T) {
	_, c := startMaster(t, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got := make(chan *roverv1.GetKeyResponse, 1)
	go func() {
		r, err := c.GetKey(ctx, connect.NewRequest(&roverv1.GetKeyRequest{Key: "k", WaitMillis: 20_000}))
		if err != nil {
			t.Error(err)
		}
		got <- r.Msg
	}()
	time.Sleep(50 * time.Millisecond)
	if _, err := c.SetKey(ctx, connect.NewRequest(&roverv1.SetKeyRequest{Key: "k", Value: []byte("v")})); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if !r.GetFound() || string(r.GetValue()) != "v" {
		t.Errorf("GetKey = %v, want found v", r)
	}
	r2, err := c.GetKey(ctx, connect.NewRequest(&roverv1.GetKeyRequest{Key: "missing", WaitMillis: 10}))
	if err != nil || r2.Msg.GetFound() {
		t.Errorf("GetKey(missing) = %v, %v; want not found", r2, err)
	}
}

func TestRejectsWrongToken(t *testing.T) {
	m, _ := startMaster(t, Config{})
	hc := client.NewHTTPClient()
	defer hc.CloseIdleConnections()
	bad := client.New(hc, m.Addr(), "wrong")
	ctx := context.Background()
	_, err := bad.GetJob(ctx, connect.NewRequest(&roverv1.GetJobRequest{}))
	if connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("GetJob with a wrong token: %v, want Unauthenticated", err)
	}
	s := bad.Session(ctx)
	defer s.CloseRequest()
	_ = s.Send(&roverv1.SessionRequest{Msg: &roverv1.SessionRequest_Join{Join: joinReq("a", rdzvConfig(1, 1)).Msg}})
	if _, err := s.Receive(); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("Session with a wrong token: %v, want Unauthenticated", err)
	}
}

func TestInvalidRequests(t *testing.T) {
	_, c := startMaster(t, Config{})
	ctx := context.Background()
	good := rdzvConfig(1, 2)
	cases := []struct {
		name string
		call func() error
		code connect.Code
	}{
		{"empty node id", func() error { _, err := c.Join(ctx, joinReq("", good)); return err }, connect.CodeInvalidArgument},
		{"zero local world", func() error {
			r := joinReq("a", good)
			r.Msg.LocalWorldSize = 0
			_, err := c.Join(ctx, r)
			return err
		}, connect.CodeInvalidArgument},
		{"min above max", func() error { _, err := c.Join(ctx, joinReq("a", rdzvConfig(3, 2))); return err }, connect.CodeInvalidArgument},
		{"no rendezvous", func() error { _, err := c.Join(ctx, joinReq("a", nil)); return err }, connect.CodeInvalidArgument},
		{"negative timeout", func() error {
			cfg := rdzvConfig(1, 2)
			cfg.LastCallMillis = -5
			_, err := c.Join(ctx, joinReq("a", cfg))
			return err
		}, connect.CodeInvalidArgument},
		{"session without a join", func() error {
			s := c.Session(ctx)
			defer s.CloseRequest()
			_ = s.Send(&roverv1.SessionRequest{Msg: &roverv1.SessionRequest_Heartbeat{Heartbeat: &roverv1.Heartbeat{}}})
			_, err := s.Receive()
			return err
		}, connect.CodeInvalidArgument},
		{"report from an unknown node", func() error {
			_, err := c.ReportSuccess(ctx, connect.NewRequest(&roverv1.ReportSuccessRequest{NodeId: "nobody", Round: 1}))
			return err
		}, connect.CodeFailedPrecondition},
		{"empty key", func() error {
			_, err := c.SetKey(ctx, connect.NewRequest(&roverv1.SetKeyRequest{}))
			return err
		}, connect.CodeInvalidArgument},
		{"huge wait", func() error {
			_, err := c.GetKey(ctx, connect.NewRequest(&roverv1.GetKeyRequest{Key: "k", WaitMillis: 1 << 50}))
			return err
		}, connect.CodeInvalidArgument},
		{"negative round", func() error {
			_, err := c.ReportSuccess(ctx, connect.NewRequest(&roverv1.ReportSuccessRequest{NodeId: "a", Round: -1}))
			return err
		}, connect.CodeInvalidArgument},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.call(); connect.CodeOf(err) != tc.code {
				t.Errorf("got %v, want code %v", err, tc.code)
			}
		})
	}
	// A good join still works after all that, and a conflicting one is refused.
	if _, err := c.Join(ctx, joinReq("a", good)); err != nil {
		t.Fatalf("good join: %v", err)
	}
	_, err := c.Join(ctx, joinReq("b", rdzvConfig(1, 3)))
	if connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Errorf("conflicting join: %v, want FailedPrecondition", err)
	}
}

// configuredCore is a core journaling to st, configured for a job of
// exactly 2 nodes at now.
func configuredCore(t *testing.T, st Store, now time.Time) *core {
	t.Helper()
	c := newCore("job", st)
	cfg, err := validateRendezvous(rdzvConfig(2, 2))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.configure(context.Background(), *cfg, now); err != nil {
		t.Fatal(err)
	}
	return c
}

// restoredCore is a core restored from st (empty or not) and configured
// for a job of exactly nodes nodes at now, as a master starts.
func restoredCore(tb testing.TB, st Store, nodes int, now time.Time) *core {
	tb.Helper()
	c := newCore("job", st)
	if _, err := c.restore(context.Background(), now); err != nil {
		tb.Fatal(err)
	}
	cfg, err := validateRendezvous(rdzvConfig(nodes, nodes))
	if err != nil {
		tb.Fatal(err)
	}
	if err := c.configure(context.Background(), *cfg, now); err != nil {
		tb.Fatal(err)
	}
	return c
}

// joinNode joins node id to c's round at, for a job of exactly nodes nodes.
func joinNode(tb testing.TB, c *core, id string, nodes, round int, at time.Time) {
	tb.Helper()
	req, _, err := validateJoin(joinReq(id, rdzvConfig(nodes, nodes)).Msg)
	if err != nil {
		tb.Fatal(err)
	}
	if _, _, err := c.join(context.Background(), req, memoryReport{}, round, at); err != nil {
		tb.Fatal(err)
	}
}

func TestRestoreFromJournal(t *testing.T) {
	st := store.NewMemory()
	ctx := context.Background()
	now := time.Unix(1000, 0)
	c1 := configuredCore(t, st, now)
	for _, id := range []string{"a", "b"} {
		req, _, err := validateJoin(joinReq(id, rdzvConfig(2, 2)).Msg)
		if err != nil {
			t.Fatal(err)
		}
		held := []jobstate.MemorySnapshot{
			{LocalRank: 0, Step: 7, Rank: 0, WorldSize: 4, Mode: jobstate.ModeReplicated},
			{LocalRank: 1, Step: 7, Rank: 1, WorldSize: 4, Mode: jobstate.ModeReplicated},
		}
		if _, _, err := c1.join(ctx, req, memoryReport{snaps: held}, 0, now); err != nil {
			t.Fatal(err)
		}
	}
	if err := c1.apply(ctx, &jobstate.Event{Type: jobstate.EventSetKey, Time: now, Key: "k", Value: []byte("v")}); err != nil {
		t.Fatal(err)
	}
	want, _ := c1.view("b")
	if want.GetAssignment().MemoryStep == nil || want.GetAssignment().GetMemoryStep() != 7 {
		t.Fatalf("view %v: want memory step 7 agreed", want)
	}

	c2 := newCore("job", st)
	if _, err := c2.restore(ctx, now.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	got, _ := c2.view("b")
	if got.GetAssignment().String() != want.GetAssignment().String() || got.GetRound() != want.GetRound() {
		t.Errorf("restored view %v, want %v", got, want)
	}
	if v, ok, _ := c2.key("k"); !ok || string(v) != "v" {
		t.Errorf("restored key k = %q, %v", v, ok)
	}
}

func TestJournalFailureRejectsTransition(t *testing.T) {
	st := store.NewMemory()
	c := newCore("job", st)
	st.Close()
	err := c.apply(context.Background(), &jobstate.Event{Type: jobstate.EventSetKey, Key: "k", Value: []byte("v")})
	if !errors.Is(err, store.ErrClosed) {
		t.Fatalf("apply with a broken store: %v, want ErrClosed", err)
	}
	if _, ok, _ := c.key("k"); ok {
		t.Error("a transition that was not persisted was applied")
	}
}

// TestRestoreRefusesUnknownEvents replays a journal with a record that a
// newer master wrote: the replay fails and names it, rather than skipping a
// transition and serving a state that never was.
func TestRestoreRefusesUnknownEvents(t *testing.T) {
	st := store.NewMemory()
	ctx := context.Background()
	now := time.Unix(1000, 0)
	configuredCore(t, st, now)
	rec, err := (&jobstate.Event{Type: "from_the_future", Time: now}).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Append(ctx, [][]byte{rec}); err != nil {
		t.Fatal(err)
	}
	_, err = newCore("job", st).restore(ctx, now)
	if err == nil || !strings.Contains(err.Error(), `"from_the_future" is unknown`) {
		t.Fatalf("restore: %v, want an error naming the unknown event", err)
	}
}
