package ckpt

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"gocloud.dev/gcerrors"
)

// VerifyFiles checks, before a commit, that every file m lists is in
// storage as its rank reported it: it exists with the reported size, and
// its safetensors header (a ranged read of its first bytes) names m's step
// and the file's rank. It does not read the tensors: the agent read each
// file back and checked its CRC32C before reporting it, and [LoadRank]
// checks it again on every load. A file that fails is ErrCorrupt naming the
// rank and what was found, and its rank is in bad; a storage failure is
// returned as it is.
func VerifyFiles(ctx context.Context, b *Bucket, m Manifest) (bad []int, err error) {
	errs := eachFile(m.Files, func(f FileInfo) error { return verifyFile(ctx, b, m.Step, f) })
	for i, err := range errs {
		if errors.Is(err, ErrCorrupt) {
			bad = append(bad, m.Files[i].Rank)
		}
	}
	return bad, errors.Join(errs...)
}

func verifyFile(ctx context.Context, b *Bucket, step int64, f FileInfo) error {
	size, err := b.size(ctx, f.Path)
	switch {
	case notFound(err):
		return corruptf("rank %d's file %s of step %d is not in %s", f.Rank, f.Path, step, b.url)
	case err != nil:
		return err
	case size != f.Size:
		return corruptf("rank %d's file %s has %d bytes, but %d were reported", f.Rank, f.Path, size, f.Size)
	case size < 8:
		return corruptf("rank %d's file %s has %d bytes: too short for a safetensors file", f.Rank, f.Path, size)
	}
	head, err := b.readRange(ctx, f.Path, 0, 8)
	if err != nil {
		return err
	}
	n := binary.LittleEndian.Uint64(head)
	if n > maxHeaderLen || n > uint64(size-8) {
		return corruptf("rank %d's file %s: header length %d does not fit its %d bytes", f.Rank, f.Path, n, size)
	}
	hdr, err := b.readRange(ctx, f.Path, 0, 8+int64(n))
	if err != nil {
		return err
	}
	meta, err := Metadata(hdr)
	if err != nil {
		return fmt.Errorf("rank %d's file %s: %w", f.Rank, f.Path, err)
	}
	if err := checkMeta(meta, step, f.Rank); err != nil {
		return fmt.Errorf("rank %d's file %s: %w", f.Rank, f.Path, err)
	}
	return nil
}

// readRange reads length bytes of key from offset.
func (b *Bucket) readRange(ctx context.Context, key string, offset, length int64) ([]byte, error) {
	r, err := b.b.NewRangeReader(ctx, key, offset, length, nil)
	if err != nil {
		return nil, b.fail("read", key, err)
	}
	defer r.Close()
	data, err := io.ReadAll(io.LimitReader(r, length))
	if err != nil {
		return nil, b.fail("read", key, err)
	}
	if int64(len(data)) != length {
		return nil, b.fail("read", key, corruptf("read %d bytes at %d, want %d", len(data), offset, length))
	}
	return data, nil
}

// RemoveRankFile removes what a failed persistence of rank's file of step
// may have left: the file itself (a step that failed on one rank cannot
// be committed from this try), a file bucket's temporary files of it, and
// the step's directory if nothing else is in it. Storage that fills up
// thus gets its space back for the next try. It must not be called for a
// file that was reported durable.
func RemoveRankFile(ctx context.Context, b *Bucket, step int64, rank int) error {
	key := RankPath(step, rank)
	if err := b.b.Delete(ctx, key); err != nil && gcerrors.Code(err) != gcerrors.NotFound {
		return b.fail("delete", key, err)
	}
	if b.dir == "" {
		return nil
	}
	temps, _ := filepath.Glob(filepath.Join(b.dir, filepath.FromSlash(key)) + ".*.tmp")
	var errs []error
	for _, t := range temps {
		if err := os.Remove(t); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	b.removeEmptyStepDir(step)
	return errors.Join(errs...)
}

// RemoveUncommitted deletes the step directories that hold no manifest
// and can no longer be committed: those below the step the latest marker
// names (a newer step is committed), and with all also those above it.
// Pass all only when no persistence of the job can be in flight: when a
// job starts fresh, before any of its workers run. It returns the steps it
// deleted.
func RemoveUncommitted(ctx context.Context, b *Bucket, all bool) ([]int64, error) {
	latest, err := LatestStep(ctx, b)
	switch {
	case errors.Is(err, ErrNoCheckpoint):
		latest = -1
	case err != nil:
		return nil, fmt.Errorf("not removing uncommitted checkpoints: %w", err)
	}
	steps, err := b.listSteps(ctx)
	if err != nil {
		return nil, err
	}
	var doomed []int64
	for _, s := range steps {
		if s == latest || s > latest && !all {
			continue
		}
		ok, err := b.b.Exists(ctx, ManifestPath(s))
		if err != nil {
			return nil, b.fail("stat", ManifestPath(s), err)
		}
		if !ok {
			doomed = append(doomed, s)
		}
	}
	return b.deleteSteps(ctx, doomed)
}

// deleteSteps deletes steps in increasing order and returns those deleted.
func (b *Bucket) deleteSteps(ctx context.Context, steps []int64) ([]int64, error) {
	slices.Sort(steps)
	for i, s := range steps {
		if err := b.deleteStep(ctx, s); err != nil {
			return steps[:i], err
		}
	}
	return steps, nil
}

// eachFile calls check for every file, verifyParallelism at a time, and
// returns their errors in the files' order.
func eachFile(files []FileInfo, check func(FileInfo) error) []error {
	errs := make([]error, len(files))
	sem := make(chan struct{}, verifyParallelism)
	var wg sync.WaitGroup
	for i, f := range files {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			errs[i] = check(f)
		})
	}
	wg.Wait()
	return errs
}
