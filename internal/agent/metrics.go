package agent

import (
	"context"
	"net/http"

	"github.com/roverml/rover/internal/agent/stacks"
	"github.com/roverml/rover/internal/metrics"
)

// The agent's Prometheus metrics (package metrics, docs/metrics.md), served
// with --metrics-addr, with those of a master the agent runs.

// newMetrics makes the agent's metrics when --metrics-addr is set; nil
// otherwise, which records nothing.
func (a *agent) newMetrics() *metrics.Agent {
	if a.cfg.MetricsAddr == "" {
		return nil
	}
	m := metrics.NewAgent(func() int64 {
		if s := a.saver.Load(); s != nil {
			return s.ArenaBytes()
		}
		return 0
	})
	m.SetBackupBytes(func() int64 {
		if s := a.saver.Load(); s != nil {
			return s.BackupBytes()
		}
		return 0
	})
	return m
}

// serveMetrics serves the agent's metrics on --metrics-addr until Run
// returns, and writes the address to --metrics-addr-file.
func (a *agent) serveMetrics(ctx context.Context, done *cleanups) error {
	if a.metrics == nil {
		return nil
	}
	srv, err := metrics.Listen(a.cfg.MetricsAddr, a.metrics.Gatherer())
	if err != nil {
		return exitErr(ExitUsage, "%w", err)
	}
	srv.Mux.Handle("/", http.HandlerFunc(a.serveDashboard))
	if a.cfg.MetricsAddrFile != "" {
		if err := srv.WriteAddrFile(a.cfg.MetricsAddrFile); err != nil {
			srv.Close()
			return err
		}
	}
	a.log.Info("serving metrics", "addr", srv.Addr(), "url", srv.URL())
	sctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	served := make(chan struct{})
	go func() {
		defer close(served)
		if err := srv.Serve(sctx); err != nil {
			a.log.Warn("stopped serving metrics", "err", err)
		}
	}()
	done.add(func() { stop(); <-served })
	return nil
}

// serveDashboard serves the web dashboard of the master this agent runs,
// once it runs one; nothing (404) before, or for an agent that runs none.
func (a *agent) serveDashboard(w http.ResponseWriter, r *http.Request) {
	if h := a.dashboard.Load(); h != nil {
		(*h).ServeHTTP(w, r)
		return
	}
	http.Error(w, "no dashboard here: this agent runs no master (the job's master serves it on its --metrics-addr)", http.StatusNotFound)
}

// metricsWorkers is the running group's workers for the metrics.
func metricsWorkers(ws []stacks.Worker) []metrics.Worker {
	out := make([]metrics.Worker, len(ws))
	for i, w := range ws {
		out[i] = metrics.Worker{Local: w.Local, Pid: w.Pid}
	}
	return out
}

// groupEndState is how a group ended, for the metrics.
func groupEndState(res groupResult) string {
	switch {
	case res.Stopped:
		return metrics.WorkersStopped
	case res.Succeeded:
		return metrics.WorkersSucceeded
	}
	return metrics.WorkersFailed
}

// workerPids is the running group's worker processes.
func workerPids(ws []stacks.Worker) []int {
	out := make([]int, len(ws))
	for i, w := range ws {
		out[i] = w.Pid
	}
	return out
}
