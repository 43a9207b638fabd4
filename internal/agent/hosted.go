package agent

import (
	"context"
	"net"

	"connectrpc.com/connect"
	"github.com/roverml/rover/internal/agent/hostmaster"
	"github.com/roverml/rover/internal/runconfig"
)

// A job without `rover master` (package hostmaster): the agent that can
// bind the job's endpoint hosts the job's master there, and the others
// join it.

// hostedToken is hostmaster.Token, whose errors are usage errors.
func hostedToken(cfg *runconfig.Config, getenv func(string) string, tmp string) (string, hostmaster.Source, error) {
	tok, from, err := hostmaster.Token(cfg, getenv, tmp)
	if err != nil {
		return "", "", exitErr(ExitUsage, "%w", err)
	}
	return tok, from, nil
}

// hostMaster hosts the job's master on its endpoint when this agent can
// bind it, and returns what stops it (a no-op when another hosts it). Once
// the job ended, the master waits up to the heartbeat timeout for the other
// agents to hear the outcome before it stops.
func (a *agent) hostMaster(ctx context.Context, token string, ln net.Listener, endRun context.CancelCauseFunc) (stop func(), err error) {
	if ln == nil {
		ln, err = hostmaster.Listen(a.cfg.RdzvEndpoint)
	}
	if err != nil {
		if a.cfg.NodeRank == 0 {
			a.log.Warn("node rank 0 does not host the job's master: it cannot listen on the endpoint; joining whoever hosts it",
				"endpoint", a.cfg.RdzvEndpoint, "err", err)
		} else {
			a.log.Info("another agent hosts the job's master; joining it", "endpoint", a.cfg.RdzvEndpoint, "err", err)
		}
		return func() {}, nil
	}
	m, err := a.startMaster(ctx, EmbeddedMaster{Listener: ln, Token: token, Drain: a.cfg.HeartbeatTimeout})
	if err != nil {
		return nil, err
	}
	a.log.Info("hosting the job's master (no `rover master` runs for this job)", "endpoint", a.cfg.RdzvEndpoint)
	go a.watchMaster(ctx, m, endRun)
	return m.Stop, nil
}

// masterLost is the agent's error when the master stayed unreachable past
// the heartbeat timeout.
func (a *agent) masterLost(err error) error {
	if a.hosted {
		return a.hostedMasterLost(err)
	}
	return exitErr(ExitMasterLost, "lost the master at %s for longer than the heartbeat timeout (%s): %w; "+
		"restart `rover master` (with its --state-dir, to resume the job) and then the agents", a.addr, a.cfg.MasterTimeout, err)
}

// hostedMasterLost is masterLost in a job without `rover master`.
func (a *agent) hostedMasterLost(err error) error {
	return exitErr(ExitMasterLost, "lost the job's master at %s for longer than master_timeout (%s): %w; "+
		"this job runs without `rover master`: the agent of node rank 0 (on the host of %s) hosted the master, "+
		"and that agent or its node is gone, which the job cannot survive. Restart every node's agent to run the job again "+
		"(with --checkpoint-dir it resumes from its last committed checkpoint); to survive the loss of any node, "+
		"run `rover master --state-dir DIR` on a host of its own and give the agents its --token-file",
		a.addr, a.cfg.MasterTimeout, err, a.addr)
}

// hostedJoinError says why the first join failed in a job without `rover
// master`: nobody hosts the master, or the master refused the token.
func (a *agent) hostedJoinError(err error) error {
	if unreachable(err) {
		return exitErr(ExitRendezvous, "no agent hosted the job's master at %s within the join timeout (%s): %w; "+
			"without `rover master`, the agent of node rank 0 hosts it: start that agent on the host whose address the endpoint names "+
			"(--rdzv-endpoint, MASTER_ADDR, or --master-addr with --rdzv-backend=static), and check that the port is free there",
			a.addr, a.cfg.JoinTimeout, err)
	}
	if connect.CodeOf(err) == connect.CodeUnauthenticated {
		return exitErr(ExitRendezvous, "the master at %s refused this agent's token, from %s: %w; "+
			"give every agent of the job the same %s and --rdzv-id, or, if a `rover master` runs there, pass its --token-file",
			a.addr, a.tokenFrom, err, runconfig.JobSecretEnv)
	}
	return exitErr(ExitRendezvous, "join the job: %w", err)
}
