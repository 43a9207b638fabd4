package ckptsaver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"

	"github.com/roverml/rover/internal/ckpt"
	"github.com/roverml/rover/internal/ckpt/peer"
)

// Peer restore (docs/design/flash-checkpoint.md, "Peer restore" and
// "Backup peers"): in replicated mode local rank 0's arena holds the node's
// copy of the whole state. The saver serves that copy to the agents of
// other nodes of the job (PeerHandler), and fetches the copy of the step
// the master agreed on from one of them into its own arena when the node
// holds none (FetchFromPeers): a node that replaces a lost one then
// restores from memory like the survivors. In sharded mode it serves the
// backups it keeps of another node's shards, keeps the ones pushed to it,
// and a replacement fetches its shards from its backup peer
// (FetchShards).

// peerLocal is the local rank whose arena holds a node's replicated copy.
const peerLocal = 0

// PeerHandler serves the node's replicated snapshots, and the backups it
// keeps of another node's shards, to the agents of run that present token,
// and keeps the shards its backup source pushes.
func (s *Saver) PeerHandler(run, token string) http.Handler {
	return &peer.Handler{Run: run, Token: token, Src: peerSource{s.arenas, s.backups}, Backups: s.backups, Log: s.cfg.Log}
}

// ServePeers serves PeerHandler on ln until ctx ends; wrap, when set,
// wraps the handler (fault injection in tests).
func (s *Saver) ServePeers(ctx context.Context, ln net.Listener, run, token string, wrap func(http.Handler) http.Handler) {
	h := s.PeerHandler(run, token).(*peer.Handler)
	srv := peer.NewServer(h)
	if wrap != nil {
		srv.Handler = wrap(h)
	}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	_ = srv.Serve(ln)
}

// HoldsReplicated reports whether the node's copy of step is in memory.
func (s *Saver) HoldsReplicated(step int64) bool {
	a := s.arenas.get(peerLocal)
	if a == nil {
		return false
	}
	snap, ok := a.Valid(step)
	if !ok {
		return false
	}
	m, ok := snapshotMeta(peerLocal, snap)
	return ok && m.GetMode() == string(ckpt.Replicated)
}

// FetchFromPeers fetches the node's replicated copy of step from the first
// of peers (host:port) that sends one that passes every check, into local
// rank 0's arena, and commits it there. Call it while the workers are
// stopped. On error nothing was committed and the workers fall back to
// storage.
func (s *Saver) FetchFromPeers(ctx context.Context, step int64, peers []string, run, token string) (peer.Result, error) {
	sink := &peerSink{ar: s.arenas, local: peerLocal}
	check := func(data []byte) error {
		m, ok := snapshotMeta(peerLocal, ckpt.Snapshot{Step: step, Data: data})
		switch {
		case !ok:
			return fmt.Errorf("its safetensors metadata does not describe step %d", step)
		case m.GetMode() != string(ckpt.Replicated):
			return fmt.Errorf("step %d was saved in %s mode: only replicated snapshots serve another node", step, m.GetMode())
		}
		return nil
	}
	return peer.FetchFirst(ctx, peers, peer.Request{Run: run, Token: token, Step: step, Check: check}, sink)
}

// peerSource serves local rank 0's replicated snapshots, and the backups
// of other nodes' shards.
type peerSource struct {
	ar      *arenas
	backups *backupArenas
}

var _ peer.Source = peerSource{}

func (p peerSource) Snapshot(step int64, rank int) ([]byte, uint32, func() bool, bool, error) {
	if rank >= 0 {
		return p.backups.snapshot(step, rank)
	}
	a := p.ar.get(peerLocal)
	if a == nil {
		return nil, 0, nil, false, nil
	}
	snap, ok := a.Valid(step)
	if !ok {
		return nil, 0, nil, false, nil
	}
	if m, ok := snapshotMeta(peerLocal, snap); !ok || m.GetMode() != string(ckpt.Replicated) {
		return nil, 0, nil, false, nil
	}
	crc, err := a.Checksum(snap) // checked against the CRC32C recorded at its first read
	if err != nil {
		if errors.Is(err, ckpt.ErrOverwritten) {
			return nil, 0, nil, false, nil
		}
		return nil, 0, nil, false, err
	}
	return snap.Data, crc, func() bool { return a.Check(snap) == nil }, true, nil
}

// peerSink writes a fetched snapshot into a local rank's arena.
type peerSink struct {
	ar    *arenas
	local int
	open  bool
}

var _ peer.Sink = (*peerSink)(nil)

func (p *peerSink) Begin(step, size int64) ([]byte, error) {
	_, _, slot, err := p.ar.begin(p.local, step, size)
	if err != nil {
		return nil, err
	}
	p.open = true
	return slot[:size], nil
}

func (p *peerSink) Commit(step, size int64) error {
	p.open = false
	return p.ar.commit(p.local, step, size)
}

func (p *peerSink) Abort() {
	if p.open {
		p.open = false
		p.ar.abort(p.local)
	}
}
