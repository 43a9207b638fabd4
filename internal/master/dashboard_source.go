package master

import (
	"context"

	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/dashboard"
)

// The master's side of the web dashboard (internal/dashboard): the job's
// status, as GetJob answers it. The job's event log is another component's;
// it plugs in as a dashboard.EventSource.

// DashboardSource returns what the web dashboard shows of this master's
// job: its status as Status answers it, and the events of events. With
// events nil the dashboard shows no events, and hears of the job's changes
// as the agents' push streams do.
func (m *Master) DashboardSource(events dashboard.EventSource) dashboard.Source {
	if events == nil {
		events = viewChanges{m.core}
	}
	return dashboardSource{m: m, EventSource: events}
}

type dashboardSource struct {
	m *Master
	dashboard.EventSource
}

var _ dashboard.Source = dashboardSource{}

func (s dashboardSource) Job(ctx context.Context) (*roverv1.GetJobResponse, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return s.m.Status(), nil
}

// viewChanges is an event log with no events whose Changed is the core's
// node-view changes.
type viewChanges struct{ c *core }

func (viewChanges) Events(uint64, int) []dashboard.Event { return nil }

func (v viewChanges) Changed() <-chan struct{} {
	v.c.mu.Lock()
	defer v.c.mu.Unlock()
	return v.c.views
}
