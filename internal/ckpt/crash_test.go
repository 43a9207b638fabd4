package ckpt

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	"gocloud.dev/blob"
	"gocloud.dev/blob/memblob"
)

const (
	crashWorld = 3
	crashSteps = 4
	crashKeep  = 2
)

// commitSequence is what agents and master do for steps from..to: every
// rank file, then manifest and latest, then Keep. It stops at the first
// error, as a crashed process would.
func commitSequence(t testing.TB, b *Bucket, from, to int64) error {
	ctx := context.Background()
	for s := from; s <= to; s++ {
		c, err := NewCommit(crashWorld, Sharded)
		if err != nil {
			return err
		}
		for r := range crashWorld {
			info, err := PersistRank(ctx, b, s, r, rankFile(t, s, r))
			if err != nil {
				return err
			}
			if err := c.Durable(s, r, info); err != nil {
				return err
			}
		}
		m, err := c.Manifest(s, t0)
		if err != nil {
			return err
		}
		if err := WriteManifestAndLatest(ctx, b, m); err != nil {
			return err
		}
		c.Committed(s)
		if _, err := Keep(ctx, b, crashKeep); err != nil {
			return err
		}
	}
	return nil
}

// TestCrashConsistency runs the commit sequence of several steps and
// crashes it after k storage mutations, for every k: with the failing
// operation doing nothing, or (torn) leaving half an object behind. After
// each crash, LoadLatest must return exactly the step the last complete
// latest write named (or ErrNoCheckpoint before the first), and every rank
// of it must load intact. Then a restarted master carries on from there and
// must commit the remaining steps despite the debris.
func TestCrashConsistency(t *testing.T) {
	// Objects are never torn on fileblob (it renames into place); the torn
	// mode stands for stores that are not as careful.
	type store struct {
		name  string
		modes []bool // torn or not
		open  func(t *testing.T) *blob.Bucket
	}
	stores := []store{
		{"mem", []bool{false, true}, func(*testing.T) *blob.Bucket { return memblob.OpenBucket(nil) }},
		{"file", []bool{false}, func(t *testing.T) *blob.Bucket {
			// On tmpfs where there is one: fsync is free there, and this
			// test simulates process crashes, not power loss.
			b, err := OpenBucket(context.Background(), "file://"+filepath.Join(arenaDir(t), "ckpt"))
			if err != nil {
				t.Fatal(err)
			}
			return b.b
		}},
	}
	// Count the mutations of a run without a crash.
	d, b := newFaulty(memblob.OpenBucket(nil), -1)
	if err := commitSequence(t, b, 1, crashSteps); err != nil {
		t.Fatal(err)
	}
	total := d.ops
	if want := crashSteps*(crashWorld+2) + (crashSteps-crashKeep)*(crashWorld+1); total != want {
		t.Fatalf("the sequence made %d mutations, want %d", total, want)
	}
	for _, st := range stores {
		for _, torn := range st.modes {
			for k := 0; k <= total; k++ {
				t.Run(fmt.Sprintf("%s/torn=%v/k=%d", st.name, torn, k), func(t *testing.T) {
					t.Parallel()
					inner := st.open(t)
					d, b := newFaulty(inner, k)
					d.torn = torn
					err := commitSequence(t, b, 1, crashSteps)
					if (k < total) != (err != nil) {
						t.Fatalf("sequence with %d of %d mutations: %v", k, total, err)
					}
					want := int64(-1)
					if d.latest != nil {
						want, _ = parseLatest(d.latest)
					}
					if d.tornKey == LatestKey {
						// A torn marker is unreadable; the newest valid step is
						// the one it was committing.
						want, _ = parseLatest(d.tornData)
					}
					after := NewBucket(inner, "after-crash://")
					if want < 0 {
						if _, err := LoadLatest(context.Background(), after); !errors.Is(err, ErrNoCheckpoint) {
							t.Fatalf("LoadLatest before any commit = %v, want ErrNoCheckpoint", err)
						}
					} else {
						checkLoads(t, after, want, crashWorld)
					}
					// The restarted master resumes after what it restored.
					if err := commitSequence(t, after, want+1, crashSteps+1); err != nil {
						t.Fatalf("resuming after step %d: %v", want, err)
					}
					checkLoads(t, after, crashSteps+1, crashWorld)
				})
			}
		}
	}
}

// TestLoadLatestFallback damages a bucket with committed steps 1..3 in
// various ways and checks what LoadLatest restores.
func TestLoadLatestFallback(t *testing.T) {
	ctx := context.Background()
	flip := func(key string) func(t *testing.T, b *Bucket) {
		return func(t *testing.T, b *Bucket) {
			data, err := b.b.ReadAll(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			data[len(data)-1] ^= 0xff // same size, different bytes
			b.b.WriteAll(ctx, key, data, nil)
		}
	}
	del := func(key string) func(t *testing.T, b *Bucket) {
		return func(t *testing.T, b *Bucket) { b.b.Delete(ctx, key) }
	}
	put := func(key, data string) func(t *testing.T, b *Bucket) {
		return func(t *testing.T, b *Bucket) { b.b.WriteAll(ctx, key, []byte(data), nil) }
	}
	tests := []struct {
		name       string
		damage     func(t *testing.T, b *Bucket)
		want       int64 // -1: ErrNoCheckpoint
		wantQuick  int64 // with VerifySize
		rankFailed bool  // LoadRank of wantQuick fails with ErrCorrupt
	}{
		{"intact", func(*testing.T, *Bucket) {}, 3, 3, false},
		{"no marker", del(LatestKey), -1, -1, false},
		{"rank file missing", del(RankPath(3, 1)), 2, 2, false},
		{"rank file damaged", flip(RankPath(3, 1)), 2, 3, true},
		{"rank file truncated", put(RankPath(3, 0), "x"), 2, 2, false},
		{"manifest missing", del(ManifestPath(3)), 2, 2, false},
		{"manifest garbage", put(ManifestPath(3), "{"), 2, 2, false},
		{"manifest of another step", func(t *testing.T, b *Bucket) {
			data, _ := b.b.ReadAll(ctx, ManifestPath(2))
			b.b.WriteAll(ctx, ManifestPath(3), data, nil)
		}, 2, 2, false},
		{"marker unreadable", put(LatestKey, "three\n"), 3, 3, false},
		{"marker torn", put(LatestKey, "3"), 3, 3, false},
		{"marker names a missing step", put(LatestKey, "7\n"), 3, 3, false},
		{"marker behind a complete step", func(t *testing.T, b *Bucket) {
			commitStep(t, b, 4, 2)
			b.b.WriteAll(ctx, LatestKey, []byte("3\n"), nil)
		}, 3, 3, false},
		{"everything damaged", func(t *testing.T, b *Bucket) {
			for s := int64(1); s <= 3; s++ {
				b.b.Delete(ctx, RankPath(s, 0))
			}
		}, -1, -1, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := memBucket(t)
			for s := int64(1); s <= 3; s++ {
				commitStep(t, b, s, 2)
			}
			tt.damage(t, b)
			for _, v := range []struct {
				verify Verify
				want   int64
			}{{VerifyCRC, tt.want}, {VerifySize, tt.wantQuick}} {
				m, err := FindLatest(ctx, b, v.verify)
				if v.want < 0 {
					if !errors.Is(err, ErrNoCheckpoint) {
						t.Errorf("FindLatest(%d) = step %d, %v; want ErrNoCheckpoint", v.verify, m.Step, err)
					}
					continue
				}
				if err != nil || m.Step != v.want {
					t.Fatalf("FindLatest(%d) = step %d, %v; want %d", v.verify, m.Step, err, v.want)
				}
				if v.verify == VerifySize && tt.rankFailed {
					if _, _, err := LoadRank(ctx, b, m, 1); !errors.Is(err, ErrCorrupt) {
						t.Errorf("LoadRank of the damaged file = %v, want ErrCorrupt", err)
					}
					continue
				}
				checkLoads(t, b, tt.want, 2)
			}
		})
	}
}

// TestLoadLatestStorageError: a read that fails for another reason than a
// missing object is reported, not taken as a reason to fall back.
func TestLoadLatestStorageError(t *testing.T) {
	ctx := context.Background()
	inner := memblob.OpenBucket(nil)
	commitStep(t, NewBucket(inner, "mem://"), 1, 2)
	commitStep(t, NewBucket(inner, "mem://"), 2, 2)
	for _, fail := range []string{LatestKey, ManifestPath(2), RankPath(2, 1)} {
		d, b := newFaulty(inner, -1)
		d.failRead = fail
		if m, err := LoadLatest(ctx, b); !errors.Is(err, ErrStorage) || !errors.Is(err, errInjected) {
			t.Errorf("LoadLatest with %s unreadable = step %d, %v; want ErrStorage", fail, m.Step, err)
		}
	}
	d, b := newFaulty(inner, -1)
	d.failReads = true
	if _, err := FindLatest(ctx, b, VerifySize); !errors.Is(err, ErrStorage) {
		t.Errorf("FindLatest during an outage = %v, want ErrStorage", err)
	}
	if _, err := Keep(ctx, b, 1); !errors.Is(err, ErrStorage) {
		t.Errorf("Keep during an outage = %v, want ErrStorage", err)
	}
}
