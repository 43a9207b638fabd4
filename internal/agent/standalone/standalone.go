// Package standalone starts the embedded master of `rover run
// --standalone`: a master on a loopback port, with a fresh token, for a job
// of one node; and the master that an agent hosts for a job run without
// `rover master`, on the listener and with the token the agent gives. It is
// the one path from the node agent's program to package
// master. Package agent declares what it needs (agent.StartMaster) and
// reaches masters only through package client, so that its edge to the
// master is the protocol; programs wire this package in:
//
//	err := agent.Run(ctx, cfg, agent.Options{StartMaster: standalone.Start})
package standalone

import (
	"context"
	"os"

	"github.com/roverml/rover/internal/dashboard"

	"github.com/roverml/rover/internal/agent"
	"github.com/roverml/rover/internal/master"
)

var _ agent.StartMaster = Start

// Start starts a master for spec, on spec.Listener or else a loopback port,
// and serves until Stop, which outlives ctx: the agent stops its master
// after it is done with it.
func Start(ctx context.Context, spec agent.EmbeddedMaster) (agent.RunningMaster, error) {
	token := spec.Token
	if token == "" {
		token = master.NewToken()
	}
	preset := spec.Rendezvous
	m, err := master.New(ctx, master.Config{
		Listen: "127.0.0.1:0", Listener: spec.Listener, Job: spec.Job, Token: token, Preset: &preset,
		StateDir: spec.StateDir, Logger: spec.Logger, Checkpoint: spec.Rendezvous.Checkpoint, EmbeddedMetrics: spec.Metrics,
	})
	if err != nil {
		if spec.Listener != nil {
			spec.Listener.Close()
		}
		return agent.RunningMaster{}, err // the agent names the operation
	}
	mctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var dash *dashboard.Dashboard
	dashDone := make(chan struct{})
	if spec.Metrics { // the dashboard is served beside the metrics (docs/observability.md)
		dash = dashboard.New(m.DashboardSource(nil), dashboard.Options{Logger: spec.Logger})
		go func() {
			defer close(dashDone)
			_ = dash.Run(mctx) // nil at mctx's end
		}()
	} else {
		close(dashDone)
	}
	done := make(chan struct{})
	failed := make(chan error, 1) // written at most once, never read maybe
	go func() {
		defer close(done)
		if err := m.Run(mctx); err != nil && mctx.Err() == nil {
			failed <- err
		}
	}()
	stop := func() {
		ended, ask := context.WithCancel(context.Background())
		ask()
		if _, err := m.WaitFinished(ended); err == nil && spec.Drain > 0 {
			// The other agents learn the outcome from this master: wait
			// until they have gone (or the drain time is up).
			dctx, cancelDrain := context.WithTimeout(context.Background(), spec.Drain)
			_ = m.WaitIdle(dctx)
			cancelDrain()
		}
		cancel()
		<-done
		<-dashDone
		// A job that ended leaves nothing to resume: the next run of the
		// same job starts afresh. A killed agent leaves the state for the
		// next run to resume.
		now, ask := context.WithCancel(context.Background())
		ask() // WaitFinished answers at once: finished, or ctx's error
		if _, err := m.WaitFinished(now); err == nil && spec.StateDir != "" {
			_ = os.RemoveAll(spec.StateDir)
		}
	}
	running := agent.RunningMaster{Addr: m.Addr(), Token: token, Stop: stop, Failed: failed, Metrics: m.MetricsGatherer()}
	if dash != nil {
		running.Dashboard = dash
	}
	return running, nil
}
