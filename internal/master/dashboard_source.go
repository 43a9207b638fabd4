package master

import (
	"context"
	"strconv"
	"sync"

	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/dashboard"
	"github.com/roverml/rover/internal/eventlog"
)

// The master's side of the web dashboard (internal/dashboard): the job's
// status, as GetJob answers it, and the job's event log.

// DashboardSource returns what the web dashboard shows of this master's
// job: its status as Status answers it, and the events of events. With
// events nil it shows the master's own event log, and hears of the job's
// changes from its new events and from the agents' push streams.
func (m *Master) DashboardSource(events dashboard.EventSource) dashboard.Source {
	if events == nil {
		events = &jobEvents{c: m.core}
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

// jobEvents is the core's event log as the dashboard reads it. Its Changed
// is closed by the log's next event or the next change of the node view,
// whichever comes first.
type jobEvents struct {
	c *core

	mu            sync.Mutex
	views, events <-chan struct{} // what merged waits on
	merged        chan struct{}
}

func (j *jobEvents) Events(since uint64, max int) []dashboard.Event {
	evs, _, _ := j.c.events.Read(since, max) // a file that cannot be read: the ring's part
	out := make([]dashboard.Event, len(evs))
	for i, e := range evs {
		out[i] = dashboardEvent(e)
	}
	return out
}

func (j *jobEvents) Changed() <-chan struct{} {
	j.c.mu.Lock()
	views := j.c.views
	j.c.mu.Unlock()
	events := j.c.events.Wait()
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.merged != nil && j.views == views && j.events == events {
		return j.merged // neither has fired: share the one waiter
	}
	merged := make(chan struct{})
	j.views, j.events, j.merged = views, events, merged
	go func() {
		select {
		case <-views:
		case <-events:
		}
		close(merged)
	}()
	return merged
}

// dashboardEvent is e with its typed fields as the dashboard's strings.
func dashboardEvent(e eventlog.Event) dashboard.Event {
	fields := map[string]string{}
	set := func(k, v string) {
		if v != "" {
			fields[k] = v
		}
	}
	setInt := func(k string, v *int) {
		if v != nil {
			fields[k] = strconv.Itoa(*v)
		}
	}
	setInt("rank", e.Rank)
	setInt("exit_code", e.ExitCode)
	set("cause", e.Cause)
	set("action", e.Action)
	set("excerpt", e.Excerpt)
	set("reason", e.Reason)
	if e.Step != nil {
		fields["step"] = strconv.FormatInt(*e.Step, 10)
	}
	if e.WorldSize > 0 {
		fields["world_size"] = strconv.Itoa(e.WorldSize)
	}
	if e.Nodes > 0 {
		fields["nodes"] = strconv.Itoa(e.Nodes)
	}
	set("verdict", e.Verdict)
	if len(fields) == 0 {
		fields = nil
	}
	return dashboard.Event{Seq: e.Seq, Time: e.Time, Kind: string(e.Kind), Severity: string(e.Severity),
		Node: e.Node, Message: e.Message, Round: int64(e.Round), Fields: fields}
}
