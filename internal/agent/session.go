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
	"github.com/roverml/rover/internal/master"
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
		Rendezvous:     master.RendezvousProto(presetOf(a.cfg)),
		RunId:          a.cfg.RunID,
		Snapshots:      a.arenas.inventory(),
	}
}

// sessionLoop keeps the agent's session with the master open: it joins (the
// first time as a fresh agent, later with the newest joined round, which the
// master treats as a no-op when nothing changed), publishes every view and
// sends heartbeats. The outcome of the first join goes to firstJoin. When
// the master stays unreachable past the heartbeat timeout, or refuses the
// agent, it publishes an error and returns.
func (a *agent) sessionLoop(ctx context.Context, firstJoin chan<- error) {
	first := true
	deadline := time.Now().Add(a.cfg.JoinTimeout)
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		_, round := a.joined.get()
		joined := false
		err := a.session(ctx, round, func() {
			if first {
				first = false
				firstJoin <- nil
			}
			joined = true
			backoff = 100 * time.Millisecond
		})
		if ctx.Err() != nil {
			return
		}
		if joined {
			// The master was there until now: give it the heartbeat timeout to come back.
			deadline = time.Now().Add(a.cfg.HeartbeatTimeout)
		}
		// Once joined, a broken session is retried until the deadline,
		// whatever the transport made of the break (a master shutting down
		// can truncate the stream), unless the master refused the agent.
		retryable := client.Retryable(err) || errors.Is(err, errSessionEnded) ||
			(!first && !refused(err))
		switch {
		case first && !retryable:
			firstJoin <- exitErr(ExitRendezvous, "join the job: %w", err)
			return
		case first && time.Now().After(deadline):
			firstJoin <- exitErr(ExitRendezvous, "could not reach the master at %s within the join timeout (%s): %w; check that `rover master` runs there and that --rdzv-endpoint is right", a.cfg.RdzvEndpoint, a.cfg.JoinTimeout, err)
			return
		case !retryable:
			a.views.publish(nil, exitErr(ExitMasterLost, "the master ended this node's session: %w", err))
			return
		case time.Now().After(deadline):
			a.views.publish(nil, exitErr(ExitMasterLost, "lost the master at %s for longer than the heartbeat timeout (%s): %v", a.cfg.RdzvEndpoint, a.cfg.HeartbeatTimeout, err))
			return
		}
		a.log.Debug("session with the master ended; reconnecting", "err", err)
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return
		}
		backoff = min(backoff*2, 2*time.Second)
	}
}

var errSessionEnded = errors.New("the master closed the session")

// session runs one session until it breaks. onJoined runs after the join
// is answered.
func (a *agent) session(ctx context.Context, round int, onJoined func()) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream := a.client.Session(ctx)
	defer stream.CloseResponse()
	join := &roverv1.SessionRequest{Msg: &roverv1.SessionRequest_Join{Join: a.joinRequest(round)}}
	if err := stream.Send(join); err != nil {
		_, rerr := stream.Receive() // the real error, if the server answered
		return errors.Join(err, rerr)
	}
	resp, err := stream.Receive()
	if err != nil {
		return err
	}
	joined := resp.GetJoined()
	if joined == nil {
		return errors.New("the master's first session message is not a join answer")
	}
	a.recordJoin(joined, round)
	a.views.publish(resp.GetView(), nil)
	onJoined()

	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		a.heartbeats(ctx, stream)
	}()
	defer wg.Wait()
	defer cancel()
	for {
		msg, err := stream.Receive()
		if err != nil {
			if errors.Is(err, context.Canceled) && ctx.Err() != nil {
				return ctx.Err()
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
	beat := &roverv1.SessionRequest{Msg: &roverv1.SessionRequest_Heartbeat{Heartbeat: &roverv1.Heartbeat{}}}
	for {
		select {
		case <-ctx.Done():
			_ = stream.CloseRequest()
			return
		case <-t.C:
			if err := stream.Send(beat); err != nil {
				return
			}
		}
	}
}

func (a *agent) recordJoin(r *roverv1.JoinResponse, asked int) {
	rank, round := int(r.GetNodeRank()), int(r.GetRound())
	oldRank, oldRound := a.joined.get()
	a.joined.set(rank, round)
	if asked == 0 || oldRank != rank || oldRound != round {
		a.log.Info("joined rendezvous", "node_rank", rank, "round", round)
	}
}

// join joins round again through a unary call (the session stays open),
// retrying while the master is unreachable, until the join timeout.
func (a *agent) join(ctx context.Context, round int) error {
	var resp *connect.Response[roverv1.JoinResponse]
	err := retry(ctx, a.cfg.JoinTimeout, func(ctx context.Context) error {
		var err error
		resp, err = a.client.Join(ctx, connect.NewRequest(a.joinRequest(round)))
		return err
	})
	if err != nil {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
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
