package ckpt

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"
)

// Commit tracks, for the job master, which ranks' files are durable for
// each checkpoint step of one world (one rendezvous round: make a new Commit
// when the world changes; the old one's pending steps can no longer
// complete). It does no I/O and keeps no clock; it is not safe for
// concurrent use.
//
// The master feeds it the FileInfo of each [PersistRank] that succeeded
// (Durable); once a step is Ready it takes its Manifest, writes it with
// [WriteManifestAndLatest], and on success calls Committed.
type Commit struct {
	worldSize int
	mode      Mode
	pending   map[int64]map[int]FileInfo // step -> rank -> file
	committed int64                      // the last committed step, or -1
}

// NewCommit returns a coordinator for a world of worldSize ranks.
func NewCommit(worldSize int, mode Mode) (*Commit, error) {
	if worldSize < 1 {
		return nil, invalidf("world size %d", worldSize)
	}
	if mode != Sharded && mode != Replicated {
		return nil, invalidf("mode %q: want %q or %q", mode, Sharded, Replicated)
	}
	return &Commit{worldSize: worldSize, mode: mode, pending: map[int64]map[int]FileInfo{}, committed: -1}, nil
}

// Durable records that rank's file for step is durable. A second report
// for the same rank and step replaces the first (the file was written
// again). Reports for a step at or below the last committed one are
// ignored: that step can no longer become the newest.
func (c *Commit) Durable(step int64, rank int, info FileInfo) error {
	switch {
	case step < 0:
		return invalidf("step %d is negative", step)
	case rank < 0 || rank >= c.worldSize:
		return invalidf("rank %d outside world size %d", rank, c.worldSize)
	case info.Rank != rank || info.Path != RankPath(step, rank):
		return invalidf("file info %+v is not rank %d's file of step %d", info, rank, step)
	case info.Size < 0:
		return invalidf("file info %+v has a negative size", info)
	case step <= c.committed:
		return nil
	}
	if c.pending[step] == nil {
		c.pending[step] = map[int]FileInfo{}
	}
	c.pending[step][rank] = info
	return nil
}

// Forget drops rank's report of step: its file did not check out, and
// only a new report (of a new file) may complete the step.
func (c *Commit) Forget(step int64, rank int) {
	delete(c.pending[step], rank)
	if len(c.pending[step]) == 0 {
		delete(c.pending, step)
	}
}

// Ready reports whether step can be committed: in Sharded mode every rank's
// file is durable, in Replicated mode at least one.
func (c *Commit) Ready(step int64) bool {
	files := c.pending[step]
	if c.mode == Replicated {
		return len(files) > 0
	}
	return len(files) == c.worldSize
}

// Pending returns the steps with durable files that are not committed, in
// increasing order.
func (c *Commit) Pending() []int64 {
	return slices.Sorted(maps.Keys(c.pending))
}

// Manifest returns step's manifest, listing its durable files (all ranks'
// in Sharded mode, those that reported in Replicated mode), or ErrNotReady.
func (c *Commit) Manifest(step int64, created time.Time) (Manifest, error) {
	if !c.Ready(step) {
		return Manifest{}, fmt.Errorf("%w: step %d has %d of %d ranks durable", ErrNotReady, step, len(c.pending[step]), c.worldSize)
	}
	m := Manifest{Schema: ManifestSchema, Step: step, WorldSize: c.worldSize, Mode: c.mode, Created: created.UTC()}
	for _, r := range slices.Sorted(maps.Keys(c.pending[step])) {
		m.Files = append(m.Files, c.pending[step][r])
	}
	return m, nil
}

// Committed records that step's manifest and latest marker are written. It
// forgets step and every pending step below it.
func (c *Commit) Committed(step int64) {
	c.committed = max(c.committed, step)
	for s := range c.pending {
		if s <= step {
			delete(c.pending, s)
		}
	}
}

// WriteManifestAndLatest commits m: it writes the step's manifest.json,
// then replaces the latest marker with m.Step. The marker is the commit
// point: a crash before it leaves the previous step committed; each write
// is atomic (see Bucket.write). The files m lists must be durable already.
func WriteManifestAndLatest(ctx context.Context, b *Bucket, m Manifest) error {
	data, err := MarshalManifest(m)
	if err != nil {
		return err
	}
	if err := b.write(ctx, ManifestPath(m.Step), data); err != nil {
		return err
	}
	return b.write(ctx, LatestKey, formatLatest(m.Step))
}

// Keep deletes old checkpoints: of the steps at or below the one the latest
// marker names, it keeps the newest n that have a manifest, and always the
// one the marker names, and deletes the rest, including directories without a manifest (commits
// or deletions that were interrupted). Steps above the marker are commits in
// progress and are never touched. Each step loses its manifest first, then
// its files, so a crash midway leaves a step that is simply not committed.
// It returns the steps it deleted. Without a latest marker it deletes
// nothing; with an unreadable one it refuses (ErrCorrupt).
func Keep(ctx context.Context, b *Bucket, n int) ([]int64, error) {
	if n < 1 {
		return nil, invalidf("keep %d checkpoints: want at least 1", n)
	}
	latest, err := LatestStep(ctx, b)
	if errors.Is(err, ErrNoCheckpoint) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("not deleting old checkpoints: %w", err)
	}
	steps, err := b.listSteps(ctx)
	if err != nil {
		return nil, err
	}
	kept := 0
	var doomed []int64
	for _, s := range slices.Backward(steps) {
		if s > latest {
			continue
		}
		ok, err := b.b.Exists(ctx, ManifestPath(s))
		if err != nil {
			return nil, b.fail("stat", ManifestPath(s), err)
		}
		if ok && kept < n {
			kept++
			continue
		}
		if s != latest {
			doomed = append(doomed, s)
		}
	}
	return b.deleteSteps(ctx, doomed)
}
