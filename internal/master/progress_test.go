package master

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/api/rover/v1/roverv1connect"
)

// fakeClock is a Clock the test moves.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (f *fakeClock) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *fakeClock) advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
}

func beat(s session, t *testing.T, np *roverv1.NodeProgress) {
	t.Helper()
	if err := s.Send(&roverv1.SessionRequest{Msg: &roverv1.SessionRequest_Heartbeat{Heartbeat: &roverv1.Heartbeat{Progress: np}}}); err != nil {
		t.Fatalf("send a heartbeat: %v", err)
	}
}

func worker(step, steps int64, wall, cpu float64) *roverv1.WorkerProgress {
	return &roverv1.WorkerProgress{Step: step, Steps: steps, WallSeconds: wall, CpuSeconds: cpu}
}

// jobUntil polls GetJob until ok holds (the master handles heartbeats on
// its own goroutines), failing after a generous deadline.
func jobUntil(ctx context.Context, t *testing.T, c roverv1connect.MasterServiceClient, what string, ok func(*roverv1.GetJobResponse) bool) *roverv1.GetJobResponse {
	t.Helper()
	for {
		r, err := c.GetJob(ctx, connect.NewRequest(&roverv1.GetJobRequest{}))
		if err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		if ok(r.Msg) {
			return r.Msg
		}
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s; last: %v", what, r.Msg.GetProgress())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// TestHangRestartsWorkers drives the master's hang policy with a fake
// clock: after a completed step, no progress for the timeout sends every
// node a hang notice and (--hang-detection=2) restarts the workers in a new
// round, with a failure that says why.
func TestHangRestartsWorkers(t *testing.T) {
	fc := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	_, c := startMaster(t, Config{Job: "j", Clock: fc})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := rdzvConfig(1, 1)
	cfg.MaxRestarts, cfg.HangTimeoutMillis, cfg.HangDetection = 2, 10_000, 2
	s := openSessionRank(ctx, t, c, "a", 0, cfg)
	nextView(t, s, func(v *roverv1.NodeView) bool { return v.GetAssignment().GetRound() == 1 })
	beat(s, t, &roverv1.NodeProgress{Round: 1, Workers: []*roverv1.WorkerProgress{worker(1, 0, 0, 0)}})
	fc.advance(time.Second)
	beat(s, t, &roverv1.NodeProgress{Round: 1, Workers: []*roverv1.WorkerProgress{worker(2, 1, 1, 1)}})
	jobUntil(ctx, t, c, "step 2", func(j *roverv1.GetJobResponse) bool { return j.GetProgress().GetStep() == 2 })
	fc.advance(10 * time.Second)
	v := nextView(t, s, func(v *roverv1.NodeView) bool { return v.GetHang() != nil })
	if h := v.GetHang(); h.GetPolicy() != 2 || !strings.Contains(h.GetReason(), "no worker made progress for 10s (newest step 2, round 1)") {
		t.Errorf("hang notice %v", h)
	}
	if v.GetRound() != 2 { // the restart may come in the same view
		nextView(t, s, func(v *roverv1.NodeView) bool { return v.GetRound() == 2 && v.GetHang() != nil })
	}
	j := jobUntil(ctx, t, c, "the hang's failure", func(j *roverv1.GetJobResponse) bool { return len(j.GetFailures()) == 1 })
	if f := j.GetFailures()[0]; !strings.HasPrefix(f.GetMessage(), "hang: no worker made progress") || f.GetNodeId() != "a" || f.GetRound() != 1 {
		t.Errorf("the hang's failure: %v", f)
	}
	if p := j.GetProgress(); p.GetHangs() != 1 || p.GetHung() || p.GetStep() != -1 {
		t.Errorf("progress after the restart: %v; want 1 hang, not hung, no step of round 2 yet", p)
	}
	// The goodput counts the 10s without progress as the hang's.
	hang := 0.0
	for _, b := range j.GetGoodput().GetBadput() {
		if b.GetCause() == "hang" {
			hang = b.GetSeconds()
		}
	}
	if hang != 10 || j.GetGoodput().GetRestarts() != 1 {
		t.Errorf("goodput %v: want 10s of hang and the restart", j.GetGoodput())
	}
}

// TestDeviceXidRestartsAsHardware sends a heartbeat whose (fake NVML)
// device sample has Xid 79: the master reports a failure the diagnosis
// calls a hardware fault (a relaunch where the platform can; on agents
// started by hand, a restart in place).
func TestDeviceXidRestartsAsHardware(t *testing.T) {
	_, c := startMaster(t, Config{Job: "j"})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := rdzvConfig(1, 1)
	s := openSessionRank(ctx, t, c, "a", 0, cfg)
	nextView(t, s, func(v *roverv1.NodeView) bool { return v.GetAssignment().GetRound() == 1 })
	beat(s, t, &roverv1.NodeProgress{Round: 1, Devices: []*roverv1.DeviceHealth{{Index: 0, UtilizationPercent: 90}, {Index: 1, Xids: []int32{79}}}})
	nextView(t, s, func(v *roverv1.NodeView) bool { return v.GetRound() == 2 })
	j := jobUntil(ctx, t, c, "the device failure", func(j *roverv1.GetJobResponse) bool { return len(j.GetFailures()) == 1 })
	if f := j.GetFailures()[0]; f.GetCause() != "hardware" || !strings.Contains(f.GetMessage(), "NVML reports Xid 79 on GPU 1") {
		t.Errorf("failure %v, want a hardware fault naming Xid 79 on GPU 1", f)
	}
}

// TestStragglerInGetJob feeds two nodes' step times: the one at 3x the
// other's is named in GetJob once each has enough samples.
func TestStragglerInGetJob(t *testing.T) {
	_, c := startMaster(t, Config{Job: "j"})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := rdzvConfig(2, 2)
	a := openSessionRank(ctx, t, c, "a", 0, cfg)
	b := openSessionRank(ctx, t, c, "b", 1, cfg)
	nextView(t, a, func(v *roverv1.NodeView) bool { return v.GetAssignment().GetRound() == 1 })
	nextView(t, b, func(v *roverv1.NodeView) bool { return v.GetAssignment().GetRound() == 1 })
	for i := int64(1); i <= 4; i++ {
		beat(a, t, &roverv1.NodeProgress{Round: 1, Workers: []*roverv1.WorkerProgress{worker(10*i, 10, 1, 1)}})
		beat(b, t, &roverv1.NodeProgress{Round: 1, Workers: []*roverv1.WorkerProgress{worker(10*i, 10, 3, 3)}})
	}
	j := jobUntil(ctx, t, c, "a straggler", func(j *roverv1.GetJobResponse) bool { return len(j.GetProgress().GetStragglers()) > 0 })
	p := j.GetProgress()
	if len(p.GetStragglers()) != 1 || p.GetStragglers()[0] != "b" || !strings.Contains(p.GetStragglerReason(), "b takes 0.300s per step, 3.0x") {
		t.Errorf("stragglers %v (%s), want b", p.GetStragglers(), p.GetStragglerReason())
	}
	if n := p.GetNodes(); len(n) != 2 || n[1].GetNodeId() != "b" || n[1].GetNodeRank() != 1 || !n[1].GetStraggler() || n[0].GetStraggler() {
		t.Errorf("node step times %v", n)
	}
}
