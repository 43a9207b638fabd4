package rover

import (
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"syscall"
	"time"

	"connectrpc.com/connect"
	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/ckpt"
)

// Loading: the snapshots a rank can read from memory, the step it loads,
// and the restore from storage.

// Steps returns the steps of this rank's snapshots in memory that
// [Checkpointer.LoadStep] can load (in sharded mode, the ones this rank
// saved), highest first.
func (k *Checkpointer) Steps(ctx context.Context) ([]int64, error) {
	snaps, err := k.snapshots(ctx)
	if err != nil {
		return nil, fmt.Errorf("list checkpoint steps: %w", err)
	}
	var steps []int64
	for _, s := range snaps {
		meta, err := readMeta(s)
		if err != nil {
			return nil, fmt.Errorf("list checkpoint steps: step %d: %w", s.GetStep(), err)
		}
		if k.usable(meta, s.GetStep()) {
			steps = append(steps, s.GetStep())
		}
	}
	// In replicated mode a step may be both in this rank's arena (restored
	// from storage) and in the node copy: list it once.
	return slices.Compact(steps), nil
}

// Load returns the snapshot of the step every rank of the job restores
// from memory in this round, which the master agreed when the round started
// from what every node holds (so all ranks load the same step), or, once
// this checkpointer has saved (a rollback, say), of the step it saved last
// (ranks that saved the same steps load the same one); or, when
// there is none and the checkpointer has storage, the newest committed step
// from storage ([Checkpointer.Restore]). found is false when there is
// neither. extra is nil when the snapshot has none. The returned Data does
// not alias shared memory.
func (k *Checkpointer) Load(ctx context.Context) (step int64, tensors []Tensor, extra []byte, found bool, err error) {
	if err := k.ready(ctx); err != nil {
		return 0, nil, nil, false, fmt.Errorf("load checkpoint: %w", err)
	}
	snaps, agreed, err := k.snapshotsAgreed(ctx)
	if err != nil {
		return 0, nil, nil, false, fmt.Errorf("load checkpoint: %w", err)
	}
	if k.lastSaved != nil {
		agreed = k.lastSaved
		if snaps, err = k.waitFor(ctx, *agreed, snaps); err != nil {
			return 0, nil, nil, false, fmt.Errorf("load checkpoint: %w", err)
		}
	}
	for _, s := range snaps {
		if agreed == nil || s.GetStep() != *agreed {
			continue
		}
		tensors, extra, ok, err := k.read(s)
		if err != nil {
			return 0, nil, nil, false, fmt.Errorf("load checkpoint step %d from memory: %w", s.GetStep(), err)
		}
		if ok {
			return s.GetStep(), tensors, extra, true, nil
		}
	}
	if k.url == "" {
		return 0, nil, nil, false, nil
	}
	return k.Restore(ctx)
}

// waitFor returns snaps once step is among them: in replicated mode local
// rank 0 may still be copying the step this rank's save skipped. It gives
// up after a minute, returning what there is.
func (k *Checkpointer) waitFor(ctx context.Context, step int64, snaps []*roverv1.CheckpointSnapshot) ([]*roverv1.CheckpointSnapshot, error) {
	deadline := time.Now().Add(time.Minute)
	for k.home != k.local && time.Now().Before(deadline) &&
		!slices.ContainsFunc(snaps, func(s *roverv1.CheckpointSnapshot) bool { return s.GetStep() == step }) {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
		var err error
		if snaps, _, err = k.snapshotsAgreed(ctx); err != nil {
			return nil, err
		}
	}
	return snaps, nil
}

// LoadStep returns this rank's snapshot of step from memory; found is false
// when memory does not hold it (in sharded mode, one this rank saved).
func (k *Checkpointer) LoadStep(ctx context.Context, step int64) (tensors []Tensor, extra []byte, found bool, err error) {
	if err := k.ready(ctx); err != nil {
		return nil, nil, false, fmt.Errorf("load checkpoint step %d: %w", step, err)
	}
	snaps, err := k.snapshots(ctx)
	if err != nil {
		return nil, nil, false, fmt.Errorf("load checkpoint step %d: %w", step, err)
	}
	for _, s := range snaps {
		if s.GetStep() != step {
			continue
		}
		tensors, extra, ok, err := k.read(s)
		if err != nil {
			return nil, nil, false, fmt.Errorf("load checkpoint step %d from memory: %w", step, err)
		}
		return tensors, extra, ok, nil
	}
	return nil, nil, false, nil
}

// Restore has the agent load the newest committed step from storage into
// this rank's memory, and returns it; found is false when storage holds no
// committed checkpoint. In replicated mode every rank gets the file of the
// lowest rank that saved one.
func (k *Checkpointer) Restore(ctx context.Context) (step int64, tensors []Tensor, extra []byte, found bool, err error) {
	if err := k.ready(ctx); err != nil {
		return 0, nil, nil, false, fmt.Errorf("restore checkpoint: %w", err)
	}
	if k.url == "" {
		return 0, nil, nil, false, errors.New("restore checkpoint: this job has no checkpoint storage: name it, c.Checkpointer(DIR_OR_URL, ...), or start the job with --checkpoint-dir")
	}
	r, err := k.c.api.CheckpointRestore(ctx, connect.NewRequest(&roverv1.CheckpointRestoreRequest{LocalRank: k.local, Rank: int32(k.rank)}))
	if err != nil {
		return 0, nil, nil, false, fmt.Errorf("restore checkpoint from %s: %w", k.url, err)
	}
	if !r.Msg.GetFound() {
		return 0, nil, nil, false, nil
	}
	s := r.Msg.GetSnapshot()
	tensors, extra, ok, err := k.read(s)
	switch {
	case err != nil:
		return 0, nil, nil, false, fmt.Errorf("restore checkpoint step %d from %s: %w", s.GetStep(), k.url, err)
	case !ok:
		return 0, nil, nil, false, fmt.Errorf("restore checkpoint step %d from %s: the file restored is not rank %d's", s.GetStep(), k.url, k.rank)
	}
	return s.GetStep(), tensors, extra, true, nil
}

// snapshots lists this rank's snapshots in memory, highest step first (the
// agent lists the one written last first, a restored older step say).
func (k *Checkpointer) snapshots(ctx context.Context) ([]*roverv1.CheckpointSnapshot, error) {
	snaps, _, err := k.snapshotsAgreed(ctx)
	return snaps, err
}

// snapshotsAgreed lists the snapshots this rank can load, highest step
// first (its own arena's, then in replicated mode the node copy's), and
// the step the master agreed for this round (nil: none).
func (k *Checkpointer) snapshotsAgreed(ctx context.Context) ([]*roverv1.CheckpointSnapshot, *int64, error) {
	r, err := k.c.api.CheckpointSnapshots(ctx, connect.NewRequest(&roverv1.CheckpointSnapshotsRequest{LocalRank: k.local}))
	if err != nil {
		return nil, nil, fmt.Errorf("list the snapshots in memory: %w", err)
	}
	snaps := r.Msg.GetSnapshots()
	if k.home != k.local {
		node, err := k.c.api.CheckpointSnapshots(ctx, connect.NewRequest(&roverv1.CheckpointSnapshotsRequest{LocalRank: k.home}))
		if err != nil {
			return nil, nil, fmt.Errorf("list the snapshots in memory: %w", err)
		}
		snaps = append(snaps, node.Msg.GetSnapshots()...)
	}
	slices.SortStableFunc(snaps, func(a, b *roverv1.CheckpointSnapshot) int { return cmp.Compare(b.GetStep(), a.GetStep()) })
	return snaps, r.Msg.AgreedStep, nil
}

// usable reports whether a snapshot's metadata is of step and, in sharded
// mode, of this rank.
func (k *Checkpointer) usable(meta map[string]string, step int64) bool {
	if meta[ckpt.MetaStep] != strconv.FormatInt(step, 10) {
		return false
	}
	return k.mode == ModeReplicated || meta[ckpt.MetaRank] == strconv.Itoa(k.rank)
}

// read copies a snapshot out of the arena and decodes it; ok is false when
// it is not usable by this rank.
func (k *Checkpointer) read(s *roverv1.CheckpointSnapshot) (tensors []Tensor, extra []byte, ok bool, err error) {
	buf := make([]byte, s.GetLength())
	if err := readArena(s.GetPath(), s.GetOffset(), buf); err != nil {
		return nil, nil, false, err
	}
	all, meta, err := ckpt.Decode(buf)
	if err != nil {
		return nil, nil, false, err
	}
	if !k.usable(meta, s.GetStep()) {
		return nil, nil, false, nil
	}
	rest, extra := ckpt.SplitExtra(all)
	tensors = make([]Tensor, len(rest))
	for i, t := range rest {
		tensors[i] = Tensor(t)
	}
	return tensors, extra, true, nil
}

// readMeta reads only the metadata of a snapshot in the arena.
func readMeta(s *roverv1.CheckpointSnapshot) (map[string]string, error) {
	var n [8]byte
	if s.GetLength() < 8 {
		return nil, fmt.Errorf("%w: snapshot of %d bytes is shorter than its header length", ckpt.ErrCorrupt, s.GetLength())
	}
	if err := readArena(s.GetPath(), s.GetOffset(), n[:]); err != nil {
		return nil, err
	}
	hl := binary.LittleEndian.Uint64(n[:])
	if hl > metaHeaderMax || hl > uint64(s.GetLength()-8) {
		return nil, fmt.Errorf("%w: header length %d does not fit a snapshot of %d bytes", ckpt.ErrCorrupt, hl, s.GetLength())
	}
	hdr := make([]byte, hl)
	if err := readArena(s.GetPath(), s.GetOffset()+8, hdr); err != nil {
		return nil, err
	}
	var h struct {
		Meta map[string]string `json:"__metadata__"`
	}
	if err := json.Unmarshal(hdr, &h); err != nil {
		return nil, fmt.Errorf("%w: snapshot header: %w", ckpt.ErrCorrupt, err)
	}
	return h.Meta, nil
}

// readArena reads len(buf) bytes at off of the arena file at path.
func readArena(path string, off int64, buf []byte) error {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return fmt.Errorf("open the checkpoint arena: %w", err)
	}
	defer f.Close()
	if _, err := f.ReadAt(buf, off); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return fmt.Errorf("read the checkpoint arena %s: %w", path, err)
	}
	return nil
}
