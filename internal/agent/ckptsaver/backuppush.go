package ckptsaver

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/roverml/rover/internal/ckpt"
	"github.com/roverml/rover/internal/ckpt/peer"
)

// backupTarget is the node's backup peer in a round's world.
type backupTarget struct {
	node, addr string
	round      int
}

// pendingPush is a local rank's newest saved step not pushed yet, and the
// round its workers saved it in.
type pendingPush struct {
	step  int64
	round int
}

// backupPusher sends the node's sharded snapshots to its backup peer in
// the background: each local rank's newest committed step, one push at a
// time, on a thread that yields to the training processes (yieldingRun),
// over peer.Push (the job's token, the CRC32C the arena records). A save
// only records its step (notify) and never waits for a push. When saves
// come faster than pushes go, a rank's older pending step is superseded;
// a push whose snapshot is overwritten while it is sent is cut
// (peer.ErrChanged), and the rank's next save goes instead. Replicated
// snapshots are never pushed: every node holds the whole state.
type backupPusher struct {
	s    *Saver
	wake chan struct{} // size 1: a push may be pending

	mu               sync.Mutex
	target           backupTarget // node "": none
	jobRun, jobToken string
	pending          map[int]pendingPush
	// failing: the last push failed (the next success is logged); pushed:
	// some push succeeded to the current target.
	failing, pushed bool
}

func newBackupPusher(s *Saver) *backupPusher {
	return &backupPusher{s: s, wake: make(chan struct{}, 1), pending: map[int]pendingPush{}}
}

// setTarget makes the pusher send to target from now on (node "": stop);
// pending pushes to an earlier target are dropped.
func (p *backupPusher) setTarget(t backupTarget, run, token string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if t.node != p.target.node || t.addr != p.target.addr {
		clear(p.pending)
		p.pushed = false
	}
	p.target, p.jobRun, p.jobToken = t, run, token
}

// notify records that local committed step in round: the pusher sends it
// when its turn comes.
func (p *backupPusher) notify(local int, step int64, round int) {
	p.mu.Lock()
	if p.target.node == "" || p.s.backupBudget() <= 0 {
		p.mu.Unlock()
		return
	}
	p.pending[local] = pendingPush{step: step, round: round}
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// run pushes pending snapshots until ctx ends.
func (p *backupPusher) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.wake:
		}
		for {
			p.mu.Lock()
			locals := make([]int, 0, len(p.pending))
			for l := range p.pending {
				locals = append(locals, l)
			}
			if len(locals) == 0 {
				p.mu.Unlock()
				break
			}
			local := slices.Min(locals)
			job, t, run, token := p.pending[local], p.target, p.jobRun, p.jobToken
			delete(p.pending, local)
			p.mu.Unlock()
			var n int64
			var err error
			start := time.Now()
			yieldingRun(func() { n, err = p.push(ctx, t, run, token, local, job) })
			p.done(t, local, job.step, n, time.Since(start), err)
			if ctx.Err() != nil {
				return
			}
		}
	}
}

// push sends local's snapshot of job.step to t; n is 0 when there was
// nothing to send (the step was overwritten since, or is not sharded).
func (p *backupPusher) push(ctx context.Context, t backupTarget, run, token string, local int, job pendingPush) (n int64, err error) {
	a := p.s.arenas.get(local)
	if a == nil {
		return 0, nil
	}
	snap, ok := a.Valid(job.step)
	if !ok {
		return 0, nil // a newer save is pending
	}
	m, ok := snapshotMeta(local, snap)
	if !ok || m.GetMode() != string(ckpt.Sharded) {
		return 0, nil
	}
	crc, err := a.Checksum(snap)
	if errors.Is(err, ckpt.ErrOverwritten) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	err = peer.Push(ctx, peer.PushRequest{Addr: t.addr, Run: run, Token: token,
		Backup: peer.Backup{From: p.s.cfg.NodeID, Round: job.round, Step: job.step, Rank: int(m.GetRank()), Local: local},
		Data:   snap.Data, CRC: crc, Intact: func() bool { return a.Check(snap) == nil }})
	if errors.Is(err, peer.ErrChanged) {
		return 0, nil // the rank's next save is pushed instead
	}
	return int64(len(snap.Data)), err
}

// done records a push's outcome: metrics, and a log line when pushes
// start, fail, or work again.
func (p *backupPusher) done(t backupTarget, local int, step, n int64, d time.Duration, err error) {
	log := p.s.cfg.Log
	p.mu.Lock()
	first := err == nil && n > 0 && (!p.pushed || p.failing)
	failed := err != nil && !p.failing
	if err == nil && n > 0 {
		p.pushed, p.failing = true, false
	} else if err != nil {
		p.failing = true
	}
	p.mu.Unlock()
	switch {
	case err != nil:
		if p.s.cfg.PushFailed != nil {
			p.s.cfg.PushFailed()
		}
		if failed {
			log.Warn("could not back up a shard to the backup peer: the next save tries again", "peer", t.node,
				"round", t.round, "step", step, "local_rank", local, "err", err)
		} else {
			log.Debug("could not back up a shard to the backup peer", "peer", t.node, "step", step, "local_rank", local, "err", err)
		}
	case n > 0:
		if p.s.cfg.Pushed != nil {
			p.s.cfg.Pushed(d, n)
		}
		if first {
			log.Info("backing up this node's shards to its backup peer", "peer", t.node, "addr", t.addr,
				"round", t.round, "step", step, "bytes", n, "seconds", d.Seconds())
		}
	}
}
