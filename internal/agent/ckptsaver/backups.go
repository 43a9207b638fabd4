package ckptsaver

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/ckpt"
	"github.com/roverml/rover/internal/ckpt/peer"
)

// Backup peers (docs/design/flash-checkpoint.md, "Backup peers"): in
// sharded mode every node's agent keeps, in shared memory, a copy of
// another node's shards, which that node's agent pushes after each save
// (backuppush.go); a node that replaces a lost one fetches its shards from
// there before its workers start. backupArenas is the keeping side.

// backupPrefix names a backup arena in the arena directory:
// "backup-<the other node's local rank>".
const backupPrefix = "backup-"

// minAutoBackupBytes is the least shared memory the automatic budget
// allows backups: room for the first pushes, which may come before this
// node's own workers saved.
const minAutoBackupBytes = 64 << 20

// backupArenas keeps the sharded snapshots of the node this one backs up:
// one double-buffered arena per local rank of that node, so that a push
// that fails halfway leaves the previous backup intact. They live in the
// agent's arena directory: they go when the agent stops, and are adopted
// with it when it is killed.
type backupArenas struct {
	dir string
	log *slog.Logger
	// budget is the most bytes the arenas' slots may take together (0:
	// the node keeps no backups).
	budget func() int64

	mu      sync.Mutex
	byLocal map[int]*ckpt.Arena
	// receiving are the local ranks whose push is being received: one at a
	// time per arena (its writer calls must not overlap).
	receiving map[int]bool
	// rounds is the round each committed backup was saved in, by local rank
	// and slot (absent: unknown, an adopted arena's: the oldest).
	rounds map[[2]int]int
	// source is the node whose pushes are kept; round the round of this
	// node's newest assignment, whose backups it keeps from round on.
	source string
	round  int
	// stale is a drop that waits for a push of that local rank to end.
	stale map[int]staleRule
}

// staleRule says which backups a new round abandoned: those saved in an
// older round than round, of a step newer than step (every step when
// hasStep is false: the round restored from storage).
type staleRule struct {
	round   int
	step    int64
	hasStep bool
}

func (r staleRule) covers(savedRound int, step int64) bool {
	return savedRound < r.round && (!r.hasStep || step > r.step)
}

// newBackupArenas opens the backup arenas in dir: those a killed agent
// left when adopted, else none.
func newBackupArenas(dir string, adopted bool, budget func() int64, log *slog.Logger) *backupArenas {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	b := &backupArenas{dir: dir, log: log, budget: budget, byLocal: map[int]*ckpt.Arena{}, receiving: map[int]bool{},
		rounds: map[[2]int]int{}, stale: map[int]staleRule{}}
	if !adopted {
		return b
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		local, err := strconv.Atoi(strings.TrimPrefix(e.Name(), backupPrefix))
		if !strings.HasPrefix(e.Name(), backupPrefix) || err != nil || local < 0 {
			continue
		}
		a, err := ckpt.OpenArena(dir, e.Name())
		if err != nil {
			os.Remove(filepath.Join(dir, e.Name())) // damaged
			continue
		}
		b.byLocal[local] = a
	}
	return b
}

// setSource makes the node keep source's pushes (none for ""), from round
// on.
func (b *backupArenas) setSource(source string, round int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.source, b.round = source, max(b.round, round)
}

var _ peer.BackupStore = (*backupArenas)(nil)

// Open accepts a push of bk when it comes from the node this one backs up,
// from its current round or a newer one, fits the budget, and no other
// push of its local rank is being received.
func (b *backupArenas) Open(bk peer.Backup, size int64) (peer.Sink, func([]byte) error, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.budget() <= 0:
		return nil, nil, fmt.Errorf("%w: this node keeps no backups (--checkpoint-backup-bytes 0)", peer.ErrTooLarge)
	case b.source == "" || bk.From != b.source:
		return nil, nil, fmt.Errorf("this node backs up %q, not %q", b.source, bk.From)
	case bk.Round < b.round:
		return nil, nil, fmt.Errorf("round %d is over: this node's assignment is of round %d", bk.Round, b.round)
	case b.receiving[bk.Local]:
		return nil, nil, fmt.Errorf("%w: local rank %d", peer.ErrBusy, bk.Local)
	}
	slot := (size + 4095) / 4096 * 4096
	a := b.byLocal[bk.Local]
	var have int64
	if a != nil {
		have = a.SlotSize()
	}
	if need := b.bytesLocked() - 2*have + 2*max(slot, have); need > b.budget() {
		return nil, nil, fmt.Errorf("%w: the backups would take %d bytes of shared memory, the budget is %d (--checkpoint-backup-bytes)",
			peer.ErrTooLarge, need, b.budget())
	}
	var err error
	grown := a == nil || a.SlotSize() < size
	switch {
	case a == nil:
		if a, err = ckpt.CreateArena(b.dir, backupPrefix+strconv.Itoa(bk.Local), size); err != nil {
			return nil, nil, fmt.Errorf("create a backup arena: %w", err)
		}
		b.byLocal[bk.Local] = a
	case a.SlotSize() < size:
		// Resize keeps the newest backup only, in slot 0.
		latest, ok := a.Latest()
		round, had := b.rounds[[2]int{bk.Local, latest.Slot}]
		if err := a.Resize(size); err != nil {
			return nil, nil, fmt.Errorf("grow a backup arena: %w", err)
		}
		delete(b.rounds, [2]int{bk.Local, 0})
		delete(b.rounds, [2]int{bk.Local, 1})
		if ok && had {
			b.rounds[[2]int{bk.Local, 0}] = round
		}
	}
	if grown {
		b.log.Info("keeping a backup of a peer's shards", "peer", bk.From, "local_rank", bk.Local, "step", bk.Step,
			"slot_bytes", a.SlotSize(), "backup_bytes", b.bytesLocked(), "budget_bytes", b.budget())
	}
	buf, tok, err := a.BeginWrite(bk.Step)
	if err != nil {
		return nil, nil, err
	}
	b.receiving[bk.Local] = true
	return &backupSink{b: b, a: a, tok: tok, bk: bk, buf: buf}, checkShard(bk.Step, bk.Rank, -1), nil
}

// checkShard checks a shard's safetensors metadata: step's, of rank, in a
// world of world ranks (-1: any), sharded.
func checkShard(step int64, rank, world int) func([]byte) error {
	return func(data []byte) error {
		m, ok := snapshotMeta(0, ckpt.Snapshot{Step: step, Data: data})
		switch {
		case !ok:
			return fmt.Errorf("its safetensors metadata does not describe step %d", step)
		case m.GetMode() != string(ckpt.Sharded):
			return fmt.Errorf("step %d was saved in %s mode: only sharded snapshots are backed up", step, m.GetMode())
		case int(m.GetRank()) != rank:
			return fmt.Errorf("its metadata says rank %d, not %d", m.GetRank(), rank)
		case world >= 0 && int(m.GetWorldSize()) != world:
			return fmt.Errorf("its metadata says a world of %d ranks, not %d", m.GetWorldSize(), world)
		}
		return nil
	}
}

// backupSink writes one push into its arena's slot.
type backupSink struct {
	b   *backupArenas
	a   *ckpt.Arena
	tok ckpt.WriteToken
	bk  peer.Backup
	buf []byte
}

func (s *backupSink) Begin(step, size int64) ([]byte, error) { return s.buf[:size], nil }

func (s *backupSink) Commit(step, size int64) error {
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	defer s.b.endLocked(s.bk.Local)
	if err := s.a.Commit(s.tok, size); err != nil {
		return err
	}
	s.b.rounds[[2]int{s.bk.Local, s.tok.Slot()}] = s.bk.Round
	return nil
}

func (s *backupSink) Abort() {
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	s.b.endLocked(s.bk.Local) // the slot stays unpublished: the older backup is intact
}

// endLocked ends local's receive, and applies a drop that waited for it.
func (b *backupArenas) endLocked(local int) {
	delete(b.receiving, local)
	if r, ok := b.stale[local]; ok {
		delete(b.stale, local)
		b.dropLocked(local, r)
	}
}

// dropStale drops the backups a new round abandoned (staleRule): the
// round restores step (storage when hasStep is false), so what was saved
// after it in an older round is of a timeline no rank resumes, and must
// never be mixed with this round's snapshots of the same step.
func (b *backupArenas) dropStale(r staleRule) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for local := range b.byLocal {
		if b.receiving[local] {
			b.stale[local] = r
			continue
		}
		b.dropLocked(local, r)
	}
}

func (b *backupArenas) dropLocked(local int, r staleRule) {
	a := b.byLocal[local]
	for range 2 { // Valid finds the newer of two slots of one step first
		slots, err := a.Slots()
		if err != nil {
			return
		}
		dropped := false
		for slot, si := range slots {
			if si.State != ckpt.SlotValid {
				continue
			}
			snap, ok := a.Valid(si.Step)
			key := [2]int{local, slot}
			if ok && snap.Slot == slot && r.covers(b.rounds[key], snap.Step) {
				_ = a.Drop(snap)
				delete(b.rounds, key)
				dropped = true
			}
		}
		if !dropped {
			return
		}
	}
}

// snapshot is the backup of global rank's sharded snapshot of step, for
// the peer handler.
func (b *backupArenas) snapshot(step int64, rank int) ([]byte, uint32, func() bool, bool, error) {
	b.mu.Lock()
	arenas := make([]*ckpt.Arena, 0, len(b.byLocal))
	for _, a := range b.byLocal {
		arenas = append(arenas, a)
	}
	b.mu.Unlock()
	for _, a := range arenas {
		snap, ok := a.Valid(step)
		if !ok {
			continue
		}
		if m, ok := snapshotMeta(0, snap); !ok || m.GetMode() != string(ckpt.Sharded) || int(m.GetRank()) != rank {
			continue
		}
		crc, err := a.Checksum(snap)
		if errors.Is(err, ckpt.ErrOverwritten) {
			continue
		}
		if err != nil {
			return nil, 0, nil, false, err
		}
		return snap.Data, crc, func() bool { return a.Check(snap) == nil }, true, nil
	}
	return nil, 0, nil, false, nil
}

// inventory lists the backups, for the join (MemorySnapshot.backup).
func (b *backupArenas) inventory() []*roverv1.MemorySnapshot {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := describeArenas(b.byLocal, func(m *roverv1.MemorySnapshot) bool {
		return m.GetMode() == string(ckpt.Sharded)
	})
	for _, m := range out {
		m.Backup = true
	}
	return out
}

// bytes is the shared memory the backup arenas' slots take.
func (b *backupArenas) bytes() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.bytesLocked()
}

func (b *backupArenas) bytesLocked() int64 {
	var n int64
	for _, a := range b.byLocal {
		n += 2 * a.SlotSize()
	}
	return n
}

// close unmaps and deletes the backup arenas.
func (b *backupArenas) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for local, a := range b.byLocal {
		_ = a.Remove()
		delete(b.byLocal, local)
	}
}
