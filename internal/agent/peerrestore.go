package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"

	roverv1 "github.com/roverml/rover/api/rover/v1"
)

// Peer restore (docs/design/flash-checkpoint.md, "Peer restore"): the
// agent serves its node's replicated snapshot to the other nodes' agents of
// the job, and before it starts workers that are to restore a step this
// node does not hold (a node replacing a lost one), it fetches that step
// from a node that does.

// startPeerServer serves the node's replicated snapshots to the job's
// other agents, on a port of every interface chosen by the system,
// authenticated with the job's token; it runs until done runs.
func (a *agent) startPeerServer(token string, done *cleanups) error {
	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		return err
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan struct{})
	go func() {
		defer close(served)
		a.ckpt.ServePeers(ctx, ln, a.cfg.RunID, token, peerFault(a.opts.Getenv(PeerFaultEnv)))
	}()
	done.add(func() {
		stop()
		<-served
	})
	a.peerPort = strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	a.peerToken = token
	return nil
}

// peerAddr is where the other nodes' agents reach this one's peer server
// ("" when it serves none).
func (a *agent) peerAddr() string {
	if a.peerPort == "" || a.host == "" {
		return ""
	}
	return net.JoinHostPort(a.host, a.peerPort)
}

// errPeerRestore is a round's agreed checkpoint that no peer gave: the
// node's ranks would resume at another step than the others', so its
// workers do not start and the master regroups the world (diagnosis rule
// restore-failure).
var errPeerRestore = errors.New("no peer gave the round's checkpoint")

// restoreFromPeers fetches the assignment's memory step from the peers it
// names when this node does not hold it. When no peer gave it, it returns
// why: the node's ranks cannot resume at the agreed step from memory, and
// storage need not hold it (no checkpoint storage, or a survivor's persist
// failed), so the round must not start; the next join says so and the
// master agrees without peer restore, every rank then loading the same
// step.
func (a *agent) restoreFromPeers(ctx context.Context, asg *roverv1.Assignment) error {
	peers := asg.GetMemoryPeers()
	if asg.MemoryStep == nil || len(peers) == 0 {
		return nil
	}
	step := asg.GetMemoryStep()
	if a.ckpt.HoldsReplicated(step) {
		return nil
	}
	addrs := make([]string, 0, len(peers))
	for _, p := range peers {
		addrs = append(addrs, p.GetAddr())
	}
	res, err := a.ckpt.FetchFromPeers(ctx, step, addrs, a.cfg.RunID, a.peerToken)
	if err != nil {
		a.log.Warn("could not restore the checkpoint from a peer: the round is given up, and the next agrees without peer restore",
			"step", step, "round", asg.GetRound(), "err", err)
		return fmt.Errorf("%w: step %d: %w", errPeerRestore, step, err)
	}
	from := res.Addr
	for _, p := range peers {
		if p.GetAddr() == res.Addr {
			from = p.GetNodeId()
		}
	}
	a.log.Info("restored the checkpoint from a peer's memory", "step", step, "round", asg.GetRound(), "peer", from,
		"bytes", res.Bytes, "seconds", res.Duration.Seconds())
	return nil
}
