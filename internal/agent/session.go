package agent

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"connectrpc.com/connect"
	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/client"
	"github.com/roverml/rover/internal/jobconfig/configwire"
	"github.com/roverml/rover/internal/retry"
)

// joinedState is the node rank and the round of the agent's newest join.
type joinedState struct {
	mu       sync.Mutex
	nodeRank int
	round    int
}

func (j *joinedState) get() (nodeRank, round int) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.nodeRank, j.round
}

// set records a join answer; rounds only move forward.
func (j *joinedState) set(nodeRank, round int) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.nodeRank = nodeRank
	j.round = max(j.round, round)
}

func (a *agent) joinRequest(round int) *roverv1.JoinRequest {
	return &roverv1.JoinRequest{
		NodeId:         a.nodeID,
		RequestedRank:  int32(a.cfg.NodeRank),
		LocalWorldSize: int32(a.cfg.NprocPerNode),
		Addr:           a.host,
		Round:          int64(round),
		Rendezvous:     configwire.ToProto(a.rendezvous()),
		RunId:          a.cfg.RunID,
		Snapshots:      a.ckpt.Inventory(),
		PeerAddr:       a.peerAddr(),
		// The master then agrees on the next round's step without peers.
		PeerRestoreFailed: a.peerRestoreFailed.Load(),
	}
}

// sessionLoop keeps the agent's session with the master open: it joins (the
// first time as a fresh agent, later with the newest joined round, which the
// master treats as a no-op when nothing changed), publishes every view and
// sends heartbeats. The outcome of the first join goes to firstJoin.
//
// When the session breaks, the workers keep running (nothing is published)
// while the agent reconnects with jittered backoff, for up to the heartbeat
// timeout: a master restarted within it resumes the job with nothing
// restarted. Past it, or when the master refuses the agent, it publishes an
// error, on which the loop stops the workers and exits, and returns.
func (a *agent) sessionLoop(ctx context.Context, firstJoin chan<- error) {
	s, err := a.connect(ctx, a.cfg.JoinTimeout, true)
	if ctx.Err() != nil {
		return
	}
	if err != nil && a.hosted {
		firstJoin <- a.hostedJoinError(err)
		return
	}
	if err != nil {
		if unreachable(err) && a.cfg.TokenFile == "" {
			err = exitErr(ExitRendezvous, "no master answered at %s within the join timeout (%s): %w; the token comes from $%s, so either a `rover master` "+
				"runs there (check that it does, and that --rdzv-endpoint is right) or the agent of node rank 0 hosts the master, on the host whose address "+
				"the endpoint names, when nothing else listens there (start that agent, and check that the port is free there)",
				a.addr, a.cfg.JoinTimeout, err, client.TokenEnv)
		} else if unreachable(err) {
			err = exitErr(ExitRendezvous, "could not reach the master at %s within the join timeout (%s): %w; check that `rover master` runs there and that --rdzv-endpoint is right", a.addr, a.cfg.JoinTimeout, err)
		} else {
			err = exitErr(ExitRendezvous, "join the job: %w", err)
		}
		firstJoin <- err
		return
	}
	firstJoin <- nil
	for {
		err := a.serve(s)
		if ctx.Err() != nil {
			return
		}
		if refused(err) {
			a.views.publish(nil, exitErr(ExitMasterLost, "the master ended this node's session: %w", err))
			return
		}
		a.log.Warn("lost the master; the workers keep running while the agent reconnects",
			"err", err, "gives_up_after", a.cfg.MasterTimeout)
		s, err = a.connect(ctx, a.cfg.MasterTimeout, false)
		switch {
		case ctx.Err() != nil:
			return
		case unreachable(err):
			a.views.publish(nil, a.masterLost(err))
			return
		case err != nil:
			a.views.publish(nil, exitErr(ExitMasterLost, "the master refused this node's return: %w", err))
			return
		}
		_, round := a.joined.get()
		a.log.Info("reconnected to the master; the workers kept running", "round", round)
		if a.life != nil {
			a.life.resend() // the round's milestones a restarted master may not have journaled
		}
	}
}

var errSessionEnded = errors.New("the master closed the session")

// progressInterval is the least time between two heartbeats that carry
// progress (besides the regular ones): what bounds the master's load from
// progress reports, whatever the workers' step rate.
const progressInterval = time.Second

// session is an open session whose join the master answered.
type session struct {
	ctx    context.Context
	cancel context.CancelFunc
	stream *connect.BidiStreamForClient[roverv1.SessionRequest, roverv1.SessionResponse]
}

// connect opens a session, retrying while the master cannot be reached, for
// up to limit (then the error wraps retry.ErrLimit). A first join gives up on
// any error but an unreachable master; a return gives up only when the
// master refuses the agent: a master shutting down can end a stream in many
// ways.
func (a *agent) connect(ctx context.Context, limit time.Duration, first bool) (*session, error) {
	retryable := func(err error) bool { return !refused(err) }
	if first {
		retryable = func(err error) bool { return client.Retryable(err) || errors.Is(err, errSessionEnded) }
	}
	var s *session
	start := time.Now()
	lastLog, every := start, min(waitLogInterval, limit/3)
	err := retry.Do(ctx, a.policy(limit), retryable, func(ctx context.Context) error {
		var err error
		if s, err = a.openSession(ctx); err != nil {
			a.log.Debug("could not join the master; retrying", "err", err)
			if now := time.Now(); now.Sub(lastLog) >= every {
				lastLog = now
				a.log.Info("waiting for "+a.awaitedMaster(), "endpoint", a.addr, "waited", now.Sub(start).Round(time.Second),
					"gives_up_after", limit, "err", err)
			}
		}
		return err
	})
	return s, err
}

// waitLogInterval is how often, at most, an agent waiting for its master
// says so (three times within a shorter limit).
const waitLogInterval = 10 * time.Second

// awaitedMaster names the master the agent waits for, in its progress log.
func (a *agent) awaitedMaster() string {
	switch {
	case a.hosted && a.cfg.NodeRank > 0:
		return "the master that the agent of node rank 0 hosts (no `rover master` runs for this job)"
	case a.hosted:
		return "the master that another agent of the job hosts (no `rover master` runs for this job)"
	case a.cfg.TokenFile == "":
		return "the job's master: a `rover master`, or the agent of node rank 0 hosting one (the token is $" + client.TokenEnv + ")"
	}
	return "the job's `rover master`"
}

// openSession opens a session and joins with the newest joined round.
func (a *agent) openSession(ctx context.Context) (*session, error) {
	_, round := a.joined.get()
	ctx, cancel := context.WithCancel(ctx)
	stream := a.client.Session(ctx)
	stream.RequestHeader().Set(client.IncarnationHeader, a.incarnation)
	fail := func(err error) (*session, error) {
		_ = stream.CloseResponse()
		cancel()
		return nil, err
	}
	join := &roverv1.SessionRequest{Msg: &roverv1.SessionRequest_Join{Join: a.joinRequest(round)}}
	if err := stream.Send(join); err != nil {
		// Send reports a failed stream as EOF; Receive has the real error.
		_, rerr := stream.Receive()
		if errors.Is(err, io.EOF) && rerr != nil && !errors.Is(rerr, io.EOF) {
			return fail(rerr)
		}
		return fail(errors.Join(err, rerr))
	}
	resp, err := stream.Receive()
	if errors.Is(err, io.EOF) {
		err = errSessionEnded
	}
	if err != nil {
		return fail(err)
	}
	joined := resp.GetJoined()
	if joined == nil {
		return fail(errors.New("the master's first session message is not a join answer"))
	}
	a.recordJoin(joined, round)
	a.views.publish(resp.GetView(), nil)
	return &session{ctx: ctx, cancel: cancel, stream: stream}, nil
}

// serve publishes the session's views and sends heartbeats until the
// session breaks or its context ends, and closes it.
func (a *agent) serve(s *session) error {
	defer s.stream.CloseResponse()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		a.heartbeats(s.ctx, s.stream)
	}()
	defer wg.Wait()
	defer s.cancel()
	for {
		msg, err := s.stream.Receive()
		if err != nil {
			if errors.Is(err, context.Canceled) && s.ctx.Err() != nil {
				return s.ctx.Err()
			}
			if errors.Is(err, io.EOF) {
				return errSessionEnded
			}
			return err
		}
		if v := msg.GetView(); v != nil {
			a.views.publish(v, nil)
		}
	}
}

func (a *agent) heartbeats(ctx context.Context, stream *connect.BidiStreamForClient[roverv1.SessionRequest, roverv1.SessionResponse]) {
	t := time.NewTicker(a.cfg.HeartbeatInterval)
	defer t.Stop()
	// Progress goes on the regular beats, and on extra ones at most once
	// per progressInterval while workers report.
	p := time.NewTicker(progressInterval)
	defer p.Stop()
	// Node events go out at once when urgent (eventQueue.add): a queued
	// event makes its own heartbeat (up to maxEventsPerBeat each, more beats
	// at once for a longer queue); the others go with progress, at most
	// once per progressInterval.
	// Events a broken stream did not take go back to the queue, for the
	// next session.
	dropped := a.events.droppedCount()
	send := func(np *roverv1.NodeProgress, events []*roverv1.NodeEvent) error {
		hb := &roverv1.Heartbeat{Progress: np, Events: events, SentUnixNanos: time.Now().UnixNano()}
		if err := stream.Send(&roverv1.SessionRequest{Msg: &roverv1.SessionRequest_Heartbeat{Heartbeat: hb}}); err != nil {
			a.events.putBack(events)
			return err
		}
		if d := a.events.droppedCount(); d > dropped {
			a.log.Warn("dropped the oldest node events for the master's goodput accounting: more queued while the master was away than the agent keeps",
				"dropped", d-dropped, "kept", eventQueueLimit)
			dropped = d
		}
		return nil
	}
	// Closing the agent's side on every way out is what ends serve's
	// Receive: the master then ends the stream. (Cancelling the context does
	// not end an established stream's read by itself, and a tick that wins
	// the race with the cancellation fails its Send on the cancelled
	// context.)
	defer func() { _ = stream.CloseRequest() }()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := send(a.progress.take(), a.events.take(maxEventsPerBeat)); err != nil {
				return
			}
		case <-p.C:
			if np := a.progress.take(); np != nil || a.events.pending() {
				if err := send(np, a.events.take(maxEventsPerBeat)); err != nil {
					return
				}
			}
		case <-a.events.ready:
			if events := a.events.take(maxEventsPerBeat); len(events) > 0 {
				if err := send(nil, events); err != nil {
					return
				}
			}
		}
	}
}

func (a *agent) recordJoin(r *roverv1.JoinResponse, asked int) {
	rank, round := int(r.GetNodeRank()), int(r.GetRound())
	a.ckpt.SetStorage(configwire.StorageFromProto(r.GetCheckpoint()))
	oldRank, oldRound := a.joined.get()
	a.joined.set(rank, round)
	if asked == 0 || oldRank != rank || oldRound != round {
		a.log.Info("joined rendezvous", "node_rank", rank, "round", round)
	}
}

// join joins round again through a unary call (the session stays open),
// retrying while the master is unreachable, up to the heartbeat timeout.
func (a *agent) join(ctx context.Context, round int) error {
	var resp *connect.Response[roverv1.JoinResponse]
	err := a.callMaster(ctx, func(ctx context.Context) error {
		var err error
		resp, err = a.client.Join(ctx, connect.NewRequest(a.joinRequest(round)))
		return err
	})
	switch {
	case ctx.Err() != nil:
		return context.Cause(ctx)
	case unreachable(err):
		return a.masterLost(err)
	case err != nil:
		return exitErr(ExitRendezvous, "join round %d: %w", round, err)
	}
	a.recordJoin(resp.Msg, round)
	return nil
}

// refused reports whether the master rejected the agent itself.
func refused(err error) bool {
	switch connect.CodeOf(err) {
	case connect.CodeUnauthenticated, connect.CodePermissionDenied, connect.CodeFailedPrecondition, connect.CodeAlreadyExists:
		return true
	}
	return false
}
