package master

import (
	"context"
	"log/slog"
	"time"

	"connectrpc.com/connect"
	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/master/jobstate"
	"github.com/roverml/rover/internal/nodecheck"
)

func (s *service) ReportNodeCheck(ctx context.Context, req *connect.Request[roverv1.ReportNodeCheckRequest]) (*connect.Response[roverv1.ReportNodeCheckResponse], error) {
	r := req.Msg
	if err := checkNodeID(r.GetNodeId()); err != nil {
		return nil, rpcError(err)
	}
	if err := checkRound(r.GetRound()); err != nil {
		return nil, rpcError(err)
	}
	if st, g := r.GetStage(), r.GetGroup(); st < 1 || st > 2 || g < 0 || g > maxNodes {
		return nil, rpcError(invalid("stage %d or group %d is out of range (stage 1 or 2, group 0 to %d)", st, g, maxNodes))
	}
	res, err := resultFromProto(r.GetResult())
	if err != nil {
		return nil, rpcError(err)
	}
	e := &jobstate.Event{Type: jobstate.EventCheckReport, Time: s.clock.Now(), Node: r.GetNodeId(), Round: int(r.GetRound()),
		Check: &jobstate.CheckReport{Stage: int(r.GetStage()), Group: int(r.GetGroup()), Result: res}}
	if err := s.core.apply(ctx, e); err != nil {
		return nil, rpcError(err)
	}
	return connect.NewResponse(&roverv1.ReportNodeCheckResponse{}), nil
}

// logNodeChecks logs each node check's start, second stage and verdicts,
// as the core's state shows them, until ctx ends.
func (m *Master) logNodeChecks(ctx context.Context) error {
	var last nodecheck.Check
	for {
		_, _, changed := m.core.finished()
		if ch := m.core.nodeCheck(); ch != nil && (ch.World != last.World || ch.Stage != last.Stage || ch.Done != last.Done) {
			logCheck(m.log, ch, last)
			last = *ch
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		}
	}
}

func logCheck(log *slog.Logger, ch *nodecheck.Check, last nodecheck.Check) {
	log = log.With("round", ch.World)
	switch {
	case ch.Cancelled:
		log.Info("node check cancelled: the world changed", "stage", ch.Stage)
	case ch.Done:
		for _, v := range ch.Verdicts {
			lvl := slog.LevelInfo
			if v.Kind != nodecheck.Passed {
				lvl = slog.LevelWarn
			}
			log.Log(context.Background(), lvl, "node check verdict", "node", v.Node, "verdict", v.Kind, "excluded", v.Excluded,
				"time", v.Time.Round(time.Millisecond), "reason", v.Reason)
		}
		log.Info("node check finished", "nodes", len(ch.Nodes), "stages", len(ch.Groups), "median", ch.Median.Round(time.Millisecond),
			"took", ch.Ended.Sub(ch.Started).Round(time.Millisecond))
	case ch.Stage == 2 && (last.World != ch.World || last.Stage != 2):
		log.Info("node check: stage 2 rechecks the failed and the slow nodes with nodes that passed", "groups", len(ch.Groups[1]))
	case ch.Stage == 1:
		log.Info("node check started", "nodes", len(ch.Nodes), "groups", len(ch.Groups[0]))
	}
}
