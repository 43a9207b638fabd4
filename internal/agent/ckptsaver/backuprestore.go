package ckptsaver

import (
	"context"
	"fmt"
	"time"

	"github.com/roverml/rover/internal/ckpt/peer"
)

// BackupPeers says which backup peer this node pushes its shards to in
// round (node "": none) and which node's pushes it keeps (source "":
// none), as the round's assignment says; run and token authenticate the
// pushes. Pushes to an earlier peer that were not sent yet are dropped.
type BackupPeers struct {
	Round          int
	PeerNode, Addr string
	Source         string
	Run, Token     string
}

// backupSaved tells the pusher that local committed step: it goes to the
// backup peer in the background, when sharded.
func (s *Saver) backupSaved(local int, step int64) {
	round := 0
	if s.cfg.Round != nil {
		round = s.cfg.Round()
	}
	s.pusher.notify(local, step, round)
}

// SetBackupPeers applies a round's backup peers (see BackupPeers).
func (s *Saver) SetBackupPeers(b BackupPeers) {
	s.pusher.setTarget(backupTarget{node: b.PeerNode, addr: b.Addr, round: b.Round}, b.Run, b.Token)
	s.backups.setSource(b.Source, b.Round)
}

// DropStaleBackups drops the backups a round that starts abandons: those
// saved in an older round of a step newer than the one the round restores
// from memory (every one such when step is nil: the round restores from
// storage). What was saved after the restored step belongs to a timeline
// no rank resumes, and must never be restored beside this round's
// snapshots of the same step. Call it before the round's workers start.
func (s *Saver) DropStaleBackups(round int, step *int64) {
	r := staleRule{round: round}
	if step != nil {
		r.step, r.hasStep = *step, true
	}
	s.backups.dropStale(r)
}

// HoldsShard reports whether local's arena holds rank's sharded snapshot
// of step, in a world of world ranks.
func (s *Saver) HoldsShard(local int, step int64, rank, world int) bool {
	a := s.arenas.get(local)
	if a == nil {
		return false
	}
	snap, ok := a.Valid(step)
	return ok && checkShard(step, rank, world)(snap.Data) == nil
}

// FetchShards fetches, for each of the node's local ranks whose arena
// does not hold its shard of step already, that shard (of global rank
// rankOffset+local, in a world of world ranks) from the first of peers
// (host:port, the node's backup peers) that sends one that passes every
// check, into the local rank's arena. Call it while the workers are
// stopped. On error some local ranks may hold their shard (each checked)
// and others not: the round cannot start from memory.
func (s *Saver) FetchShards(ctx context.Context, step int64, locals, rankOffset, world int, peers []string, run, token string) (peer.Result, error) {
	var total peer.Result
	start := time.Now()
	for local := range locals {
		rank := rankOffset + local
		if s.HoldsShard(local, step, rank, world) {
			continue
		}
		req := peer.Request{Run: run, Token: token, Step: step, Shard: true, Rank: rank, Check: checkShard(step, rank, world)}
		res, err := peer.FetchFirst(ctx, peers, req, &peerSink{ar: s.arenas, local: local})
		if err != nil {
			return peer.Result{}, fmt.Errorf("local rank %d: %w", local, err)
		}
		total.Addr, total.Bytes = res.Addr, total.Bytes+res.Bytes
	}
	total.Duration = time.Since(start)
	return total, nil
}
