package master

import (
	"github.com/prometheus/client_golang/prometheus"
	"time"

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

// metricsSnapshot is the job's state for a scrape: GetJob's answer and the
// datasets' shards.
func (m *Master) metricsSnapshot() metrics.JobSnapshot {
	s := metrics.JobSnapshot{Job: m.Status()}
	c := m.core
	c.mu.Lock()
	defer c.mu.Unlock()
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
