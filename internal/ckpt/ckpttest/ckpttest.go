// Package ckpttest checks checkpoint storage from the outside: [Run] drives
// package ckpt's commit protocol (persist every rank, commit, keep, load the
// latest step) against a bucket, damages objects behind ckpt's back, and
// checks that a restore never gets a corrupt or uncommitted step. Each
// storage driver's tests run it against a fresh bucket: file:// and mem://
// in package ckpt, s3:// (a real S3 server over HTTP) in package cloudblob.
// It is for tests only.
package ckpttest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"gocloud.dev/blob"

	"github.com/roverml/rover/internal/ckpt"
)

// Store is one empty bucket under test, opened twice.
type Store struct {
	// Bucket is the bucket as the agent and the master open it
	// (normally with ckpt.OpenBucket on the storage URL).
	Bucket *ckpt.Bucket
	// Raw reaches the same objects without ckpt, to damage them.
	Raw *blob.Bucket
}

// world is the number of ranks of every checkpoint Run writes.
const world = 2

// Run runs the suite. open returns a fresh, empty store each time it is
// called and closes it when its test ends.
func Run(t *testing.T, open func(t *testing.T) Store) {
	tests := []struct {
		name   string
		damage func(t *testing.T, s Store)
		// The steps LoadLatest (CRC of every file) and FindLatest with
		// VerifySize must return after the damage.
		latest, sizeLatest int64
	}{
		{"intact", nil, 3, 3},
		// Same size: only the CRC tells; LoadRank must refuse the file.
		{"bit flipped in a rank file", func(t *testing.T, s Store) {
			data := read(t, s, ckpt.RankPath(3, 1))
			data[len(data)-2] ^= 0x40 // in the tensor data
			write(t, s, ckpt.RankPath(3, 1), data)
		}, 2, 3},
		{"rank file truncated", func(t *testing.T, s Store) {
			data := read(t, s, ckpt.RankPath(3, 0))
			write(t, s, ckpt.RankPath(3, 0), data[:len(data)-1])
		}, 2, 2},
		{"rank file lost", func(t *testing.T, s Store) {
			if err := s.Raw.Delete(t.Context(), ckpt.RankPath(3, 1)); err != nil {
				t.Fatal(err)
			}
		}, 2, 2},
		{"manifest damaged", func(t *testing.T, s Store) {
			write(t, s, ckpt.ManifestPath(3), []byte(`{"schema":1,"step":3,`))
		}, 2, 2},
		{"step persisted, not committed", func(t *testing.T, s Store) {
			for r := range world {
				persist(t, s.Bucket, 4, r, 1)
			}
		}, 3, 3},
		{"latest marker damaged", func(t *testing.T, s Store) {
			write(t, s, ckpt.LatestKey, []byte("3x\n"))
			if _, err := ckpt.Keep(t.Context(), s.Bucket, 1); !errors.Is(err, ckpt.ErrCorrupt) {
				t.Errorf("Keep with a damaged marker = %v, want ErrCorrupt", err)
			}
		}, 3, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := open(t)
			// Three saves, each committed and followed by Keep(2), as the
			// master does: step 1 is deleted.
			for step := int64(1); step <= 3; step++ {
				commit(t, s.Bucket, step, 1)
			}
			if diff := cmp.Diff([]int64{2, 3}, stepDirs(t, s)); diff != "" {
				t.Fatalf("steps in storage after Keep(2) (-want +got):\n%s", diff)
			}
			if tt.damage != nil {
				tt.damage(t, s)
			}
			m, err := ckpt.LoadLatest(t.Context(), s.Bucket)
			if err != nil {
				t.Fatalf("LoadLatest: %v", err)
			}
			if m.Step != tt.latest {
				t.Errorf("LoadLatest = step %d, want %d", m.Step, tt.latest)
			}
			checkLoads(t, s.Bucket, m, true)
			m, err = ckpt.FindLatest(t.Context(), s.Bucket, ckpt.VerifySize)
			if err != nil {
				t.Fatalf("FindLatest(VerifySize): %v", err)
			}
			if m.Step != tt.sizeLatest {
				t.Errorf("FindLatest(VerifySize) = step %d, want %d", m.Step, tt.sizeLatest)
			}
			checkLoads(t, s.Bucket, m, tt.latest == tt.sizeLatest)
		})
	}
	t.Run("large rank files", func(t *testing.T) {
		// 24 MiB per rank: past S3's multipart upload threshold (16 MiB).
		s := open(t)
		commit(t, s.Bucket, 7, 24<<20)
		m, err := ckpt.LoadLatest(t.Context(), s.Bucket)
		if err != nil || m.Step != 7 {
			t.Fatalf("LoadLatest = step %d, %v; want 7", m.Step, err)
		}
		for r := range world {
			tensors, _, err := ckpt.LoadRank(t.Context(), s.Bucket, m, r)
			if err != nil {
				t.Fatalf("LoadRank(%d): %v", r, err)
			}
			if !slices.EqualFunc(sorted(Tensors(7, r, 24<<20)), sorted(tensors), equal) {
				t.Errorf("rank %d: loaded tensors differ from the saved ones", r)
			}
		}
	})
	t.Run("rank file written again", func(t *testing.T) {
		s := open(t)
		persist(t, s.Bucket, 5, 0, 1)
		info := persist(t, s.Bucket, 5, 0, 1000) // the agent persists a newer save of the same step
		if got := len(read(t, s, info.Path)); int64(got) != info.Size {
			t.Errorf("object has %d bytes, want %d: the second write did not replace the first", got, info.Size)
		}
	})
}

// Tensors is the state of rank at step: two tensors of about size bytes in
// all, whose bytes derive from step and rank, and an extra blob.
func Tensors(step int64, rank int, size int) []ckpt.Tensor {
	n := max(size/2, 8) &^ 7 // bytes per tensor
	return []ckpt.Tensor{
		{Name: "layer.weight", DType: "F32", Shape: []int64{int64(n / 4)}, Data: fill(step, rank, n)},
		{Name: "layer.bias", DType: "BF16", Shape: []int64{int64(n / 2)}, Data: fill(step+1, rank, n)},
		ckpt.Extra([]byte("step " + strconv.FormatInt(step, 10) + " rank " + strconv.Itoa(rank))),
	}
}

// File is rank's safetensors file for step, as an arena slot holds it.
func File(t testing.TB, step int64, rank int, size int) []byte {
	t.Helper()
	var buf bytes.Buffer
	meta := map[string]string{ckpt.MetaStep: strconv.FormatInt(step, 10), ckpt.MetaRank: strconv.Itoa(rank)}
	if err := ckpt.Encode(&buf, Tensors(step, rank, size), meta); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// fill returns n (a multiple of 8) pseudo-random bytes seeded by step and
// rank.
func fill(step int64, rank int, n int) []byte {
	b := make([]byte, n)
	x := uint64(step)*0x9e3779b97f4a7c15 + uint64(rank)*0xbf58476d1ce4e5b9 + 1
	for i := 0; i < n; i += 8 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		binary.LittleEndian.PutUint64(b[i:], x)
	}
	return b
}

// equal compares tensors without reflection (cmp takes a minute on 24 MiB).
func equal(a, b ckpt.Tensor) bool {
	return a.Name == b.Name && a.DType == b.DType && slices.Equal(a.Shape, b.Shape) && bytes.Equal(a.Data, b.Data)
}

func sorted(ts []ckpt.Tensor) []ckpt.Tensor {
	return slices.SortedFunc(slices.Values(ts), func(a, b ckpt.Tensor) int { return strings.Compare(a.Name, b.Name) })
}

// persist writes rank's file of step (about size bytes of tensors).
func persist(t *testing.T, b *ckpt.Bucket, step int64, rank, size int) ckpt.FileInfo {
	t.Helper()
	info, err := ckpt.PersistRank(t.Context(), b, step, rank, File(t, step, rank, size))
	if err != nil {
		t.Fatalf("PersistRank(step %d, rank %d): %v", step, rank, err)
	}
	return info
}

// commit persists every rank of step, commits it and keeps two steps, as
// the agents and the master do.
func commit(t *testing.T, b *ckpt.Bucket, step int64, size int) {
	t.Helper()
	c, err := ckpt.NewCommit(world, ckpt.Sharded)
	if err != nil {
		t.Fatal(err)
	}
	for r := range world {
		if err := c.Durable(step, r, persist(t, b, step, r, size)); err != nil {
			t.Fatal(err)
		}
	}
	m, err := c.Manifest(step, time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	if err := ckpt.WriteManifestAndLatest(t.Context(), b, m); err != nil {
		t.Fatalf("WriteManifestAndLatest(step %d): %v", step, err)
	}
	c.Committed(step)
	if _, err := ckpt.Keep(t.Context(), b, 2); err != nil {
		t.Fatalf("Keep(2) after step %d: %v", step, err)
	}
}

// checkLoads loads every rank of m. A rank loads its own state or fails
// with ErrCorrupt, never anything else; with intact, every rank must load.
func checkLoads(t *testing.T, b *ckpt.Bucket, m ckpt.Manifest, intact bool) {
	t.Helper()
	if m.WorldSize != world {
		t.Errorf("step %d: world size %d, want %d", m.Step, m.WorldSize, world)
	}
	failed := 0
	for r := range world {
		tensors, meta, err := ckpt.LoadRank(t.Context(), b, m, r)
		if errors.Is(err, ckpt.ErrCorrupt) {
			failed++
			continue
		}
		if err != nil {
			t.Errorf("LoadRank(step %d, rank %d) = %v, want the state or ErrCorrupt", m.Step, r, err)
			continue
		}
		if diff := cmp.Diff(sorted(Tensors(m.Step, r, 1)), sorted(tensors), cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("step %d rank %d tensors (-want +got):\n%s", m.Step, r, diff)
		}
		if meta[ckpt.MetaStep] != strconv.FormatInt(m.Step, 10) || meta[ckpt.MetaRank] != strconv.Itoa(r) {
			t.Errorf("step %d rank %d metadata %v", m.Step, r, meta)
		}
	}
	if intact && failed > 0 {
		t.Errorf("step %d: %d ranks failed to load with ErrCorrupt, want none", m.Step, failed)
	}
	if !intact && failed == 0 {
		t.Errorf("step %d: every rank loaded, want the damaged one refused", m.Step)
	}
}

// stepDirs lists the step directories in storage.
func stepDirs(t *testing.T, s Store) []int64 {
	t.Helper()
	var steps []int64
	it := s.Raw.List(&blob.ListOptions{Delimiter: "/"})
	for {
		obj, err := it.Next(t.Context())
		if err == io.EOF {
			return steps
		}
		if err != nil {
			t.Fatal(err)
		}
		name, ok := strings.CutPrefix(strings.TrimSuffix(obj.Key, "/"), "step-")
		if !obj.IsDir || !ok {
			continue
		}
		step, err := strconv.ParseInt(name, 10, 64)
		if err != nil {
			t.Fatalf("step directory %q: %v", obj.Key, err)
		}
		steps = append(steps, step)
	}
}

func read(t *testing.T, s Store, key string) []byte {
	t.Helper()
	data, err := s.Raw.ReadAll(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func write(t *testing.T, s Store, key string, data []byte) {
	t.Helper()
	if err := s.Raw.WriteAll(t.Context(), key, data, nil); err != nil {
		t.Fatal(err)
	}
}
