package shard

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

func fuzzSeeds(f *testing.F) {
	f.Add([]byte{17, 4, 9, 3, 5, 20, 0, 0, 2, 2, 0, 0, 9, 2, 7, 0, 2, 1, 7, 0, 9, 8, 0, 0, 12, 0, 0, 3, 0, 1})
	f.Add([]byte{200, 40, 100, 7, 33, 120, 0, 1, 2, 0, 4, 2, 13, 1, 0, 2, 1, 0, 7, 0, 12, 8, 0, 0, 13, 1, 1, 6, 3, 0})
	f.Add([]byte{5, 0, 1, 0, 0, 0, 11, 1, 4, 11, 1, 10, 11, 0, 1, 14, 0, 1, 14, 0, 0, 10, 2, 0, 9, 2, 5})
}

// FuzzMachine feeds random event sequences to a machine: it must never
// panic and must keep its invariants.
func FuzzMachine(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 6 {
			return
		}
		newFuzzer(t, fuzzDatasets(data)).play(data[6:])
	})
}

// FuzzRestore feeds arbitrary bytes to Restore and RestoreDataset: they must
// never panic, and a state they accept must keep the invariants, survive
// another round trip and accept further events.
func FuzzRestore(f *testing.F) {
	for i, ops := range [][]byte{{0, 0, 1, 0, 1, 2, 2, 0, 0}, {0, 0, 1, 7, 0, 9, 8, 0, 0, 9, 2, 7, 0, 2, 1}} {
		fz := newFuzzer(f, fuzzDatasets([]byte{byte(i), 4, 9, 3, 5, 20}))
		fz.play(ops)
		data, _ := fz.m.MarshalState()
		f.Add(data)
		for _, n := range []string{"a", "b", "s", "y"} {
			d, _ := fz.m.DatasetState(n)
			f.Add(d)
		}
	}
	f.Add([]byte(`{"schema":3}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		m := New()
		for _, ds := range fuzzDatasets([]byte{0, 4, 9, 3, 5, 20}) {
			m.Register(ds, t0)
		}
		for _, n := range []string{"a", "b", "s", "y"} {
			if err := m.RestoreDataset(n, data, t0); err != nil && !errors.Is(err, ErrBadState) && !errors.Is(err, ErrConflict) {
				t.Fatalf("RestoreDataset error %v wraps neither ErrBadState nor ErrConflict", err)
			}
			checkInvariants(t, m)
		}
		r, err := Restore(data)
		if err != nil {
			if !errors.Is(err, ErrBadState) {
				t.Fatalf("Restore error %v does not wrap ErrBadState", err)
			}
			return
		}
		checkInvariants(t, r)
		again, err := r.MarshalState()
		if err != nil {
			t.Fatal(err)
		}
		r2, err := Restore(again)
		if err != nil {
			t.Fatalf("second Restore: %v", err)
		}
		cmpMachines(t, r, r2)
		for _, n := range []string{"a", "b", "s", "y", "x"} {
			r2.Lease(n, LeaseRequest{Worker: Worker{Name: "w"}, Max: 2}, t0.Add(time.Hour))
			r2.Complete(n, 1, Worker{Name: "w"}, t0.Add(time.Hour))
			r2.Append(n, 3, t0.Add(time.Hour))
			r2.WorkerLost("w", t0.Add(2*time.Hour))
			checkInvariants(t, r2)
		}
	})
}

// TestRandomSequences runs the fuzz body on a fixed set of pseudo-random
// inputs, so plain `go test` covers more than the seed corpus.
func TestRandomSequences(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	n := 300
	if testing.Short() {
		n = 60
	}
	for i := range n {
		data := make([]byte, 6+r.IntN(1500))
		for j := range data {
			data[j] = byte(r.Uint32())
		}
		// Bias towards leases and completions so epochs actually finish.
		for j := 6; j+2 < len(data); j += 3 {
			switch r.IntN(4) {
			case 0:
				data[j] = 0
			case 1:
				data[j] = 2
			}
		}
		t.Run(fmt.Sprint(i), func(t *testing.T) { newFuzzer(t, fuzzDatasets(data)).play(data[6:]) })
	}
}

// FuzzValidate feeds arbitrary settings to Dataset.Validate: it must never
// panic, its errors must wrap ErrInvalidDataset, and a dataset it accepts
// must register, lease (Leased) or compute rank batches (Sync) near the
// ends of its index ranges without overflowing: every shard and sample
// inside the epoch, a shuffled call within MaxLeaseSamples.
func FuzzValidate(f *testing.F) {
	f.Add(int64(10), int64(1), int64(3), int64(2), true, uint8(0), false, int64(0), int64(0))
	f.Add(int64(MaxSize), int64(MaxBatchSize), int64(MaxLeaseSamples), int64(MaxEpochs), true, uint8(0), false, int64(0), int64(3))
	f.Add(int64(MaxSize), int64(MaxBatchSize), int64(0), int64(MaxEpochs), true, uint8(1), false, int64(0), int64(0))
	f.Add(int64(MaxSize), int64(1), int64(MaxSize), int64(0), false, uint8(0), false, int64(0), int64(0))
	f.Add(int64(1<<32), int64(64), int64(MaxLeaseSamples+1), int64(1), true, uint8(0), false, int64(0), int64(0))
	f.Add(int64(MaxSize+1), int64(MaxBatchSize+1), int64(-1), int64(MaxEpochs+1), true, uint8(2), true, int64(-1), int64(-1))
	f.Add(int64(0), int64(1), int64(1), int64(1), false, uint8(0), true, int64(1e9), int64(0))
	f.Fuzz(func(t *testing.T, size, batch, shardSize, epochs int64, shuffle bool, mode uint8, streaming bool, timeout, retries int64) {
		ds := Dataset{Name: "d", Size: size, BatchSize: int(batch), ShardSize: shardSize, Epochs: int(epochs),
			Shuffle: shuffle, Seed: uint64(size) * 0x9E3779B97F4A7C15, Mode: Mode(mode % 3), Streaming: streaming,
			LeaseTimeout: time.Duration(timeout), MaxRetries: int(retries)}
		err := ds.Validate()
		if err != nil {
			if !errors.Is(err, ErrInvalidDataset) {
				t.Fatalf("Validate error %v does not wrap ErrInvalidDataset", err)
			}
			if rerr := New().Register(ds, t0); !errors.Is(rerr, ErrInvalidDataset) {
				t.Fatalf("Register of an invalid dataset: %v", rerr)
			}
			return
		}
		m := New()
		if err := m.Register(ds, t0); err != nil {
			t.Fatalf("Register of a valid dataset: %v", err)
		}
		if ds.Mode == Sync {
			fuzzRankBatches(t, ds)
			return
		}
		if ds.Streaming {
			return
		}
		for _, max := range []int{1, MaxLeaseShards} {
			r, err := m.Lease("d", LeaseRequest{Worker: Worker{Name: "w"}, Max: max}, t0)
			if err != nil {
				t.Fatalf("Lease: %v", err)
			}
			var samples int64
			for _, l := range r.Shards {
				s := l.Shard
				if s.Start < 0 || s.Start >= s.End || s.End > ds.Size || s.Len() > ds.ShardSize {
					t.Fatalf("shard [%d, %d) of a %d-sample epoch, shard size %d", s.Start, s.End, ds.Size, ds.ShardSize)
				}
				samples += s.Len()
				for _, x := range s.Samples {
					if x < 0 || x >= ds.Size {
						t.Fatalf("sample %d of a %d-sample epoch", x, ds.Size)
					}
				}
			}
			if ds.Shuffle && len(r.Shards) > 1 && samples > MaxLeaseSamples {
				t.Fatalf("one call leased %d shuffled samples", samples)
			}
		}
		checkInvariants(t, m)
	})
}

// fuzzRankBatches computes rank batches of ds at the start and end of an
// epoch, for the smallest and largest worlds, when the batch is small
// enough to hold.
func fuzzRankBatches(t *testing.T, ds Dataset) {
	if ds.BatchSize > 1<<10 {
		return
	}
	order := EpochOrder(ds, 0)
	for _, world := range []int{1, MaxWorldSize} {
		for _, c := range []int64{0, ds.Size / 2, ds.Size - 1, ds.Size} {
			for _, tail := range []TailPolicy{DropTail, PadTail} {
				idx, next, ok := RankBatch(ds, order, Position{Consumed: c}, world, world-1, tail)
				for _, x := range idx {
					if x < 0 || x >= ds.Size {
						t.Fatalf("sample %d of a %d-sample epoch", x, ds.Size)
					}
				}
				if ok && (next.Epoch < 0 || next.Consumed < 0 || next.Consumed > ds.Size) {
					t.Fatalf("next position %+v of a %d-sample epoch", next, ds.Size)
				}
			}
		}
	}
}
