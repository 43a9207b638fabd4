package jobview

import (
	"bytes"
	"strings"
	"testing"
	"time"

	roverv1 "github.com/roverml/rover/api/rover/v1"
)

func TestNodeCheckTable(t *testing.T) {
	start := time.Unix(1000, 0)
	j := &roverv1.GetJobResponse{RunId: "j", JobState: roverv1.JobState_JOB_STATE_RUNNING, CheckpointStep: -1,
		NodeCheck: &roverv1.NodeCheckStatus{Round: 1, Stage: 2, StartedUnixNanos: start.UnixNano(),
			EndedUnixNanos: start.Add(3 * time.Second).UnixNano(), MedianMicros: 210000,
			Verdicts: []*roverv1.NodeCheckVerdict{
				{NodeId: "n0", Verdict: "passed", TimeMicros: 200000, Reason: "passed"},
				{NodeId: "n1", Verdict: "straggler", Excluded: true, TimeMicros: 2500000, Reason: "slow"},
			},
			Reports: []*roverv1.NodeCheckReport{{Stage: 1, NodeId: "n0", Result: &roverv1.NodeCheckResult{Ok: true, BandwidthBytesPerSec: 5e8}}},
		}}
	var b bytes.Buffer
	if err := Status(&b, j); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"node check of round 1: finished in 3s, 2 stage(s), median time 210ms",
		"NODE  VERDICT    TIME", "n0    passed     200ms  500.0", "n1    straggler  2.5s   -          yes"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("status lacks %q:\n%s", want, b.String())
		}
	}
	b.Reset()
	j.NodeCheck = &roverv1.NodeCheckStatus{Round: 2, Stage: 1, Running: true}
	if err := Summary(&b, j, time.Second); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "node check of round 2: running, stage 1") {
		t.Errorf("summary lacks the running check:\n%s", b.String())
	}
}
