package ckpt

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
)

// Verify is how thoroughly [FindLatest] checks a step's files.
type Verify int

const (
	// VerifyCRC reads every file and checks its size and CRC32C: the whole
	// checkpoint is read once.
	VerifyCRC Verify = iota
	// VerifySize checks only that every file exists with the right size (one
	// metadata request per file). [LoadRank] still checks the CRC32C of each
	// file it reads, and fails with ErrCorrupt on a mismatch.
	VerifySize
)

// verifyParallelism bounds the files checked at once.
const verifyParallelism = 8

// LatestStep returns the step the latest marker names: ErrNoCheckpoint if
// there is no marker, ErrCorrupt if it is unreadable.
func LatestStep(ctx context.Context, b *Bucket) (int64, error) {
	data, err := b.read(ctx, LatestKey)
	if notFound(err) {
		return 0, fmt.Errorf("%w in %s: no %q marker", ErrNoCheckpoint, b.url, LatestKey)
	}
	if err != nil {
		return 0, err
	}
	step, err := parseLatest(data)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", b.url, err)
	}
	return step, nil
}

// LoadLatest is FindLatest with VerifyCRC.
func LoadLatest(ctx context.Context, b *Bucket) (Manifest, error) {
	return FindLatest(ctx, b, VerifyCRC)
}

// FindLatest returns the manifest of the newest checkpoint that is safe to
// restore. A step counts only if the latest marker names it, its manifest
// is valid, and every file it lists exists with the right size (and CRC32C,
// with VerifyCRC). If the named step fails that, FindLatest falls back to
// the newest older step whose manifest and files validate: the marker may
// name a step whose files were lost or damaged since, and an older
// checkpoint beats none. Steps above the marker are never taken (their
// commit did not finish). An unreadable marker (damaged storage) counts as
// naming no bound: the newest valid step is taken. Without a marker, or
// with no valid step, the error wraps ErrNoCheckpoint and says why each
// step was rejected.
//
// A storage error other than a missing object (the network, permissions)
// is returned as such, not taken as a reason to fall back: falling back on
// a transient error would silently lose progress.
func FindLatest(ctx context.Context, b *Bucket, v Verify) (Manifest, error) {
	latest, err := LatestStep(ctx, b)
	var reasons []string
	switch {
	case errors.Is(err, ErrCorrupt):
		latest = math.MaxInt64
		reasons = append(reasons, err.Error())
	case err != nil:
		return Manifest{}, err
	}
	steps, err := b.listSteps(ctx)
	if err != nil {
		return Manifest{}, err
	}
	candidates := []int64{}
	if latest != math.MaxInt64 {
		candidates = append(candidates, latest)
	}
	for _, s := range slices.Backward(steps) {
		if s < latest {
			candidates = append(candidates, s)
		}
	}
	for _, s := range candidates {
		m, err := checkStep(ctx, b, s, v)
		if err == nil {
			return m, nil
		}
		if !errors.Is(err, ErrCorrupt) {
			return Manifest{}, err
		}
		reasons = append(reasons, fmt.Sprintf("step %d: %v", s, err))
	}
	return Manifest{}, fmt.Errorf("%w in %s: %s", ErrNoCheckpoint, b.url, strings.Join(reasons, "; "))
}

// checkStep loads and checks step's manifest and files. A missing or
// invalid one is ErrCorrupt; any other error is a storage failure.
func checkStep(ctx context.Context, b *Bucket, step int64, v Verify) (Manifest, error) {
	data, err := b.read(ctx, ManifestPath(step))
	if notFound(err) {
		return Manifest{}, corruptf("no manifest")
	}
	if err != nil {
		return Manifest{}, err
	}
	m, err := ParseManifest(data)
	if err != nil {
		return Manifest{}, err
	}
	if m.Step != step {
		return Manifest{}, corruptf("manifest in the directory of step %d is for step %d", step, m.Step)
	}
	errs := eachFile(m.Files, func(f FileInfo) error { return checkFile(ctx, b, f, v) })
	for _, err := range errs { // storage failures first: they are not the step's fault
		if err != nil && !errors.Is(err, ErrCorrupt) {
			return Manifest{}, err
		}
	}
	if err := errors.Join(errs...); err != nil {
		return Manifest{}, err
	}
	return m, nil
}

func checkFile(ctx context.Context, b *Bucket, f FileInfo, v Verify) error {
	var size int64
	var sum uint32
	var err error
	if v == VerifySize {
		size, err = b.size(ctx, f.Path)
		sum = f.CRC32C
	} else {
		size, sum, err = b.checksum(ctx, f.Path)
	}
	switch {
	case notFound(err):
		return corruptf("rank %d file %s is missing", f.Rank, f.Path)
	case err != nil:
		return err
	case size != f.Size || sum != f.CRC32C:
		return corruptf("rank %d file %s has %d bytes with CRC32C %08x, the manifest says %d bytes with %08x", f.Rank, f.Path, size, sum, f.Size, f.CRC32C)
	}
	return nil
}
