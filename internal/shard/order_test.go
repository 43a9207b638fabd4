package shard

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func perm(o Order) []int64 { return o.AppendRange(nil, 0, o.Len()) }

func TestEpochOrderIsAPermutation(t *testing.T) {
	for _, size := range []int64{1, 2, 3, 10, 1000, 65537} {
		for seed := range uint64(3) {
			for epoch := range 3 {
				ds := Dataset{Size: size, Shuffle: true, Seed: seed}
				p := perm(EpochOrder(ds, epoch))
				sorted := slices.Sorted(slices.Values(p))
				for i, v := range sorted {
					if v != int64(i) {
						t.Fatalf("size %d seed %d epoch %d: not a permutation of 0..%d", size, seed, epoch, size-1)
					}
				}
			}
		}
	}
}

func TestEpochOrderDeterminism(t *testing.T) {
	ds := Dataset{Size: 1000, Shuffle: true, Seed: 7}
	a, b := perm(EpochOrder(ds, 3)), perm(EpochOrder(ds, 3))
	if !cmp.Equal(a, b) {
		t.Fatal("same seed and epoch gave different orders")
	}
	if cmp.Equal(a, perm(EpochOrder(ds, 4))) {
		t.Fatal("different epochs gave the same order")
	}
	ds.Seed = 8
	if cmp.Equal(a, perm(EpochOrder(ds, 3))) {
		t.Fatal("different seeds gave the same order")
	}
	if slices.IsSorted(a) {
		t.Fatal("shuffled order is sorted")
	}
}

// TestEpochOrderGolden pins the permutation algorithm: ranks in other
// languages reimplement it from EpochOrder's documentation, and a change
// would silently break exactly-once training across a Rover upgrade.
func TestEpochOrderGolden(t *testing.T) {
	var r rng // SplitMix64's published first output from state 0
	if got := r.next(); got != 0xE220A8397B1DCDAF {
		t.Fatalf("SplitMix64 from 0 = %#x", got)
	}
	ds := Dataset{Size: 10, Shuffle: true, Seed: 1}
	if diff := cmp.Diff([]int64{3, 6, 4, 7, 9, 5, 2, 1, 8, 0}, perm(EpochOrder(ds, 0))); diff != "" {
		t.Fatalf("epoch 0 (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]int64{4, 3, 0, 8, 2, 5, 1, 7, 6, 9}, perm(EpochOrder(ds, 1))); diff != "" {
		t.Fatalf("epoch 1 (-want +got):\n%s", diff)
	}
}

// TestEpochOrderUniform checks, loosely, that every sample is equally likely
// at every position.
func TestEpochOrderUniform(t *testing.T) {
	const n, trials = 8, 16000
	var counts [n][n]int
	for seed := range uint64(trials) {
		p := EpochOrder(Dataset{Size: n, Shuffle: true, Seed: seed}, 0)
		for i := range int64(n) {
			counts[i][p.At(i)]++
		}
	}
	for i := range n {
		for v := range n {
			if c := counts[i][v]; c < trials/n*8/10 || c > trials/n*12/10 {
				t.Fatalf("sample %d at position %d %d times in %d; want about %d", v, i, c, trials, trials/n)
			}
		}
	}
}

func TestIdentityOrder(t *testing.T) {
	o := EpochOrder(Dataset{Size: 5}, 2)
	if o.Shuffled() || o.Len() != 5 || o.Epoch() != 2 || o.At(3) != 3 || o.perm != nil {
		t.Fatalf("identity order %+v", o)
	}
	if diff := cmp.Diff([]int64{2, 3, 4}, Shard{Start: 2, End: 5}.Indices()); diff != "" {
		t.Fatal(diff)
	}
	s := Shard{Start: 0, End: 2, Samples: []int64{9, 4}}
	got := s.Indices()
	got[0] = 0
	if s.Samples[0] != 9 || s.Len() != 2 {
		t.Fatal("Indices shares the shard's Samples")
	}
}
