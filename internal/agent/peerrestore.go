package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"

	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/agent/ckptsaver"
	"github.com/roverml/rover/internal/ckpt/peer"
)

// Peer restore (docs/design/flash-checkpoint.md, "Peer restore" and
// "Backup peers"): the agent serves its node's replicated snapshot, and
// the backups it keeps of its backup source's shards, to the other nodes'
// agents of the job; it pushes its own shards to its backup peer after
// each save; and before it starts workers that are to restore a step this
// node does not hold (a node replacing a lost one), it fetches that step
// from a node that does: the replicated copy from a peer, or its own
// shards from its backup peer.

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
		a.ckpt.ServePeers(ctx, ln, a.cfg.RunID, token, peerFault(a.opts.Getenv(PeerFaultEnv), a.opts.Getenv(PeerStallFileEnv)))
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

// startBackups applies a round's assignment to the node's backups before
// its workers start: where the node pushes its shards and whose it keeps,
// and dropping the backups of a timeline the round abandons (those saved
// after the step it restores, in an older round).
func (a *agent) startBackups(asg *roverv1.Assignment) {
	if a.peerToken == "" {
		return // no peer server: the node takes no part in the ring
	}
	round := int(asg.GetRound())
	var step *int64
	if asg.MemoryStep != nil {
		s := asg.GetMemoryStep()
		step = &s
	}
	a.ckpt.DropStaleBackups(round, step)
	p := asg.GetBackupPeer()
	a.ckpt.SetBackupPeers(ckptsaver.BackupPeers{Round: round, PeerNode: p.GetNodeId(), Addr: p.GetAddr(), Source: asg.GetBackupOf(),
		Run: a.cfg.RunID, Token: a.peerToken})
}

// restoreFromPeers fetches the assignment's memory step from the peers it
// names when this node does not hold it: a peer's replicated copy, or, with
// memory_from_backup, each local rank's shard from the node's backup
// peers. When no peer gave it, it returns why: the node's ranks cannot
// resume at the agreed step from memory, and storage need not hold it (no
// checkpoint storage, or a survivor's persist failed), so the round must
// not start; the next join says so and the master agrees without peer
// restore, every rank then loading the same step. A fetch that succeeded
// is told to the node's lifecycle, for its resume event (where the node
// restored from, and how long the transfer took).
func (a *agent) restoreFromPeers(ctx context.Context, asg *roverv1.Assignment) error {
	peers := asg.GetMemoryPeers()
	if asg.MemoryStep == nil || len(peers) == 0 {
		return nil
	}
	step := asg.GetMemoryStep()
	backup := asg.GetMemoryFromBackup()
	if !backup && a.ckpt.HoldsReplicated(step) {
		return nil
	}
	addrs := make([]string, 0, len(peers))
	for _, p := range peers {
		addrs = append(addrs, p.GetAddr())
	}
	var res peer.Result
	var err error
	what, source := "a peer's memory", roverv1.CheckpointSource_CHECKPOINT_SOURCE_PEER
	if backup {
		what, source = "the node's backup peer", roverv1.CheckpointSource_CHECKPOINT_SOURCE_BACKUP
		res, err = a.ckpt.FetchShards(ctx, step, int(asg.GetLocalWorldSize()), int(asg.GetRankOffset()), int(asg.GetWorldSize()),
			addrs, a.cfg.RunID, a.peerToken)
	} else {
		res, err = a.ckpt.FetchFromPeers(ctx, step, addrs, a.cfg.RunID, a.peerToken)
	}
	if err != nil {
		a.log.Warn("could not restore the checkpoint from "+what+": the round is given up, and the next agrees without peer restore",
			"step", step, "round", asg.GetRound(), "err", err)
		return fmt.Errorf("%w: step %d: %w", errPeerRestore, step, err)
	}
	if res.Bytes == 0 {
		return nil // every shard was in memory already
	}
	from := res.Addr
	for _, p := range peers {
		if p.GetAddr() == res.Addr {
			from = p.GetNodeId()
		}
	}
	a.life.fetched(asg.GetRound(), step, source, from, res.Duration)
	a.log.Info("restored the checkpoint from "+what, "step", step, "round", asg.GetRound(), "peer", from,
		"bytes", res.Bytes, "seconds", res.Duration.Seconds())
	return nil
}
