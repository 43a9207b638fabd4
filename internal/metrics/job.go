package metrics

import (
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/nodemanager"
)

// JobSnapshot is what the master knows of its job at one instant: its
// status as GetJob answers it, and its datasets.
type JobSnapshot struct {
	// Job is GetJob's answer; its nodes are not read (Nodes counts them).
	Job      *roverv1.GetJobResponse
	Nodes    NodeCounts
	Datasets []DatasetSnapshot
}

// NodeCounts counts the nodes known to the rendezvous by state.
type NodeCounts struct {
	InWorld, Waiting, Lost int
}

// DatasetSnapshot is one dataset's shards by state.
type DatasetSnapshot struct {
	Name  string
	Epoch int
	// Todo is the queue: shards of the epoch not leased yet. Doing are
	// leased, Done completed, Dropped given up after their retries.
	Todo, Doing, Done, Dropped int64
	// Workers is how many workers hold leases of the dataset.
	Workers  int
	Finished bool
}

// JobCollector reads the job's state from Snapshot at every scrape, so that
// the master pays for its gauges only when Prometheus asks. With 10,000
// nodes a scrape costs what one GetJob does, plus a pass over the nodes
// (BenchmarkScrapeMaster).
type JobCollector struct {
	Snapshot func() JobSnapshot
}

var _ prometheus.Collector = JobCollector{}

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labels, nil)
}

// The job's metrics, read from its snapshot.
var (
	jobStateDesc      = desc("rover_job_state", "1 for the job's state (running, succeeded, failed), 0 for the others.", "state")
	jobPhaseDesc      = desc("rover_job_phase", "1 for the phase the job is in (goodput's: startup, rendezvous, training, ...).", "phase")
	roundDesc         = desc("rover_job_round", "The current rendezvous round.")
	roundOpenDesc     = desc("rover_job_round_open", "1 while the current round collects joins, else 0.")
	worldSizeDesc     = desc("rover_job_world_size", "Workers (ranks) in the current world.")
	nodesDesc         = desc("rover_job_nodes", "Nodes known to the rendezvous, by state: in_world (a member of the current world), waiting (joined, not in the world), lost.", "state")
	managedNodesDesc  = desc("rover_job_managed_nodes", "Nodes the master's platform runs, by node group and state (pending, running, ...).", "group", "state")
	restartsDesc      = desc("rover_job_restarts_total", "Failure restarts of the job's workers (TORCHELASTIC_RESTART_COUNT).")
	maxRestartsDesc   = desc("rover_job_max_restarts", "Failure restarts the job allows.")
	relaunchesDesc    = desc("rover_job_node_relaunches_total", "Nodes the master relaunched on its platform, by cause (oom, evicted, deleted, exited, node_lost, node_check, diagnosis, other).", "cause")
	failuresDesc      = desc("rover_job_worker_failures_total", "Worker failures that began a restart, by diagnosed cause (out-of-memory, killed, user-error, ...).", "cause")
	goodputRatioDesc  = desc("rover_job_goodput_ratio", "Useful training time over wall time, from 0 to 1.")
	wallDesc          = desc("rover_job_wall_seconds_total", "Wall time since the job launched.")
	goodputDesc       = desc("rover_job_goodput_seconds_total", "Time spent on steps that were kept.")
	badputDesc        = desc("rover_job_badput_seconds_total", "Time not spent on kept steps, by cause (restore, rendezvous, hang, ...).", "cause")
	stepDesc          = desc("rover_job_step", "The job's newest completed training step; rate() of it is the step rate.")
	stepTimeDesc      = desc("rover_job_step_time_seconds", "The median over nodes of their recent step time.")
	lostStepsDesc     = desc("rover_job_lost_steps_total", "Steps computed and then rolled back by restarts.")
	stragglersDesc    = desc("rover_job_stragglers", "Nodes the master finds slow now.")
	hungDesc          = desc("rover_job_hung", "1 while the job is hung (no progress past the hang timeout), else 0.")
	hangsDesc         = desc("rover_job_hangs_total", "Hangs detected.")
	committedDesc     = desc("rover_checkpoint_committed_step", "The newest committed checkpoint step; -1 for none.")
	savesDesc         = desc("rover_checkpoint_saves_total", "Checkpoint saves reported by the workers.")
	verdictsDesc      = desc("rover_nodecheck_verdicts", "Nodes of the last node check by verdict (ok, straggler, faulty, ...).", "verdict")
	checkRunningDesc  = desc("rover_nodecheck_running", "1 while a node check runs, else 0.")
	shardsDesc        = desc("rover_dataset_shards", "A dataset's shards of the current epoch by state: todo (the queue), doing (leased), done, dropped.", "dataset", "state")
	datasetEpochDesc  = desc("rover_dataset_epoch", "The epoch a dataset is in, from 0.", "dataset")
	leaseWorkersDesc  = desc("rover_dataset_lease_holders", "Workers holding leases of a dataset.", "dataset")
	datasetFinishDesc = desc("rover_dataset_finished", "1 once a dataset is finished, else 0.", "dataset")
)

var jobDescs = []*prometheus.Desc{
	jobStateDesc, jobPhaseDesc, roundDesc, roundOpenDesc, worldSizeDesc, nodesDesc, managedNodesDesc, restartsDesc,
	maxRestartsDesc, relaunchesDesc, failuresDesc, goodputRatioDesc, wallDesc, goodputDesc, badputDesc, stepDesc,
	stepTimeDesc, lostStepsDesc, stragglersDesc, hungDesc, hangsDesc, committedDesc, savesDesc, verdictsDesc,
	checkRunningDesc, shardsDesc, datasetEpochDesc, leaseWorkersDesc, datasetFinishDesc,
}

func init() { jobDescs = append(jobDescs, autoScaleDescs...) }

// Describe sends the descriptions of every metric Collect sends.
func (JobCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range jobDescs {
		ch <- d
	}
}

// Collect reads a snapshot and sends its metrics.
func (c JobCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.Snapshot()
	j := s.Job
	if j == nil {
		j = &roverv1.GetJobResponse{CheckpointStep: -1}
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	for _, st := range []struct {
		name  string
		state roverv1.JobState
	}{{"running", roverv1.JobState_JOB_STATE_RUNNING}, {"succeeded", roverv1.JobState_JOB_STATE_SUCCEEDED}, {"failed", roverv1.JobState_JOB_STATE_FAILED}} {
		gauge(jobStateDesc, boolValue(j.GetJobState() == st.state), st.name)
	}
	gauge(roundDesc, float64(j.GetRound()))
	gauge(roundOpenDesc, boolValue(j.GetRoundOpen()))
	gauge(worldSizeDesc, float64(j.GetWorldSize()))
	counter(restartsDesc, float64(j.GetRestartCount()))
	gauge(maxRestartsDesc, float64(j.GetMaxRestarts()))
	collectRelaunches(j, counter)
	gauge(committedDesc, float64(j.GetCheckpointStep()))
	collectNodes(s.Nodes, j, gauge)
	collectGoodput(j.GetGoodput(), gauge, counter)
	collectProgress(j.GetProgress(), gauge, counter)
	collectNodeCheck(j.GetNodeCheck(), gauge)
	collectAutoScale(j.GetAutoScale(), gauge, counter)
	for _, d := range s.Datasets {
		for _, st := range []struct {
			state string
			n     int64
		}{{"todo", d.Todo}, {"doing", d.Doing}, {"done", d.Done}, {"dropped", d.Dropped}} {
			gauge(shardsDesc, float64(st.n), d.Name, st.state)
		}
		gauge(datasetEpochDesc, float64(d.Epoch), d.Name)
		gauge(leaseWorkersDesc, float64(d.Workers), d.Name)
		gauge(datasetFinishDesc, boolValue(d.Finished), d.Name)
	}
}

type sendFunc func(d *prometheus.Desc, v float64, labels ...string)

// collectRelaunches sends the relaunches by cause: every cause of the
// node manager's fixed set, 0 for those not seen, so that the label's
// values are bounded and rate() starts from 0. A cause the set does not
// know, or relaunches no cause accounts for, count as other.
func collectRelaunches(j *roverv1.GetJobResponse, counter sendFunc) {
	byCause := make(map[nodemanager.RelaunchCause]int64)
	var sum int64
	for cause, n := range j.GetRelaunchCauses() {
		c := nodemanager.RelaunchCause(cause)
		if !c.Known() {
			c = nodemanager.CauseOther
		}
		byCause[c] += int64(n)
		sum += int64(n)
	}
	if rest := int64(j.GetRelaunches()) - sum; rest > 0 {
		byCause[nodemanager.CauseOther] += rest
	}
	for _, c := range nodemanager.RelaunchCauses() {
		counter(relaunchesDesc, float64(byCause[c]), string(c))
	}
}

// collectNodes counts the nodes by state: aggregates, not a series per
// node, so that a job of 10,000 nodes costs Prometheus a few series.
func collectNodes(n NodeCounts, j *roverv1.GetJobResponse, gauge sendFunc) {
	gauge(nodesDesc, float64(n.InWorld), "in_world")
	gauge(nodesDesc, float64(n.Waiting), "waiting")
	gauge(nodesDesc, float64(n.Lost), "lost")
	type groupState struct{ group, state string }
	managed := map[groupState]int{}
	for _, n := range j.GetManagedNodes() {
		managed[groupState{n.GetGroup(), n.GetState()}]++
	}
	for k, n := range managed {
		gauge(managedNodesDesc, float64(n), k.group, k.state)
	}
}

func collectGoodput(g *roverv1.JobGoodput, gauge, counter sendFunc) {
	if g == nil {
		return
	}
	if g.GetPhase() != "" {
		gauge(jobPhaseDesc, 1, g.GetPhase())
	}
	gauge(goodputRatioDesc, g.GetRatio())
	counter(wallDesc, g.GetWallSeconds())
	counter(goodputDesc, g.GetGoodputSeconds())
	for _, b := range g.GetBadput() {
		counter(badputDesc, b.GetSeconds(), b.GetCause())
	}
	gauge(stepDesc, float64(g.GetStep()))
	counter(lostStepsDesc, float64(g.GetLostSteps()))
	counter(savesDesc, float64(g.GetSaves()))
	for cause, n := range g.GetFailures() {
		counter(failuresDesc, float64(n), cause)
	}
}

func collectProgress(p *roverv1.JobProgress, gauge, counter sendFunc) {
	gauge(stragglersDesc, float64(len(p.GetStragglers())))
	gauge(hungDesc, boolValue(p.GetHung()))
	counter(hangsDesc, float64(p.GetHangs()))
	var times []float64
	for _, n := range p.GetNodes() {
		if n.GetSamples() > 0 {
			times = append(times, n.GetStepSeconds())
		}
	}
	if len(times) > 0 {
		slices.Sort(times)
		gauge(stepTimeDesc, times[len(times)/2])
	}
}

func collectNodeCheck(c *roverv1.NodeCheckStatus, gauge sendFunc) {
	gauge(checkRunningDesc, boolValue(c.GetRunning()))
	verdicts := map[string]int{}
	for _, v := range c.GetVerdicts() {
		verdicts[v.GetVerdict()]++
	}
	for v, n := range verdicts {
		gauge(verdictsDesc, float64(n), v)
	}
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
