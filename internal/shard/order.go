package shard

import "math/bits"

// Order is one epoch's order of a dataset's samples: position i of the epoch
// trains sample At(i). The identity order takes O(1) memory; a shuffled one
// holds the permutation, 4 bytes a sample, in one contiguous slice. An Order
// is immutable and safe to share between goroutines.
type Order struct {
	size  int64
	epoch int
	seed  uint64
	perm  []uint32 // nil: identity
}

// EpochOrder returns the order of epoch (>= 0) of ds: the identity
// 0, 1, ..., Size-1 unless ds.Shuffle, else the permutation below. It costs
// O(Size) time and memory when shuffled, O(1) otherwise; ranks should compute
// it once per epoch. It panics when ds.Size is negative, or too large to
// shuffle (see [Dataset.Validate]).
//
// The permutation is a Fisher–Yates shuffle driven by SplitMix64, specified
// exactly so that it can be reproduced in any language (all arithmetic is on
// unsigned 64-bit integers, wrapping):
//
//	mix(z):   z = (z ^ z>>30) * 0xBF58476D1CE4E5B9
//	          z = (z ^ z>>27) * 0x94D049BB133111EB
//	          return z ^ z>>31
//	state  := Seed ^ mix(epoch + 0x9E3779B97F4A7C15)
//	next():   state += 0x9E3779B97F4A7C15; return mix(state)
//	below(n): // uniform in [0, n), Lemire's multiply-and-reject
//	          hi, lo := 128-bit product next() * n
//	          if lo < n { t := (2^64 - n) % n; while lo < t { hi, lo = next() * n } }
//	          return hi
//	p := [0, 1, ..., Size-1]
//	for i := Size-1; i >= 1; i-- { j := below(i+1); swap p[i], p[j] }
//
// Different epochs (and seeds) give independent-looking permutations; the
// same (Seed, epoch, Size) always gives the same one.
func EpochOrder(ds Dataset, epoch int) Order {
	if ds.Size < 0 || ds.Shuffle && ds.Size > MaxShuffledSize {
		panic("shard: EpochOrder of a dataset with invalid Size")
	}
	o := Order{size: ds.Size, epoch: epoch, seed: ds.Seed}
	if !ds.Shuffle {
		return o
	}
	p := make([]uint32, ds.Size)
	for i := range p {
		p[i] = uint32(i)
	}
	r := newRNG(ds.Seed, epoch)
	for i := len(p) - 1; i >= 1; i-- {
		j := r.below(uint64(i) + 1)
		p[i], p[j] = p[j], p[i]
	}
	o.perm = p
	return o
}

// Len is the number of positions in the epoch.
func (o Order) Len() int64 { return o.size }

// Epoch is the epoch the order was computed for.
func (o Order) Epoch() int { return o.epoch }

// Shuffled reports whether the order is a permutation rather than the identity.
func (o Order) Shuffled() bool { return o.perm != nil }

// At returns the sample at position i, 0 <= i < Len(). A shuffled order
// panics for i out of range; the identity returns i.
func (o Order) At(i int64) int64 {
	if o.perm == nil {
		return i
	}
	return int64(o.perm[i])
}

// AppendRange appends the samples at positions [lo, hi) to dst.
func (o Order) AppendRange(dst []int64, lo, hi int64) []int64 {
	if o.perm == nil {
		for i := lo; i < hi; i++ {
			dst = append(dst, i)
		}
		return dst
	}
	for _, s := range o.perm[lo:hi] {
		dst = append(dst, int64(s))
	}
	return dst
}

// matches reports whether o is EpochOrder(ds, epoch).
func (o Order) matches(ds Dataset, epoch int) bool {
	if !ds.Shuffle {
		return o.perm == nil // the identity is the same for every epoch
	}
	return o.perm != nil && o.size == ds.Size && o.epoch == epoch && o.seed == ds.Seed
}

const golden = 0x9E3779B97F4A7C15

// rng is SplitMix64 (see EpochOrder).
type rng struct{ state uint64 }

func mix(z uint64) uint64 {
	z = (z ^ z>>30) * 0xBF58476D1CE4E5B9
	z = (z ^ z>>27) * 0x94D049BB133111EB
	return z ^ z>>31
}

func newRNG(seed uint64, epoch int) *rng {
	return &rng{state: seed ^ mix(uint64(epoch)+golden)}
}

func (r *rng) next() uint64 {
	r.state += golden
	return mix(r.state)
}

// below returns a uniform integer in [0, n), n >= 1.
func (r *rng) below(n uint64) uint64 {
	hi, lo := bits.Mul64(r.next(), n)
	if lo < n {
		t := -n % n
		for lo < t {
			hi, lo = bits.Mul64(r.next(), n)
		}
	}
	return hi
}

// Shard is a range of positions [Start, End) of an epoch's order (of a
// stream's offsets, for a Streaming dataset).
type Shard struct {
	Epoch      int
	Start, End int64
	// Samples lists the shard's samples, EpochOrder(ds, Epoch) at positions
	// Start..End-1, for shuffled datasets only (nil otherwise: the samples
	// are the positions themselves). The slice is the caller's.
	Samples []int64
}

// Len is the number of samples in the shard.
func (s Shard) Len() int64 { return s.End - s.Start }

// Indices returns the shard's samples in training order: Samples when set,
// else Start, Start+1, ..., End-1 (materialised on demand, O(Len)).
func (s Shard) Indices() []int64 {
	if s.Samples != nil {
		return append([]int64(nil), s.Samples...)
	}
	return Order{}.AppendRange(make([]int64, 0, s.Len()), s.Start, s.End)
}
