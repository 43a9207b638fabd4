package jobview

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
	"time"

	roverv1 "github.com/roverml/rover/api/rover/v1"
)

func goodputJob() *roverv1.GetJobResponse {
	j := handJob()
	j.Goodput = &roverv1.JobGoodput{
		Ratio: 0.8312, WallSeconds: 120, GoodputSeconds: 99.7, Phase: "training", Step: 900, Restarts: 2, LostSteps: 3,
		Badput: []*roverv1.GoodputCause{
			{Cause: "worker_start", Seconds: 8.2}, {Cause: "startup", Seconds: 5.1}, {Cause: "lost_progress", Seconds: 2},
			{Cause: "restore", Seconds: 0.5}, {Cause: "hang", Seconds: 0},
		},
		LatestRestarts: []*roverv1.RestartPhases{
			{Round: 2, NewRound: 3, Reason: "signal", DetectSeconds: 0.01, StopSeconds: 0.1, RendezvousSeconds: 0.2, SpawnSeconds: 0.05,
				InitSeconds: 0.9, RestoreSeconds: 0.06, FirstStepSeconds: 0.1, DowntimeSeconds: 1.42, Resumed: true, ResumedStep: 120,
				Source: roverv1.CheckpointSource_CHECKPOINT_SOURCE_MEMORY, Done: true, MoreNodes: 3,
				Nodes: []*roverv1.NodeRestore{
					{NodeId: "job-worker-0-0", Step: 120, Source: roverv1.CheckpointSource_CHECKPOINT_SOURCE_MEMORY, LoadSeconds: 0.05},
					{NodeId: "job-worker-1-1", Step: 120, Source: roverv1.CheckpointSource_CHECKPOINT_SOURCE_BACKUP, Peer: "job-worker-0-0",
						FetchSeconds: 0.012, LoadSeconds: 0.04},
				}},
			{Round: 3, Reason: "membership", StopSeconds: 0.4, DowntimeSeconds: 0.4},
		},
	}
	return j
}

// TestGoodputShown: rover status and the submit summary show the ratio, the
// three largest badput causes with their seconds, and each of the latest
// restarts' phases.
func TestGoodputShown(t *testing.T) {
	want := check{
		has: []string{
			"\ngoodput 0.83 of 120.0s: worker_start 8.20s, startup 5.10s, lost_progress 2.00s; 3 steps recomputed\n",
			"restarts (the latest 2 of 2):\n",
			"round 3 restored: job-worker-0-0 memory step 120 load 0.05s, job-worker-1-1 backup peer job-worker-0-0 step 120 fetch 0.01s load 0.04s, 3 more\n",
		},
		rows: []*regexp.Regexp{
			row("ROUND", "REASON", "DOWNTIME", "DETECT", "STOP", "RENDEZVOUS", "SPAWN", "INIT", "RESTORE", "FIRST STEP", "RESUMED", "LOST STEPS"),
			row("2->3", "signal", "1.42", "0.01", "0.10", "0.20", "0.05", "0.90", "0.06", "0.10", "step 120 (memory)", "0"),
			row("3->?", "membership", "0.40 (in progress)", "0.00", "0.40", "0.00", "0.00", "0.00", "0.00", "0.00", "-", "0"),
		},
		lacks: []string{"restore 0.50s"},
	}
	var b bytes.Buffer
	if err := Status(&b, goodputJob()); err != nil {
		t.Fatal(err)
	}
	want.run(t, b.String())
	b.Reset()
	if err := Summary(&b, goodputJob(), time.Minute); err != nil {
		t.Fatal(err)
	}
	want.run(t, b.String())

	b.Reset()
	if err := Status(&b, handJob()); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "goodput") {
		t.Errorf("a job without goodput shows one:\n%s", b.String())
	}
	if got := GoodputLine(&roverv1.JobGoodput{Phase: "startup"}); got != "goodput 0.00 of 0.0s" {
		t.Errorf("the line of a job just launched: %q", got)
	}
}
