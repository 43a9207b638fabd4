package master

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/metrics"
)

// The master's Prometheus metrics (package metrics, docs/metrics.md): the
// job's state read at each scrape, and what the core times as it happens.

// roundTimer times rendezvous rounds from the committed events' times: a
// round opens with one event and forms with another.
type roundTimer struct {
	round    int
	open     bool
	openedAt time.Time
}

// observeRoundLocked records a round that formed with the event of time t
// (committed live, not replayed), d after it opened.
func (c *core) observeRoundLocked(t time.Time) {
	if c.metrics == nil || t.IsZero() || !c.st.Members.Configured() {
		return
	}
	s, r := c.st.Members.Status(), &c.rounds
	switch {
	case s.Open && (!r.open || s.Round != r.round):
		r.openedAt = t
	case !s.Open && r.open && s.Round == r.round && !r.openedAt.IsZero():
		c.metrics.RoundFormed(t.Sub(r.openedAt))
	}
	r.round, r.open = s.Round, s.Open
}

// metricsSnapshot is the job's state for a scrape: GetJob's answer without
// its per-node parts (nodes are counted instead), and the datasets'
// shards. It is O(nodes): a scrape of 10,000 nodes takes milliseconds of
// the master's CPU (BenchmarkScrapeMaster).
func (m *Master) metricsSnapshot() metrics.JobSnapshot {
	step := m.checkpoints.latestStep()
	now := m.cfg.Clock.Now()
	c := m.core
	c.mu.Lock()
	defer c.mu.Unlock()
	s := metrics.JobSnapshot{Job: c.jobSummaryLocked(now)}
	s.Job.CheckpointStep = step
	s.Nodes = c.nodeCountsLocked()
	ds := c.st.Datasets.Machine()
	for _, name := range ds.Datasets() {
		st, err := ds.Status(name)
		if err != nil {
			continue
		}
		s.Datasets = append(s.Datasets, metrics.DatasetSnapshot{Name: name, Epoch: st.Epoch, Todo: st.Todo, Doing: st.Doing,
			Done: st.Done, Dropped: st.EpochDropped, Workers: len(st.Workers), Finished: st.Finished})
	}
	return s
}

// jobSummaryLocked is GetJob's answer without its nodes and failures, and
// with the nodes' step times only.
func (c *core) jobSummaryLocked(now time.Time) *roverv1.GetJobResponse {
	r := &roverv1.GetJobResponse{RunId: c.runID, JobState: roverv1.JobState_JOB_STATE_RUNNING, CheckpointStep: -1}
	r.Goodput = goodputProto(c.st.Goodput, now)
	c.fleetProtoLocked(r)
	if !c.st.Members.Configured() {
		return r
	}
	s := c.st.Members.Status()
	r.JobState = jobState(s.Job)
	r.Round, r.RoundOpen = int64(s.Round), s.Open
	r.WorldSize, r.RestartCount, r.MaxRestarts = int32(s.WorldSize), int32(s.Restarts), int32(s.MaxRestarts)
	c.checkProtoLocked(r)
	v := c.st.Progress.View(int64(s.Round))
	r.Progress = &roverv1.JobProgress{Step: v.Step, Hung: v.Hung, Hangs: v.Hangs, Stragglers: v.Stragglers}
	for _, n := range v.Nodes {
		r.Progress.Nodes = append(r.Progress.Nodes, &roverv1.NodeStepTime{StepSeconds: n.Wall, Samples: int32(n.Samples)})
	}
	r.AutoScale = c.autoScaleProtoLocked()
	return r
}

// nodeCountsLocked counts the rendezvous's nodes by state, as GetJob's
// nodes show them: lost, else in the world, else waiting.
func (c *core) nodeCountsLocked() metrics.NodeCounts {
	var n metrics.NodeCounts
	if !c.st.Members.Configured() {
		return n
	}
	world := map[string]bool{}
	for _, mb := range c.st.Members.Rendezvous().Snapshot().World {
		world[mb.NodeID] = true
	}
	for id := range c.st.Members.Addrs() {
		info, ok := c.st.Members.Liveness(id)
		switch {
		case ok && info.Lost:
			n.Lost++
		case world[id]:
			n.InWorld++
		default:
			n.Waiting++
		}
	}
	return n
}

// listenMetrics makes the master's metrics and their server when
// cfg.MetricsAddr is set, and writes the address to cfg.MetricsAddrFile.
func (m *Master) listenMetrics() error {
	if m.cfg.EmbeddedMetrics {
		m.metrics = metrics.NewMaster(m.metricsSnapshot, false)
		m.core.metrics = m.metrics
	}
	if m.cfg.MetricsAddr == "" {
		return nil
	}
	m.metrics = metrics.NewMaster(m.metricsSnapshot, true)
	srv, err := metrics.Listen(m.cfg.MetricsAddr, m.metrics.Registry())
	if err != nil {
		return err
	}
	if m.cfg.MetricsAddrFile != "" {
		if err := srv.WriteAddrFile(m.cfg.MetricsAddrFile); err != nil {
			srv.Close()
			return err
		}
	}
	m.metricsSrv = srv
	m.core.metrics = m.metrics
	return nil
}

// MetricsGatherer gathers the master's metrics: nil without
// Config.MetricsAddr or Config.EmbeddedMetrics.
func (m *Master) MetricsGatherer() prometheus.Gatherer {
	if m.metrics == nil {
		return nil
	}
	return m.metrics.Registry()
}

// MetricsServer is the server of the master's metrics, nil without
// Config.MetricsAddr: more read-only handlers (the dashboard) go on its Mux
// before Run.
func (m *Master) MetricsServer() *metrics.Server { return m.metricsSrv }
