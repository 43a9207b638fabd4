package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	roverv1 "github.com/roverml/rover/api/rover/v1"
)

// scriptedJob is a master's state in the middle of a job: round 3 formed
// with two of three nodes (one lost), after a failure restart, training.
func scriptedJob() JobSnapshot {
	return JobSnapshot{
		Job: &roverv1.GetJobResponse{
			JobState: roverv1.JobState_JOB_STATE_RUNNING, Round: 3, WorldSize: 8, RestartCount: 2, MaxRestarts: 5, Relaunches: 4,
			RelaunchCauses: map[string]int32{"oom": 2, "node_lost": 1, "a cause of a newer master": 1},
			CheckpointStep: 40,
			ManagedNodes:   []*roverv1.ManagedNode{{Group: "worker", State: "running"}, {Group: "worker", State: "running"}, {Group: "worker", State: "pending"}},
			Goodput: &roverv1.JobGoodput{Ratio: 0.75, WallSeconds: 100, GoodputSeconds: 75, Phase: "training", Step: 42, LostSteps: 3, Saves: 4,
				Badput:   []*roverv1.GoodputCause{{Cause: "restore", Seconds: 5}, {Cause: "rendezvous", Seconds: 20}},
				Failures: map[string]int64{"out-of-memory": 1, "killed": 1}},
			Progress: &roverv1.JobProgress{Hangs: 1, Stragglers: []string{"b"},
				Nodes: []*roverv1.NodeStepTime{{StepSeconds: 0.5, Samples: 3}, {StepSeconds: 0.7, Samples: 3}, {StepSeconds: 9, Samples: 0}}},
			NodeCheck: &roverv1.NodeCheckStatus{Verdicts: []*roverv1.NodeCheckVerdict{{Verdict: "ok"}, {Verdict: "ok"}, {Verdict: "straggler"}}},
		},
		Nodes:    NodeCounts{InWorld: 2, Lost: 1, Waiting: 1},
		Datasets: []DatasetSnapshot{{Name: "train", Epoch: 1, Todo: 10, Doing: 4, Done: 6, Dropped: 1, Workers: 4}},
	}
}

// TestJobCollector: a scrape reads the master's state as it is, in
// aggregates (nodes by state, not a series per node).
func TestJobCollector(t *testing.T) {
	c := JobCollector{Snapshot: scriptedJob}
	want := `
# HELP rover_job_nodes Nodes known to the rendezvous, by state: in_world (a member of the current world), waiting (joined, not in the world), lost.
# TYPE rover_job_nodes gauge
rover_job_nodes{state="in_world"} 2
rover_job_nodes{state="lost"} 1
rover_job_nodes{state="waiting"} 1
# HELP rover_job_managed_nodes Nodes the master's platform runs, by node group and state (pending, running, ...).
# TYPE rover_job_managed_nodes gauge
rover_job_managed_nodes{group="worker",state="pending"} 1
rover_job_managed_nodes{group="worker",state="running"} 2
# HELP rover_job_state 1 for the job's state (running, succeeded, failed), 0 for the others.
# TYPE rover_job_state gauge
rover_job_state{state="failed"} 0
rover_job_state{state="running"} 1
rover_job_state{state="succeeded"} 0
# HELP rover_job_phase 1 for the phase the job is in (goodput's: startup, rendezvous, training, ...).
# TYPE rover_job_phase gauge
rover_job_phase{phase="training"} 1
# HELP rover_job_restarts_total Failure restarts of the job's workers (TORCHELASTIC_RESTART_COUNT).
# TYPE rover_job_restarts_total counter
rover_job_restarts_total 2
# HELP rover_job_node_relaunches_total Nodes the master relaunched on its platform, by cause (oom, evicted, deleted, exited, node_lost, node_check, diagnosis, other).
# TYPE rover_job_node_relaunches_total counter
rover_job_node_relaunches_total{cause="deleted"} 0
rover_job_node_relaunches_total{cause="diagnosis"} 0
rover_job_node_relaunches_total{cause="evicted"} 0
rover_job_node_relaunches_total{cause="exited"} 0
rover_job_node_relaunches_total{cause="node_check"} 0
rover_job_node_relaunches_total{cause="node_lost"} 1
rover_job_node_relaunches_total{cause="oom"} 2
rover_job_node_relaunches_total{cause="other"} 1
# HELP rover_job_worker_failures_total Worker failures that began a restart, by diagnosed cause (out-of-memory, killed, user-error, ...).
# TYPE rover_job_worker_failures_total counter
rover_job_worker_failures_total{cause="killed"} 1
rover_job_worker_failures_total{cause="out-of-memory"} 1
# HELP rover_job_badput_seconds_total Time not spent on kept steps, by cause (restore, rendezvous, hang, ...).
# TYPE rover_job_badput_seconds_total counter
rover_job_badput_seconds_total{cause="rendezvous"} 20
rover_job_badput_seconds_total{cause="restore"} 5
# HELP rover_job_goodput_ratio Useful training time over wall time, from 0 to 1.
# TYPE rover_job_goodput_ratio gauge
rover_job_goodput_ratio 0.75
# HELP rover_job_step_time_seconds The median over nodes of their recent step time.
# TYPE rover_job_step_time_seconds gauge
rover_job_step_time_seconds 0.7
# HELP rover_job_stragglers Nodes the master finds slow now.
# TYPE rover_job_stragglers gauge
rover_job_stragglers 1
# HELP rover_nodecheck_verdicts Nodes of the last node check by verdict (ok, straggler, faulty, ...).
# TYPE rover_nodecheck_verdicts gauge
rover_nodecheck_verdicts{verdict="ok"} 2
rover_nodecheck_verdicts{verdict="straggler"} 1
# HELP rover_checkpoint_committed_step The newest committed checkpoint step; -1 for none.
# TYPE rover_checkpoint_committed_step gauge
rover_checkpoint_committed_step 40
# HELP rover_dataset_shards A dataset's shards of the current epoch by state: todo (the queue), doing (leased), done, dropped.
# TYPE rover_dataset_shards gauge
rover_dataset_shards{dataset="train",state="doing"} 4
rover_dataset_shards{dataset="train",state="done"} 6
rover_dataset_shards{dataset="train",state="dropped"} 1
rover_dataset_shards{dataset="train",state="todo"} 10
`
	names := []string{"rover_job_nodes", "rover_job_managed_nodes", "rover_job_state", "rover_job_phase", "rover_job_restarts_total",
		"rover_job_node_relaunches_total", "rover_job_worker_failures_total", "rover_job_badput_seconds_total", "rover_job_goodput_ratio", "rover_job_step_time_seconds",
		"rover_job_stragglers", "rover_nodecheck_verdicts", "rover_checkpoint_committed_step", "rover_dataset_shards"}
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
	if problems, err := testutil.CollectAndLint(c); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
}

// TestJobCollectorBeforeAnything: a master with no job configured yet
// (no snapshot parts) still answers, with the job's scalar metrics.
func TestJobCollectorBeforeAnything(t *testing.T) {
	c := JobCollector{Snapshot: func() JobSnapshot { return JobSnapshot{} }}
	want := `
# HELP rover_checkpoint_committed_step The newest committed checkpoint step; -1 for none.
# TYPE rover_checkpoint_committed_step gauge
rover_checkpoint_committed_step -1
# HELP rover_job_round The current rendezvous round.
# TYPE rover_job_round gauge
rover_job_round 0
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "rover_checkpoint_committed_step", "rover_job_round", "rover_job_phase"); err != nil {
		t.Error(err)
	}
}

// TestJobCollectorRelaunchesWithoutCauses: relaunches that no cause
// accounts for (GetJob of an older master) count as other.
func TestJobCollectorRelaunchesWithoutCauses(t *testing.T) {
	c := JobCollector{Snapshot: func() JobSnapshot {
		return JobSnapshot{Job: &roverv1.GetJobResponse{Relaunches: 3, RelaunchCauses: map[string]int32{"evicted": 1}}}
	}}
	want := `
# HELP rover_job_node_relaunches_total Nodes the master relaunched on its platform, by cause (oom, evicted, deleted, exited, node_lost, node_check, diagnosis, other).
# TYPE rover_job_node_relaunches_total counter
rover_job_node_relaunches_total{cause="deleted"} 0
rover_job_node_relaunches_total{cause="diagnosis"} 0
rover_job_node_relaunches_total{cause="evicted"} 1
rover_job_node_relaunches_total{cause="exited"} 0
rover_job_node_relaunches_total{cause="node_check"} 0
rover_job_node_relaunches_total{cause="node_lost"} 0
rover_job_node_relaunches_total{cause="oom"} 0
rover_job_node_relaunches_total{cause="other"} 2
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "rover_job_node_relaunches_total"); err != nil {
		t.Error(err)
	}
}
