package shard

import "math/bits"

// Order is one epoch's order of a dataset's samples: position i of the epoch
// trains sample At(i). Both the identity and a shuffled order take O(1)
// memory: a shuffled one computes each sample when asked. An Order is
// immutable and safe to share between goroutines.
type Order struct {
	size     int64
	epoch    int
	seed     uint64
	shuffled bool
	half     uint                  // h: the domain is [0, 2^(2h))
	keys     [feistelRounds]uint64 // one key per Feistel round
}

// feistelRounds is the number of rounds of the Feistel network of a shuffled
// order (see [EpochOrder]).
const feistelRounds = 8

// EpochOrder returns the order of epoch (>= 0) of ds: the identity
// 0, 1, ..., Size-1 unless ds.Shuffle, else the permutation below. It costs
// O(1) time and memory either way; a shuffled order's At costs O(1) on
// average. It panics when ds.Size is negative or above MaxSize.
//
// The permutation is a keyed Feistel network on the smallest power-of-two
// domain of an even number of bits that holds [0, Size), made a permutation
// of [0, Size) by cycle-walking: a position whose image falls outside
// [0, Size) is encrypted again until it falls inside. It is specified
// exactly so that it can be reproduced in any language (all arithmetic is on
// unsigned 64-bit integers, wrapping; bitlen(x) is the number of bits needed
// to write x, bitlen(0) = 0):
//
//	mix(z):   z = (z ^ z>>30) * 0xBF58476D1CE4E5B9      // SplitMix64's finalizer
//	          z = (z ^ z>>27) * 0x94D049BB133111EB
//	          return z ^ z>>31
//	state  := Seed ^ mix(epoch + 0x9E3779B97F4A7C15)
//	for k := 0; k < 8; k++ {                            // SplitMix64's first 8 outputs
//	          state += 0x9E3779B97F4A7C15; key[k] = mix(state)
//	}
//	h      := max(1, (bitlen(Size-1) + 1) / 2)          // the domain is [0, 2^(2h))
//	mask   := 2^h - 1
//	E(x):     l, r := x >> h, x & mask                  // x in [0, 2^(2h))
//	          for k := 0; k < 8; k++ { l, r = r, l ^ (mix(r ^ key[k]) & mask) }
//	          return l<<h | r
//	At(i):    x := E(i); while x >= Size { x = E(x) }; return x
//
// E is a bijection of the domain (each round is), so the walk from i < Size
// comes back into [0, Size) along i's cycle of E, and At is a bijection of
// [0, Size). The walks from all the positions visit each value of the domain
// at most once between them, so they take at most 2^(2h) < 4*Size steps
// together (for Size >= 2): fewer than 4 per position on average.
//
// Different epochs (and seeds) give independent-looking permutations; the
// same (Seed, epoch, Size) always gives the same one. Rover versions that
// persisted schema 1 or 2 ([SchemaVersion]) shuffled with a Fisher–Yates
// permutation instead (see docs/data-sharding.md, "Upgrading").
func EpochOrder(ds Dataset, epoch int) Order {
	if ds.Size < 0 || ds.Size > MaxSize {
		panic("shard: EpochOrder of a dataset with invalid Size")
	}
	o := Order{size: ds.Size, epoch: epoch, seed: ds.Seed}
	if !ds.Shuffle {
		return o
	}
	o.shuffled = true
	o.half = uint(max(1, (bits.Len64(uint64(ds.Size-1))+1)/2))
	state := ds.Seed ^ mix(uint64(epoch)+golden)
	for k := range o.keys {
		state += golden
		o.keys[k] = mix(state)
	}
	return o
}

// Len is the number of positions in the epoch.
func (o Order) Len() int64 { return o.size }

// Epoch is the epoch the order was computed for.
func (o Order) Epoch() int { return o.epoch }

// Shuffled reports whether the order is a permutation rather than the identity.
func (o Order) Shuffled() bool { return o.shuffled }

// At returns the sample at position i, 0 <= i < Len(). A shuffled order
// panics for i out of range; the identity returns i.
func (o Order) At(i int64) int64 {
	if !o.shuffled {
		return i
	}
	if i < 0 || i >= o.size {
		panic("shard: Order.At out of range")
	}
	return int64(o.walk(uint64(i)))
}

// walk is At of a shuffled order: E, cycle-walked into [0, size).
func (o *Order) walk(x uint64) uint64 {
	x = o.encrypt(x)
	for x >= uint64(o.size) {
		x = o.encrypt(x)
	}
	return x
}

// encrypt is the Feistel network E of [EpochOrder].
func (o *Order) encrypt(x uint64) uint64 {
	h := o.half
	mask := uint64(1)<<h - 1
	l, r := x>>h, x&mask
	for k := range o.keys {
		l, r = r, l^(mix(r^o.keys[k])&mask)
	}
	return l<<h | r
}

// AppendRange appends the samples at positions [lo, hi) to dst.
func (o Order) AppendRange(dst []int64, lo, hi int64) []int64 {
	for i := lo; i < hi; i++ {
		dst = append(dst, o.At(i))
	}
	return dst
}

// matches reports whether o is EpochOrder(ds, epoch).
func (o Order) matches(ds Dataset, epoch int) bool {
	if !ds.Shuffle {
		return !o.shuffled // the identity is the same for every epoch
	}
	return o.shuffled && o.size == ds.Size && o.epoch == epoch && o.seed == ds.Seed
}

const golden = 0x9E3779B97F4A7C15

// mix is SplitMix64's finalizer (see EpochOrder).
func mix(z uint64) uint64 {
	z = (z ^ z>>30) * 0xBF58476D1CE4E5B9
	z = (z ^ z>>27) * 0x94D049BB133111EB
	return z ^ z>>31
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
