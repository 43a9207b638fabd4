package shard

import (
	"fmt"
	"testing"
	"time"
)

// benchLeaseComplete runs lease+complete pairs with 256 workers, each
// holding one lease: every iteration one worker completes its shard and
// leases the next, as the master's RPC handlers would.
func benchLeaseComplete(b *testing.B, ds Dataset) {
	const workers = 256
	m := New()
	now := t0
	if err := m.Register(ds, now); err != nil {
		b.Fatal(err)
	}
	names := make([]string, workers)
	held := make([]uint64, workers)
	for i := range names {
		names[i] = fmt.Sprintf("worker-%03d", i)
		r, err := m.Lease(ds.Name, LeaseRequest{Worker: Worker{Name: names[i]}, Max: 1}, now)
		if err != nil || len(r.Shards) != 1 {
			b.Fatalf("Lease: %+v, %v", r, err)
		}
		held[i] = r.Shards[0].ID
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		now = now.Add(time.Microsecond)
		w := i % workers
		if held[w] != 0 {
			if err := m.Complete(ds.Name, held[w], Worker{Name: names[w]}, now); err != nil {
				b.Fatal(err)
			}
		}
		r, err := m.Lease(ds.Name, LeaseRequest{Worker: Worker{Name: names[w]}, Max: 1}, now)
		switch {
		case err != nil || r.End:
			b.Fatalf("Lease: %+v, %v", r, err)
		case r.Wait: // others hold the epoch's last shards
			held[w] = 0
		default:
			held[w] = r.Shards[0].ID
		}
		i++
	}
}

// BenchmarkLeaseComplete is one lease+complete pair (ns/op) of an
// unshuffled dataset with a lease timeout. The service target is 50,000
// leases/s on 2 cores including RPC, so a pair must cost far below 20µs.
func BenchmarkLeaseComplete(b *testing.B) {
	benchLeaseComplete(b, Dataset{Name: "train", Size: 1 << 40, BatchSize: 64, ShardSize: 640,
		LeaseTimeout: time.Minute})
}

// BenchmarkLeaseCompleteShuffled is the same on a shuffled 1M-sample
// dataset of 64-sample shards: each lease computes its shard's samples.
func BenchmarkLeaseCompleteShuffled(b *testing.B) {
	benchLeaseComplete(b, Dataset{Name: "train", Size: 1 << 20, BatchSize: 64, ShardSize: 64,
		Shuffle: true, Seed: 1, LeaseTimeout: time.Minute})
}

// BenchmarkLeaseCompleteShuffled4G is the same on a shuffled dataset of
// 2^32 samples: a lease costs what it does on 1M samples.
func BenchmarkLeaseCompleteShuffled4G(b *testing.B) {
	benchLeaseComplete(b, Dataset{Name: "train", Size: 1 << 32, BatchSize: 64, ShardSize: 64,
		Shuffle: true, Seed: 1, LeaseTimeout: time.Minute})
}

// BenchmarkEpochOrder computes the order of an epoch of 2^32 samples (its
// keys: O(1)).
func BenchmarkEpochOrder(b *testing.B) {
	ds := Dataset{Size: 1 << 32, Shuffle: true, Seed: 1}
	for b.Loop() {
		EpochOrder(ds, 0)
	}
}

// BenchmarkOrderAt is one sample of a shuffled order, at sizes whose Feistel
// domain is just above (the fewest cycle-walks) and nearly 4 times (the
// most) the size.
func BenchmarkOrderAt(b *testing.B) {
	for _, size := range []int64{1 << 20, 1<<20 + 1, 1 << 32, 1<<32 + 1} {
		b.Run(fmt.Sprint(size), func(b *testing.B) {
			o := EpochOrder(Dataset{Size: size, Shuffle: true, Seed: 1}, 0)
			i := int64(0)
			for b.Loop() {
				o.At(i)
				if i++; i == size {
					i = 0
				}
			}
		})
	}
}

// BenchmarkRankBatch is one rank's batch of 64 from a shuffled order.
func BenchmarkRankBatch(b *testing.B) {
	ds := Dataset{Size: 1 << 20, BatchSize: 64, Shuffle: true, Seed: 1, Mode: Sync}
	order := EpochOrder(ds, 0)
	pos := Position{}
	for b.Loop() {
		_, next, _ := RankBatch(ds, order, pos, 8, 3, DropTail)
		if next.Epoch != 0 {
			next = Position{}
		}
		pos = next
	}
}

// BenchmarkMarshalState encodes a machine with 256 held leases.
func BenchmarkMarshalState(b *testing.B) {
	m := New()
	m.Register(Dataset{Name: "train", Size: 1 << 30, BatchSize: 64, ShardSize: 640, LeaseTimeout: time.Minute}, t0)
	for i := range 256 {
		m.Lease("train", LeaseRequest{Worker: Worker{Name: fmt.Sprintf("worker-%03d", i)}, Max: 1}, t0)
	}
	for b.Loop() {
		if _, err := m.MarshalState(); err != nil {
			b.Fatal(err)
		}
	}
}
