package master

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"time"

	"connectrpc.com/connect"
	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/api/rover/v1/roverv1connect"
	"github.com/roverml/rover/internal/ckpt"
	"github.com/roverml/rover/internal/client"
	"github.com/roverml/rover/internal/jobconfig"
	"github.com/roverml/rover/internal/jobconfig/configwire"
	"github.com/roverml/rover/internal/master/jobstate"
	"google.golang.org/protobuf/encoding/protojson"
)

// service implements the RPC API: each handler validates, calls the core and
// maps errors through rpcError.
type service struct {
	core        *core
	clock       Clock
	checkpoints *checkpoints
	// storage is the operator's checkpoint storage (Config.Checkpoint).
	storage jobconfig.CheckpointStorage
	// sessions counts the open sessions (nil: not counted).
	sessions *sessionCount
	// holders is which agent process holds each node id (nil: unchecked).
	holders *holders
}

var _ roverv1connect.MasterServiceHandler = (*service)(nil)

func (s *service) Join(ctx context.Context, req *connect.Request[roverv1.JoinRequest]) (*connect.Response[roverv1.JoinResponse], error) {
	resp, err := s.join(ctx, req.Msg)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(resp), nil
}

func (s *service) join(ctx context.Context, r *roverv1.JoinRequest) (*roverv1.JoinResponse, error) {
	jr, cfg, err := validateJoin(r)
	if err != nil {
		return nil, rpcError(err)
	}
	snaps, err := validateSnapshots(r)
	if err != nil {
		return nil, rpcError(err)
	}
	peerAddr, err := validatePeerAddr(r)
	if err != nil {
		return nil, rpcError(err)
	}
	if id := r.GetRunId(); id != "" && id != "none" && s.core.runID != "none" && id != s.core.runID {
		return nil, rpcError(invalid("this master runs job %q, not %q: check --rdzv-id and --rdzv-endpoint", s.core.runID, r.GetRunId()))
	}
	if s.storage.URL != "" {
		// The operator's storage is the job's: an agent may only agree.
		if err := mismatch(checkpointAgrees(s.storage, cfg.Checkpoint)); err != nil {
			return nil, rpcError(err)
		}
		cfg.Checkpoint = s.storage
	} else if err := checkStorage(cfg.Checkpoint, ckpt.FromAgent); err != nil {
		return nil, rpcError(err)
	}
	if err := s.core.configure(ctx, *cfg, s.clock.Now()); err != nil {
		return nil, rpcError(err)
	}
	job := s.core.config()
	// Before the first join returns no worker runs, so a fresh job's
	// uncommitted steps can all go.
	s.checkpoints.prepare(ctx, job.Checkpoint, s.core.fresh())
	rank, round, err := s.core.join(ctx, jr, memoryReport{snaps, peerAddr, r.GetPeerRestoreFailed()}, int(r.GetRound()), s.clock.Now())
	if err != nil {
		return nil, rpcError(err)
	}
	return &roverv1.JoinResponse{NodeRank: int32(rank), Round: int64(round), RunId: s.core.runID,
		Checkpoint: configwire.StorageToProto(job.Checkpoint)}, nil
}

// Session joins the node named by the first message, then streams its views
// while a second goroutine receives heartbeats. The session ends when the
// agent goes away, which the node table records as a disconnect.
func (s *service) Session(ctx context.Context, stream *connect.BidiStream[roverv1.SessionRequest, roverv1.SessionResponse]) error {
	jr, err := receiveJoin(ctx, stream)
	if jr == nil {
		return err
	}
	id := jr.GetNodeId()
	inc := stream.RequestHeader().Get(client.IncarnationHeader)
	release, err := s.holders.claim(id, inc, holderTimeout(jr), s.clock.Now())
	if err != nil {
		return err
	}
	defer release()
	joined, err := s.join(ctx, jr)
	if err != nil {
		return err
	}
	if err := s.core.connected(id, true, s.clock.Now()); err != nil {
		return rpcError(err)
	}
	defer func() { _ = s.core.connected(id, false, s.clock.Now()) }()
	s.sessions.add(1)
	defer s.sessions.add(-1)
	ctx, cancel := context.WithCancel(ctx)
	received := make(chan struct{})
	defer func() {
		cancel()
		<-received // Receive returns once the agent is gone or the server closes
	}()
	go func() {
		defer close(received)
		defer cancel()
		s.receiveHeartbeats(ctx, stream, id, inc)
	}()
	return s.sendViews(ctx, stream, id, joined)
}

// sessionStream is the bidirectional stream of one agent's session.
type sessionStream = connect.BidiStream[roverv1.SessionRequest, roverv1.SessionResponse]

// receiveJoin reads a session's first message, which must be a join. It
// returns a nil join with a nil error when the agent went away before saying
// anything.
func receiveJoin(ctx context.Context, stream *sessionStream) (*roverv1.JoinRequest, error) {
	first, err := stream.Receive()
	if errors.Is(err, io.EOF) || ctx.Err() != nil {
		return nil, nil // the agent went away before saying anything
	}
	if err != nil {
		return nil, err // a message over the read limit, or one that does not decode
	}
	jr := first.GetJoin()
	if jr == nil {
		return nil, rpcError(invalid("the first message of a session must be a join"))
	}
	return jr, nil
}

// holderTimeout is how long a node id stays held by an agent that is not
// heard from: the job's heartbeat timeout, or defaultHolderTimeout.
func holderTimeout(jr *roverv1.JoinRequest) time.Duration {
	d := time.Duration(jr.GetRendezvous().GetHeartbeatTimeoutMillis()) * time.Millisecond
	if d <= 0 {
		return defaultHolderTimeout
	}
	return d
}

// receiveHeartbeats records the heartbeats of node id until the agent closes
// its side or goes away; either ends the session.
func (s *service) receiveHeartbeats(ctx context.Context, stream *sessionStream, id, inc string) {
	for {
		msg, err := stream.Receive()
		if err != nil {
			return
		}
		if msg.GetHeartbeat() == nil {
			return
		}
		now := s.clock.Now()
		s.holders.heard(id, inc, now)
		_ = s.core.seen(id, now)
		dropped, done := s.core.goodputHeartbeat(id, msg.GetHeartbeat(), now)
		if dropped > 0 {
			s.core.log.Warn("a heartbeat carried more node events than the master takes; dropped the rest",
				"node", id, "events", len(msg.GetHeartbeat().GetEvents()), "limit", MaxNodeEvents, "dropped", dropped)
		}
		if done != nil {
			logRestart(s.core.log, *done, s.core.peerRestores(int(done.NewRound)))
		}
		if e, ok := s.core.progressReport(id, msg.GetHeartbeat().GetProgress(), now); ok {
			_ = s.core.apply(ctx, e) // a device's hardware fault: the diagnosis acts
		}
	}
}

// sendViews sends node id its view whenever the view changes, the first
// message answering the join too, until ctx ends or a send fails.
func (s *service) sendViews(ctx context.Context, stream *sessionStream, id string, joined *roverv1.JoinResponse) error {
	sent := false
	var last uint64
	for {
		v, changed := s.core.view(id)
		if !sent || v.Version != last {
			msg := &roverv1.SessionResponse{View: v}
			if !sent {
				msg.Joined = joined // the first message answers the join too
			}
			if err := stream.Send(msg); err != nil {
				return nil
			}
			sent, last = true, v.Version
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil
		}
	}
}

func (s *service) ReportFailure(ctx context.Context, req *connect.Request[roverv1.ReportFailureRequest]) (*connect.Response[roverv1.ReportFailureResponse], error) {
	r := req.Msg
	if err := validateFailures(r); err != nil {
		return nil, rpcError(err)
	}
	raw := make([]json.RawMessage, 0, len(r.GetFailures()))
	for _, f := range r.GetFailures() {
		f.NodeId, f.Round = r.GetNodeId(), r.GetRound()
		b, err := protojson.Marshal(f)
		if err != nil {
			return nil, rpcError(invalid("failure record: %v", err))
		}
		raw = append(raw, b)
	}
	now := s.clock.Now()
	e := &jobstate.Event{Type: jobstate.EventWorkerFailed, Time: now, Node: r.GetNodeId(), Round: int(r.GetRound()), Failures: raw,
		DiedAt: s.core.diedAt(r.GetNodeId(), r.GetFailures(), now)}
	if err := s.core.apply(ctx, e); err != nil {
		return nil, rpcError(err)
	}
	return connect.NewResponse(&roverv1.ReportFailureResponse{}), nil
}

func (s *service) ReportSuccess(ctx context.Context, req *connect.Request[roverv1.ReportSuccessRequest]) (*connect.Response[roverv1.ReportSuccessResponse], error) {
	r := req.Msg
	if err := checkNodeID(r.GetNodeId()); err != nil {
		return nil, rpcError(err)
	}
	if err := checkRound(r.GetRound()); err != nil {
		return nil, rpcError(err)
	}
	e := &jobstate.Event{Type: jobstate.EventNodeSucceeded, Time: s.clock.Now(), Node: r.GetNodeId(), Round: int(r.GetRound())}
	if err := s.core.apply(ctx, e); err != nil {
		return nil, rpcError(err)
	}
	return connect.NewResponse(&roverv1.ReportSuccessResponse{}), nil
}

func (s *service) Leave(ctx context.Context, req *connect.Request[roverv1.LeaveRequest]) (*connect.Response[roverv1.LeaveResponse], error) {
	r := req.Msg
	if err := checkNodeID(r.GetNodeId()); err != nil {
		return nil, rpcError(err)
	}
	if len(r.GetReason()) > maxFailureText {
		return nil, rpcError(invalid("reason is longer than %d bytes", maxFailureText))
	}
	e := &jobstate.Event{Type: jobstate.EventNodeLost, Time: s.clock.Now(), Node: r.GetNodeId(), Reason: "left: " + r.GetReason()}
	if err := s.core.apply(ctx, e); err != nil {
		return nil, rpcError(err)
	}
	return connect.NewResponse(&roverv1.LeaveResponse{}), nil
}

func (s *service) SetKey(ctx context.Context, req *connect.Request[roverv1.SetKeyRequest]) (*connect.Response[roverv1.SetKeyResponse], error) {
	r := req.Msg
	if err := validateSetKey(r); err != nil {
		return nil, rpcError(err)
	}
	e := &jobstate.Event{Type: jobstate.EventSetKey, Time: s.clock.Now(), Key: r.GetKey(), Value: r.GetValue()}
	if err := s.core.apply(ctx, e); err != nil {
		return nil, rpcError(err)
	}
	return connect.NewResponse(&roverv1.SetKeyResponse{}), nil
}

func (s *service) GetKey(ctx context.Context, req *connect.Request[roverv1.GetKeyRequest]) (*connect.Response[roverv1.GetKeyResponse], error) {
	wait, err := validateGetKey(req.Msg)
	if err != nil {
		return nil, rpcError(err)
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		v, ok, changed := s.core.key(req.Msg.GetKey())
		if ok {
			return connect.NewResponse(&roverv1.GetKeyResponse{Found: true, Value: v}), nil
		}
		select {
		case <-changed:
		case <-timer.C:
			return connect.NewResponse(&roverv1.GetKeyResponse{}), nil
		case <-ctx.Done():
			return nil, rpcError(ctx.Err())
		}
	}
}

func (s *service) GetJob(ctx context.Context, req *connect.Request[roverv1.GetJobRequest]) (*connect.Response[roverv1.GetJobResponse], error) {
	r := s.core.jobAt(s.clock.Now())
	if s.checkpoints != nil {
		r.CheckpointStep = s.checkpoints.latestStep()
	}
	return connect.NewResponse(r), nil
}
