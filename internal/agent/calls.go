package agent

import (
	"context"
	"errors"
	"time"

	"connectrpc.com/connect"
	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/client"
	"github.com/roverml/rover/internal/retry"
)

// masterBackoff spaces the agent's retries of calls to the master, jittered
// so that the agents of a job that lost its master do not all come back at
// once.
var masterBackoff = retry.Backoff{Initial: 100 * time.Millisecond, Max: 2 * time.Second}

// masterPolicy retries a call while the master is unreachable for as long as
// the agent keeps its workers running without a master: the heartbeat
// timeout. A master restarted within it finds the agents waiting.
func (a *agent) masterPolicy() retry.Policy {
	return a.policy(a.cfg.MasterTimeout)
}

func (a *agent) policy(limit time.Duration) retry.Policy {
	return retry.Policy{Backoff: masterBackoff, Limit: limit, Clock: a.clock}
}

// callMaster calls f until it succeeds, fails for good, or the master has
// been unreachable for the heartbeat timeout (then the error wraps
// retry.ErrLimit).
func (a *agent) callMaster(ctx context.Context, f func(context.Context) error) error {
	return retry.Do(ctx, a.masterPolicy(), client.Retryable, f)
}

// call is callMaster for a report whose failure the agent only logs.
func (a *agent) call(ctx context.Context, what string, f func(context.Context) error) {
	if err := a.callMaster(ctx, f); err != nil && ctx.Err() == nil {
		a.log.Warn("could not "+what, "err", err)
	}
}

// unreachable reports whether err says the master could not be reached
// within a retry policy's limit.
func unreachable(err error) bool { return errors.Is(err, retry.ErrLimit) }

// leave tells the master this node is going away; best effort.
func (a *agent) leave(reason string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, _ = a.client.Leave(ctx, connect.NewRequest(&roverv1.LeaveRequest{NodeId: a.nodeID, Reason: reason}))
}
