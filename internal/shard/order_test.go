package shard

import (
	"math/bits"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func perm(o Order) []int64 { return o.AppendRange(nil, 0, o.Len()) }

// orderSizes are the sizes the order tests cover: every size up to 300, and
// powers of two and their neighbours, where the Feistel domain changes.
func orderSizes() []int64 {
	var sizes []int64
	for n := int64(1); n <= 300; n++ {
		sizes = append(sizes, n)
	}
	for _, p := range []int64{1 << 9, 1 << 10, 1 << 11, 1 << 16, 1 << 17, 1 << 20} {
		sizes = append(sizes, p-1, p, p+1)
	}
	return sizes
}

// TestEpochOrderIsABijection checks, for many sizes, seeds and epochs, that
// At maps [0, Size) onto itself one to one, and that the cycle-walks of all
// the positions take at most the Feistel domain's size in steps together
// (fewer than 4 a position for Size >= 2).
func TestEpochOrderIsABijection(t *testing.T) {
	for _, size := range orderSizes() {
		seeds, epochs := uint64(6), 3
		if size > 1<<12 {
			seeds, epochs = 2, 2
		}
		for seed := range seeds {
			for epoch := range epochs {
				o := EpochOrder(Dataset{Size: size, Shuffle: true, Seed: seed * 0x9E3779B97F4A7C15}, epoch)
				seen := make([]bool, size)
				steps := uint64(0)
				for i := range size {
					x := o.encrypt(uint64(i))
					steps++
					for x >= uint64(size) {
						x = o.encrypt(x)
						steps++
					}
					if got := o.At(i); got != int64(x) || seen[got] {
						t.Fatalf("size %d seed %d epoch %d: At(%d) = %d, seen before or not the walk's %d", size, seed, epoch, i, got, x)
					}
					seen[x] = true
				}
				domain := uint64(1) << (2 * o.half)
				if steps > domain || size >= 2 && domain >= 4*uint64(size) {
					t.Fatalf("size %d: walks took %d steps in a domain of %d", size, steps, domain)
				}
			}
		}
	}
}

// TestEpochOrderLargeSizes checks the order of sizes up to MaxSize at
// sampled positions: At stays in range, agrees with AppendRange, and the
// domain has the even number of bits just above Size.
func TestEpochOrderLargeSizes(t *testing.T) {
	for _, size := range []int64{1<<32 - 1, 1 << 32, 1<<32 + 1, 1<<47 + 12345, 1 << 48, MaxSize - 1, MaxSize} {
		o := EpochOrder(Dataset{Size: size, Shuffle: true, Seed: 11}, 4)
		if want := uint((bits.Len64(uint64(size-1)) + 1) / 2); o.half != want {
			t.Errorf("size %d: half %d, want %d", size, o.half, want)
		}
		seen := map[int64]bool{}
		for _, i := range samplePositions(size) {
			s := o.At(i)
			if s < 0 || s >= size || seen[s] {
				t.Fatalf("size %d: At(%d) = %d", size, i, s)
			}
			seen[s] = true
			if got := o.AppendRange(nil, i, i+1); got[0] != s {
				t.Fatalf("size %d: AppendRange at %d = %d, At = %d", size, i, got[0], s)
			}
		}
	}
}

// samplePositions returns positions of an epoch of size samples: its
// first and last few, and some spread between.
func samplePositions(size int64) []int64 {
	var ps []int64
	for i := range min(size, 8) {
		ps = append(ps, i, size-1-i)
	}
	for k := int64(1); k < 64; k++ {
		ps = append(ps, size/64*k+k)
	}
	slices.Sort(ps)
	return slices.Compact(ps)
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
	if got := mix(golden); got != 0xE220A8397B1DCDAF { // SplitMix64's published first output from state 0
		t.Fatalf("SplitMix64 from 0 = %#x", got)
	}
	ds := Dataset{Size: 10, Shuffle: true, Seed: 1}
	if diff := cmp.Diff([]int64{7, 6, 9, 4, 1, 0, 2, 5, 3, 8}, perm(EpochOrder(ds, 0))); diff != "" {
		t.Errorf("epoch 0 (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]int64{7, 1, 2, 5, 0, 3, 4, 8, 6, 9}, perm(EpochOrder(ds, 1))); diff != "" {
		t.Errorf("epoch 1 (-want +got):\n%s", diff)
	}
	big := EpochOrder(Dataset{Size: 1 << 32, Shuffle: true, Seed: 42}, 3)
	var got []int64
	for _, i := range []int64{0, 1, 1<<31 + 7, 1<<32 - 1} {
		got = append(got, big.At(i))
	}
	if diff := cmp.Diff([]int64{1148517381, 881033385, 2518444912, 301987665}, got); diff != "" {
		t.Errorf("2^32 samples (-want +got):\n%s", diff)
	}
}

// TestEpochOrderUniform checks, loosely, that every sample is equally likely
// at every position, for sizes whose Feistel domain is 4, 16 and 64.
func TestEpochOrderUniform(t *testing.T) {
	for _, n := range []int{3, 5, 8, 13, 33} {
		trials := 2000 * n
		counts := make([]int, n*n)
		for seed := range uint64(trials) {
			p := EpochOrder(Dataset{Size: int64(n), Shuffle: true, Seed: seed}, 0)
			for i := range n {
				counts[i*n+int(p.At(int64(i)))]++
			}
		}
		for i := range n {
			for v := range n {
				if c := counts[i*n+v]; c < trials/n*8/10 || c > trials/n*12/10 {
					t.Fatalf("size %d: sample %d at position %d %d times in %d; want about %d", n, v, i, c, trials, trials/n)
				}
			}
		}
	}
}

func TestIdentityOrder(t *testing.T) {
	o := EpochOrder(Dataset{Size: 5}, 2)
	if o.Shuffled() || o.Len() != 5 || o.Epoch() != 2 || o.At(3) != 3 {
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

func TestShuffledAtOutOfRangePanics(t *testing.T) {
	o := EpochOrder(Dataset{Size: 5, Shuffle: true}, 0)
	for _, i := range []int64{-1, 5, 8, 1 << 40} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("At(%d) of a 5-sample order did not panic", i)
				}
			}()
			o.At(i)
		}()
	}
}
