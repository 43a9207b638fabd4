package master

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"

	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/dashboard"
)

// TestDashboardShowsTheMastersJob mounts the dashboard on a real master's
// DashboardSource: /api/job is GetJob's answer, a worker failure wakes the
// dashboard's streams, and the master's event log shows it.
func TestDashboardShowsTheMastersJob(t *testing.T) {
	m, c := startMaster(t, Config{Job: "dash-job"})
	src := m.DashboardSource(nil)
	srv := httptest.NewServer(dashboard.Handler(src))
	t.Cleanup(srv.Close)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cfg := rdzvConfig(2, 2)
	var streams []session
	for i, id := range []string{"a", "b"} {
		streams = append(streams, openSessionRank(ctx, t, c, id, i, cfg))
	}
	for _, s := range streams {
		nextView(t, s, func(v *roverv1.NodeView) bool { return v.GetAssignment() != nil })
	}

	changed := src.Changed()
	if _, err := c.ReportFailure(ctx, connect.NewRequest(&roverv1.ReportFailureRequest{NodeId: "a", Round: 1,
		Failures: []*roverv1.WorkerFailure{{Rank: 1, ExitCode: 1, Message: "RuntimeError: boom"}}})); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changed:
	case <-ctx.Done():
		t.Fatal("the dashboard's source did not report the failure within 60s")
	}

	resp, err := http.Get(srv.URL + "/api/job")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var j roverv1.GetJobResponse
	if err := protojson.Unmarshal(body, &j); err != nil {
		t.Fatalf("/api/job: %v: %s", err, body)
	}
	if j.GetRunId() != "dash-job" || len(j.GetNodes()) != 2 || len(j.GetFailures()) != 1 || j.GetFailures()[0].GetMessage() != "RuntimeError: boom" {
		t.Errorf("/api/job = %v, want job dash-job with nodes a and b and the failure", &j)
	}
	if got := m.Status(); got.GetRound() != j.GetRound() || got.GetRestartCount() != j.GetRestartCount() {
		t.Errorf("/api/job round %d restarts %d, Status round %d restarts %d", j.GetRound(), j.GetRestartCount(), got.GetRound(), got.GetRestartCount())
	}
	var failed *dashboard.Event
	for {
		evs := src.Events(0, 100)
		for i, e := range evs {
			if e.Kind == "worker_failed" {
				failed = &evs[i]
			}
		}
		if failed != nil {
			break
		}
		select { // the failure's event is appended after its answer's journal write
		case <-src.Changed():
		case <-ctx.Done():
			t.Fatalf("the master's event log shows no worker_failed event: %v", evs)
		}
	}
	if failed.Node != "a" || failed.Fields["rank"] != "1" || failed.Fields["exit_code"] != "1" || failed.Severity != "Warning" {
		t.Errorf("the failure's event = %+v, want node a, rank 1, exit code 1, a Warning", *failed)
	}

	ended, cancelEnded := context.WithCancel(context.Background())
	cancelEnded()
	if _, err := src.Job(ended); err == nil {
		t.Error("Job with an ended context: no error")
	}
}

// oneEvent is an event log of one event.
type oneEvent struct{ ch chan struct{} }

func (oneEvent) Events(since uint64, max int) []dashboard.Event {
	if since >= 1 {
		return nil
	}
	return []dashboard.Event{{Seq: 1, Kind: "rendezvous_completed", Message: "round 1"}}
}

func (o oneEvent) Changed() <-chan struct{} { return o.ch }

func TestDashboardSourceTakesTheEventLog(t *testing.T) {
	m, _ := startMaster(t, Config{Job: "dash-job"})
	log := oneEvent{ch: make(chan struct{})}
	src := m.DashboardSource(log)
	if evs := src.Events(0, 10); len(evs) != 1 || evs[0].Kind != "rendezvous_completed" {
		t.Errorf("events %v, want the log's one event", evs)
	}
	if src.Changed() != (<-chan struct{})(log.ch) {
		t.Error("Changed is not the event log's")
	}
	j, err := src.Job(context.Background())
	if err != nil || j.GetRunId() != "dash-job" {
		t.Errorf("Job = %v, %v; want job dash-job", j, err)
	}
}
