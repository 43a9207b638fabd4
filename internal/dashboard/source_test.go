package dashboard_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"

	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/dashboard"
)

// scriptedSource is a Source the test changes: its job, its events and an
// error for Job.
type scriptedSource struct {
	mu      sync.Mutex
	job     *roverv1.GetJobResponse
	events  []dashboard.Event
	err     error
	changed chan struct{}
	looks   int // calls of Job
}

var _ dashboard.Source = (*scriptedSource)(nil)

func newScriptedSource(job *roverv1.GetJobResponse) *scriptedSource {
	return &scriptedSource{job: job, changed: make(chan struct{})}
}

func (s *scriptedSource) Job(ctx context.Context) (*roverv1.GetJobResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.looks++
	if s.err != nil {
		return nil, s.err
	}
	return proto.Clone(s.job).(*roverv1.GetJobResponse), nil
}

func (s *scriptedSource) Events(since uint64, max int) []dashboard.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []dashboard.Event
	for _, e := range s.events {
		if e.Seq > since && len(out) < max {
			out = append(out, e)
		}
	}
	return out
}

func (s *scriptedSource) Changed() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed
}

// update changes the job under the lock and wakes the streams.
func (s *scriptedSource) update(change func(j *roverv1.GetJobResponse)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	change(s.job)
	s.wakeLocked()
}

// addEvent appends an event with the next sequence number.
func (s *scriptedSource) addEvent(e dashboard.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e.Seq = uint64(len(s.events) + 1)
	s.events = append(s.events, e)
	s.wakeLocked()
}

func (s *scriptedSource) fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.err = err
	s.wakeLocked()
}

func (s *scriptedSource) wakeLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// serve starts a server for h that the test's cleanup closes, after the
// streams it opened later (cleanups run last first): a server waits for
// its open streams when it closes.
func serve(t testing.TB, h http.Handler) *httptest.Server {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

var errMasterGone = errors.New("master unreachable")

// runningJob is a job of two nodes in round 2, one restart behind it.
func runningJob() *roverv1.GetJobResponse {
	return &roverv1.GetJobResponse{
		RunId: "train-gpt", JobState: roverv1.JobState_JOB_STATE_RUNNING, Round: 2, WorldSize: 4,
		RestartCount: 1, MaxRestarts: 3, CheckpointStep: 40, Platform: "local", Relaunches: 1,
		Nodes: []*roverv1.NodeStatus{
			{NodeId: "node-a", NodeRank: 0, Addr: "10.0.0.1", GroupRank: 0, Host: "host-a"},
			{NodeId: "node-b", NodeRank: 1, Addr: "10.0.0.2", GroupRank: 1, Host: "host-b", RelaunchCount: 1},
		},
		ManagedNodes: []*roverv1.ManagedNode{
			{Group: "worker", Rank: 0, NodeId: "node-a", State: "Running", Budget: 3, Host: "host-a"},
			{Group: "worker", Rank: 1, NodeId: "node-b", State: "Running", Relaunches: 1, Budget: 3, Host: "host-b", LastExit: "exit 1 (node lost)"},
		},
		Progress: &roverv1.JobProgress{Step: 50, Nodes: []*roverv1.NodeStepTime{
			{NodeId: "node-a", NodeRank: 0, Step: 50, StepSeconds: 0.2, BusySeconds: 0.18, Samples: 8},
			{NodeId: "node-b", NodeRank: 1, Step: 50, StepSeconds: 0.5, BusySeconds: 0.45, Samples: 8, Straggler: true},
		}, Stragglers: []string{"node-b"}, StragglerReason: "2.5x the median step time"},
		Goodput: &roverv1.JobGoodput{Ratio: 0.8, WallSeconds: 100, GoodputSeconds: 80, Phase: "training", Step: 50, Saves: 4,
			Badput:         []*roverv1.GoodputCause{{Cause: "rendezvous", Seconds: 12}},
			LatestRestarts: []*roverv1.RestartPhases{{Round: 1, NewRound: 2, Reason: "worker crash", DowntimeSeconds: 8, Done: true}}},
		NodeCheck: &roverv1.NodeCheckStatus{Round: 1, Stage: 2, MedianMicros: 12000, Verdicts: []*roverv1.NodeCheckVerdict{
			{NodeId: "node-a", Verdict: "passed", TimeMicros: 11000},
			{NodeId: "node-b", Verdict: "straggler", TimeMicros: 30000, Reason: "2.5x the median"},
		}},
	}
}

func (s *scriptedSource) lookCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.looks
}
