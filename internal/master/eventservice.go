package master

import (
	"context"

	"connectrpc.com/connect"
	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/eventlog"
)

// maxEventsPerMessage bounds the events of one ListEvents answer or one
// WatchEvents message: an event takes at most about 6.5 KB (its strings'
// bounds), so 1,000 stay under the clients' read limit.
const maxEventsPerMessage = 1000

// ListEvents answers the job's events after since: from the master's ring,
// and from the files of the event log for those older than it holds.
func (s *service) ListEvents(_ context.Context, req *connect.Request[roverv1.ListEventsRequest]) (*connect.Response[roverv1.ListEventsResponse], error) {
	limit := int(req.Msg.GetLimit())
	if limit < 0 {
		return nil, rpcError(invalid("limit %d must not be negative", limit))
	}
	if limit == 0 || limit > maxEventsPerMessage {
		limit = maxEventsPerMessage
	}
	log := s.core.events
	last := log.Last()
	evs, oldest, err := log.Read(req.Msg.GetSince(), limit)
	if err != nil && len(evs) == 0 {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	return connect.NewResponse(&roverv1.ListEventsResponse{Events: eventsProto(evs), Oldest: oldest, Last: last}), nil
}

// WatchEvents streams the job's events after since, then each new one,
// until the caller hangs up or the master stops (the stream then ends
// without an error). A watcher behind the ring
// catches up from the files; an event rotated away is skipped (the
// numbers show the gap).
func (s *service) WatchEvents(ctx context.Context, req *connect.Request[roverv1.WatchEventsRequest], stream *connect.ServerStream[roverv1.WatchEventsResponse]) error {
	log := s.core.events
	cursor := req.Msg.GetSince()
	first, ending := true, false
	for {
		wake := log.Wait() // before reading: an append after the read wakes us
		evs, _, err := log.Read(cursor, maxEventsPerMessage)
		if err != nil && len(evs) == 0 {
			return connect.NewError(connect.CodeInternal, err)
		}
		if len(evs) > 0 || first {
			// The first message goes at once, even empty: the watcher
			// knows it is following.
			if err := stream.Send(&roverv1.WatchEventsResponse{Events: eventsProto(evs)}); err != nil {
				return err
			}
			first = false
		}
		if len(evs) > 0 {
			cursor = evs[len(evs)-1].Seq
			if len(evs) == maxEventsPerMessage {
				continue // more are waiting
			}
		}
		if ending {
			return nil // the master stops: the stream ends in order
		}
		select {
		case <-ctx.Done():
			return nil
		case <-s.core.watchEnd:
			ending = true // send what is left, then end
		case <-wake:
		}
	}
}

// eventsProto is the wire form of events.
func eventsProto(evs []eventlog.Event) []*roverv1.Event {
	out := make([]*roverv1.Event, len(evs))
	for i, e := range evs {
		out[i] = eventProto(e)
	}
	return out
}

// eventProto is the wire form of an event.
func eventProto(e eventlog.Event) *roverv1.Event {
	p := &roverv1.Event{
		Seq: e.Seq, Kind: string(e.Kind), Severity: string(e.Severity), Node: e.Node, Round: int32(e.Round),
		Message: e.Message, Cause: e.Cause, Action: e.Action, Excerpt: e.Excerpt, Reason: e.Reason,
		WorldSize: int32(e.WorldSize), Nodes: int32(e.Nodes), Verdict: e.Verdict,
	}
	if !e.Time.IsZero() {
		p.TimeUnixNanos = e.Time.UnixNano()
	}
	if e.Rank != nil {
		p.Rank = new(int32(*e.Rank))
	}
	if e.ExitCode != nil {
		p.ExitCode = new(int32(*e.ExitCode))
	}
	if e.Step != nil {
		p.Step = new(*e.Step)
	}
	return p
}
