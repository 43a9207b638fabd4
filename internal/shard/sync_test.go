package shard

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func syncDS(size int64, batch, epochs int, shuffle bool) Dataset {
	return Dataset{Name: "s", Size: size, BatchSize: batch, Epochs: epochs, Shuffle: shuffle, Seed: 11, Mode: Sync}
}

func TestRankBatchTable(t *testing.T) {
	ds := syncDS(10, 2, 2, false)
	type want struct {
		idx  [][]int64 // by rank
		next Position
		ok   bool
	}
	tests := []struct {
		name  string
		ds    Dataset
		pos   Position
		world int
		tail  TailPolicy
		want  want
	}{
		{"first batch", ds, Position{0, 0}, 2, DropTail, want{[][]int64{{0, 1}, {2, 3}}, Position{0, 4}, true}},
		{"last full batch pre-rolls the dropped tail", ds, Position{0, 4}, 2, DropTail, want{[][]int64{{4, 5}, {6, 7}}, Position{1, 0}, true}},
		{"a smaller world fits the tail", ds, Position{0, 8}, 1, DropTail, want{[][]int64{{8, 9}}, Position{1, 0}, true}},
		{"a grown world skips the tail", ds, Position{0, 8}, 2, DropTail, want{[][]int64{{0, 1}, {2, 3}}, Position{1, 4}, true}},
		{"pad wraps to the epoch start", ds, Position{0, 8}, 2, PadTail, want{[][]int64{{8, 9}, {0, 1}}, Position{1, 0}, true}},
		{"consumed == size is the next epoch", ds, Position{0, 10}, 1, PadTail, want{[][]int64{{0, 1}}, Position{1, 2}, true}},
		{"exhausted", ds, Position{2, 0}, 2, PadTail, want{nil, Position{2, 0}, false}},
		{"tail of the last epoch dropped: exhausted", ds, Position{1, 8}, 2, DropTail, want{nil, Position{2, 0}, false}},
		{"world bigger than the epoch, drop", ds, Position{0, 0}, 6, DropTail, want{nil, Position{1, 0}, false}},
		{"world bigger than the epoch, pad", syncDS(3, 2, 1, false), Position{0, 0}, 3, PadTail,
			want{[][]int64{{0, 1}, {2, 0}, {1, 2}}, Position{1, 0}, true}},
		{"unbounded epochs", syncDS(4, 2, 0, false), Position{99, 2}, 1, DropTail, want{[][]int64{{2, 3}}, Position{100, 0}, true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got want
			got.ok = true
			for r := range tt.world {
				idx, next, ok := RankBatch(tt.ds, EpochOrder(tt.ds, tt.pos.Epoch), tt.pos, tt.world, r, tt.tail)
				if ok {
					got.idx = append(got.idx, idx)
				}
				got.next, got.ok = next, ok
			}
			if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(want{})); diff != "" {
				t.Fatalf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestRankBatchRecomputesAStaleOrder(t *testing.T) {
	ds := syncDS(10, 2, 3, true)
	stale := EpochOrder(ds, 0)
	// At (0, 8) with 2 ranks the tail is skipped: the batch is epoch 1's.
	idx, next, _ := RankBatch(ds, stale, Position{0, 8}, 2, 1, DropTail)
	want := EpochOrder(ds, 1).AppendRange(nil, 2, 4)
	if !cmp.Equal(want, idx) || next != (Position{1, 4}) {
		t.Fatalf("got %v %v, want %v", idx, next, want)
	}
}

func TestRankBatchPanics(t *testing.T) {
	ds := syncDS(10, 2, 1, false)
	for _, f := range []func(){
		func() { RankBatch(ds, Order{}, Position{}, 0, 0, DropTail) },
		func() { RankBatch(ds, Order{}, Position{}, 2, 2, DropTail) },
		func() { RankBatch(ds, Order{}, Position{0, 11}, 1, 0, DropTail) },
		func() { RankBatch(ds, Order{}, Position{-1, 0}, 1, 0, DropTail) },
		func() { RankBatch(ds, Order{}, Position{}, 1, 0, TailPolicy(7)) },
		func() { RankBatch(Dataset{Size: 0, BatchSize: 1}, Order{}, Position{}, 1, 0, DropTail) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Error("no panic")
				}
			}()
			f()
		}()
	}
}

// world is a world size used for some steps.
type world struct{ size, steps int }

// trainer simulates a job: every rank of each step calls RankBatch, and the
// samples trained in the epoch are counted.
type trainer struct {
	t       testing.TB
	ds      Dataset
	tail    TailPolicy
	counts  []int // per sample
	trained int64
	stopG   int64 // the global batch at which the epoch rolled over
}

// epoch trains from pos, with world sizes from sched (the last one repeats),
// until the epoch of pos rolls over or after maxSteps steps; it returns the
// position reached and the steps taken.
func (tr *trainer) epoch(pos Position, sched []world, maxSteps int) (Position, int) {
	e, n := pos.Epoch, tr.ds.Size
	order := EpochOrder(tr.ds, e)
	step, si, left := 0, 0, sched[0].steps
	for ; step < maxSteps; step++ {
		for left == 0 && si < len(sched)-1 {
			si++
			left = sched[si].steps
		}
		left--
		ws := sched[si].size
		g := int64(ws * tr.ds.BatchSize)
		if pos.Epoch != e {
			return pos, step // the last step rolled over
		}
		if tr.tail == DropTail && n-pos.Consumed < g {
			tr.stopG = g // this world size cannot fill a batch: RankBatch skips the tail
			return pos, step
		}
		var next Position
		for r := range ws {
			idx, nx, ok := RankBatch(tr.ds, order, pos, ws, r, tr.tail)
			if !ok || len(idx) != tr.ds.BatchSize || r > 0 && nx != next {
				tr.t.Fatalf("step %d rank %d/%d at %+v: %v, %+v, %v (rank 0: %+v)", step, r, ws, pos, idx, nx, ok, next)
			}
			next = nx
			for _, s := range idx {
				tr.counts[s]++
				tr.trained++
			}
		}
		pos = next
		tr.stopG = g
	}
	return pos, step
}

// check verifies that the epoch trained positions 0..t-1 of its order, t
// being the samples trained, each position once, wrapping past N under
// PadTail; and that the dropped tail or the pad is shorter than a global batch.
func (tr *trainer) check(epoch int) {
	tr.t.Helper()
	n, t := tr.ds.Size, tr.trained
	order := EpochOrder(tr.ds, epoch)
	for p := range n {
		want := int(t / n)
		if p < t%n {
			want++
		}
		if got := tr.counts[order.At(p)]; got != want {
			tr.t.Fatalf("epoch %d: sample at position %d trained %d times, want %d (%d trained of %d)", epoch, p, got, want, t, n)
		}
	}
	switch {
	case tr.tail == DropTail && (t > n || n-t >= tr.stopG):
		tr.t.Fatalf("DropTail trained %d of %d with a last global batch of %d", t, n, tr.stopG)
	case tr.tail == PadTail && (t < n || t-n >= tr.stopG):
		tr.t.Fatalf("PadTail trained %d of %d with a last global batch of %d", t, n, tr.stopG)
	}
}

func newTrainer(t testing.TB, ds Dataset, tail TailPolicy) *trainer {
	return &trainer{t: t, ds: ds, tail: tail, counts: make([]int, ds.Size)}
}

func TestElasticWorldExactlyOnce(t *testing.T) {
	// 4 ranks for 3 steps, then 2 ranks, then 6.
	sched := []world{{4, 3}, {2, 5}, {6, 1 << 30}}
	for _, tail := range []TailPolicy{DropTail, PadTail} {
		for _, shuffle := range []bool{false, true} {
			t.Run(fmt.Sprint(tail, shuffle), func(t *testing.T) {
				ds := syncDS(1000, 8, 0, shuffle)
				tr := newTrainer(t, ds, tail)
				next, _ := tr.epoch(Position{5, 0}, sched, 1<<30)
				tr.check(5)
				if next != (Position{6, 0}) {
					t.Fatalf("epoch ended at %+v", next)
				}
			})
		}
	}
}

// TestElasticWorldProperty runs random datasets through random world-size
// schedules, and restores each at a random step to replay the rest with
// another schedule.
func TestElasticWorldProperty(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	schedule := func() []world {
		s := make([]world, 1+r.IntN(5))
		for i := range s {
			s[i] = world{1 + r.IntN(8), 1 + r.IntN(6)}
		}
		return s
	}
	for i := range 400 {
		ds := syncDS(1+r.Int64N(300), 1+r.IntN(7), 0, r.IntN(2) == 0)
		tail := TailPolicy(r.IntN(2))
		epoch := r.IntN(3)
		sched := schedule()
		tr := newTrainer(t, ds, tail)
		_, steps := tr.epoch(Position{epoch, 0}, sched, 1<<30)
		tr.check(epoch)

		// Restore at step k: the replay trains exactly what is left.
		k := r.IntN(steps + 1)
		before := newTrainer(t, ds, tail)
		pos, _ := before.epoch(Position{epoch, 0}, sched, k)
		if pos.Epoch != epoch {
			continue // the epoch rolled over at step k
		}
		replay := *before
		replay.counts = append([]int(nil), before.counts...)
		replay.epoch(pos, schedule(), 1<<30)
		replay.check(epoch)
		for s, c := range before.counts {
			if c > 0 && replay.counts[s] > c && tail == DropTail {
				t.Fatalf("case %d: sample %d trained before step %d was trained again after the restore", i, s, k)
			}
		}
	}
}

func TestSyncPosition(t *testing.T) {
	ds := syncDS(10, 2, 2, false)
	e := newEnv(t, ds)
	adv := func(ep int, c int64, want error) {
		t.Helper()
		if err := e.m.Advance("s", ep, c, e.now); !errors.Is(err, want) || (err == nil) != (want == nil) {
			t.Fatalf("Advance(%d, %d) = %v, want %v", ep, c, err, want)
		}
		e.check()
	}
	pos := func(want Position) {
		t.Helper()
		if p, err := e.m.Position("s"); err != nil || p != want {
			t.Fatalf("Position = %+v, %v; want %+v", p, err, want)
		}
	}
	pos(Position{0, 0})
	adv(0, 4, nil)
	adv(0, 4, nil) // the same report again
	adv(0, 2, ErrStalePosition)
	adv(0, 11, ErrInvalidRequest)
	adv(-1, 0, ErrInvalidRequest)
	adv(0, 10, nil) // the whole epoch: rolls over
	pos(Position{1, 0})
	adv(0, 8, ErrStalePosition)
	adv(2, 1, ErrInvalidRequest)
	adv(2, 0, nil)
	if s := e.status("s"); !s.Finished || s.Epoch != 2 || s.Position != (Position{2, 0}) {
		t.Fatalf("status %+v", s)
	}
	if err := e.m.RestorePosition("s", Position{0, 6}, e.now); err != nil {
		t.Fatal(err)
	}
	pos(Position{0, 6})
	if s := e.status("s"); s.Finished {
		t.Fatal("finished after a rewind")
	}
	if err := e.m.RestorePosition("s", Position{3, 0}, e.now); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("RestorePosition past the end: %v", err)
	}
	if _, err := e.m.Position("nope"); !errors.Is(err, ErrUnknownDataset) {
		t.Fatalf("Position of an unknown dataset: %v", err)
	}
}
