package master

import (
	"context"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	roverv1 "github.com/roverml/rover/api/rover/v1"
)

const valueErrorTrace = `Traceback (most recent call last):
  File "/job/train.py", line 42, in <module>
    step(batch)
ValueError: the batch has 3 columns, want 4`

// TestFailuresDiagnosedAndFailFast: each failure report is annotated with
// the round's diagnosis; the same exception at the same place in two
// consecutive rounds fails the job at once although restarts are left,
// with a reason naming the exception.
func TestFailuresDiagnosedAndFailFast(t *testing.T) {
	_, c := startMaster(t, Config{Job: "j"})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := rdzvConfig(1, 1)
	cfg.MaxRestarts = 5
	s := openSessionRank(ctx, t, c, "a", 0, cfg)
	nextView(t, s, func(v *roverv1.NodeView) bool { return v.GetAssignment().GetRound() == 1 })
	fail := func(round int64) {
		t.Helper()
		_, err := c.ReportFailure(ctx, connect.NewRequest(&roverv1.ReportFailureRequest{NodeId: "a", Round: round,
			Failures: []*roverv1.WorkerFailure{{NodeId: "a", Rank: 1, ExitCode: 1, Round: round,
				Message: "ValueError: the batch has 3 columns, want 4", Traceback: valueErrorTrace}}}))
		if err != nil {
			t.Fatal(err)
		}
	}
	fail(1)
	nextView(t, s, func(v *roverv1.NodeView) bool { return v.GetRound() == 2 })
	job, err := c.GetJob(ctx, connect.NewRequest(&roverv1.GetJobRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if f := job.Msg.GetFailures(); len(f) != 1 || f[0].GetCause() != "user-error" || f[0].GetAction() != "restart-in-place" || f[0].GetDiagnosis() == "" {
		t.Fatalf("the first failure: %v, want a user error restarted in place, with a reason", f)
	}
	req := joinReq("a", cfg)
	req.Msg.Round = 2
	if _, err := c.Join(ctx, req); err != nil {
		t.Fatal(err)
	}
	nextView(t, s, func(v *roverv1.NodeView) bool { return v.GetAssignment().GetRound() == 2 })
	fail(2)
	v := nextView(t, s, func(v *roverv1.NodeView) bool { return v.GetJobState() != roverv1.JobState_JOB_STATE_RUNNING })
	if v.GetJobState() != roverv1.JobState_JOB_STATE_FAILED || v.GetRestartCount() != 1 ||
		!strings.Contains(v.GetReason(), "ValueError") || !strings.Contains(v.GetReason(), "train.py:42") {
		t.Errorf("after the same exception twice: state %v, restarts %d, reason %q; want failed after 1 restart, naming the exception and place",
			v.GetJobState(), v.GetRestartCount(), v.GetReason())
	}
	if f := v.GetFailures(); len(f) != 2 || f[1].GetAction() != "fail-fast" {
		t.Errorf("failures %v, want the second one failing fast", f)
	}
}
