package shard

import (
	"fmt"
	"time"
)

// Position is how far a Sync dataset's job has trained: positions
// 0..Consumed-1 of epoch Epoch's order ([EpochOrder]) are done, in every
// epoch before Epoch all of them (less dropped tails, see [RankBatch]).
// Positions compare lexicographically. The position after the last of
// Epochs epochs is {Epochs, 0}.
type Position struct {
	Epoch    int   `json:"epoch"`
	Consumed int64 `json:"consumed"`
}

func (p Position) before(q Position) bool {
	return p.Epoch < q.Epoch || p.Epoch == q.Epoch && p.Consumed < q.Consumed
}

// TailPolicy is what [RankBatch] does with an epoch's last global batch
// when fewer samples than worldSize*BatchSize remain.
type TailPolicy int

const (
	// DropTail skips the final partial global batch: those samples are not
	// trained in that epoch (the next epoch's order trains them, in other
	// positions). Every sample is trained at most once an epoch.
	DropTail TailPolicy = iota
	// PadTail fills the final global batch by wrapping around to the start
	// of the same epoch's order: the first samples of the epoch are trained
	// twice in it. Every sample is trained at least once an epoch.
	PadTail
)

func (t TailPolicy) String() string {
	switch t {
	case DropTail:
		return "DropTail"
	case PadTail:
		return "PadTail"
	}
	return fmt.Sprintf("TailPolicy(%d)", int(t))
}

// RankBatch returns the samples rank trains at pos in a world of worldSize
// ranks, and the position after that step. Every rank calls it with the same
// arguments but its own rank, so no coordination is needed beyond agreeing
// on pos (which the master records with [Machine.Advance]).
//
// With N = ds.Size, B = ds.BatchSize, G = worldSize*B and pos = (e, c):
//
//  1. If c == N, (e, c) becomes (e+1, 0). Under DropTail, if N-c < G the
//     remaining positions c..N-1 cannot fill a global batch: they are not
//     trained in epoch e, and (e, c) becomes (e+1, 0).
//  2. If ds.Epochs > 0 and e >= ds.Epochs the dataset is exhausted: ok is
//     false and next is (e, c). Under DropTail ok is also false when N < G,
//     since no global batch can ever be formed.
//  3. The global batch is positions c..c+G-1 of epoch e's order; rank r
//     takes positions c+r*B .. c+r*B+B-1, in order. Positions p >= N (only
//     under PadTail) wrap to p mod N: the pad repeats the epoch's first
//     samples (the whole epoch, more than once, when G > N).
//  4. next is (e, c+G), or (e+1, 0) when c+G >= N, or, under DropTail, when
//     N-(c+G) < G: the rest of the epoch is then a dropped tail for this
//     world size.
//
// Because each step trains positions [c, c+G) and moves to c+G whatever G is,
// the positions an epoch trains are contiguous from 0 through any sequence of
// world sizes: each position of [0, t) exactly once, where t is where the
// epoch rolled over (N under PadTail, with [N, t) wrapping to the start;
// N minus a dropped tail shorter than the last G under DropTail). A job that
// restores a Position recorded after some step and carries on (with any
// world size) trains exactly the positions not trained yet.
//
// order is used when it is EpochOrder(ds, e) for the epoch of step 3
// (any Order for an unshuffled dataset); otherwise RankBatch computes that
// order itself, which is cheap (O(1), see [EpochOrder]): a zero Order will
// do. A call costs O(BatchSize) whatever the dataset's size.
//
// RankBatch panics on arguments no caller should produce: ds.Size or
// ds.BatchSize out of range, worldSize outside 1..MaxWorldSize, rank outside
// 0..worldSize-1, pos.Epoch < 0, pos.Consumed outside 0..N, or an unknown
// tail.
func RankBatch(ds Dataset, order Order, pos Position, worldSize, rank int, tail TailPolicy) (indices []int64, next Position, ok bool) {
	n, b := ds.Size, int64(ds.BatchSize)
	switch {
	case n < 1 || n > MaxSize || b < 1 || b > MaxBatchSize:
		panic(fmt.Sprintf("shard: RankBatch with Size %d, BatchSize %d", n, b))
	case worldSize < 1 || worldSize > MaxWorldSize || rank < 0 || rank >= worldSize:
		panic(fmt.Sprintf("shard: RankBatch with rank %d of world size %d", rank, worldSize))
	case pos.Epoch < 0 || pos.Consumed < 0 || pos.Consumed > n:
		panic(fmt.Sprintf("shard: RankBatch at position %+v of a %d-sample epoch", pos, n))
	case tail != DropTail && tail != PadTail:
		panic(fmt.Sprintf("shard: RankBatch with %v", tail))
	}
	g := int64(worldSize) * b
	e, c := pos.Epoch, pos.Consumed
	if c == n || tail == DropTail && n-c < g {
		e, c = e+1, 0
	}
	if ds.Epochs > 0 && e >= ds.Epochs || tail == DropTail && n < g {
		return nil, Position{e, c}, false
	}
	if !order.matches(ds, e) {
		order = EpochOrder(ds, e)
	}
	indices = make([]int64, b)
	p := c + int64(rank)*b
	for j := range indices {
		indices[j] = order.At(p % n)
		p++
	}
	next = Position{e, c + g}
	if next.Consumed >= n || tail == DropTail && n-next.Consumed < g {
		next = Position{e + 1, 0}
	}
	return indices, next, true
}

// normPosition validates p for d and returns it with Consumed == Size
// rolled into the next epoch.
func normPosition(d *dataset, p Position) (Position, error) {
	n := d.cfg.Size
	if p.Epoch < 0 || p.Epoch > MaxEpochs || p.Consumed < 0 || p.Consumed > n || p.Epoch == MaxEpochs && p.Consumed == n {
		return p, errorf(ErrInvalidRequest, "position %+v is outside dataset %q (epochs 0..%d, consumed 0..%d)", p, d.cfg.Name, MaxEpochs, n)
	}
	if p.Consumed == n {
		p = Position{p.Epoch + 1, 0}
	}
	if e := d.cfg.Epochs; e > 0 && (p.Epoch > e || p.Epoch == e && p.Consumed > 0) {
		return p, errorf(ErrInvalidRequest, "position %+v is past the end of dataset %q's %d epochs", p, d.cfg.Name, e)
	}
	return p, nil
}

// Position returns a Sync dataset's position.
func (m *Machine) Position(dataset string) (Position, error) {
	d, err := m.lookup(dataset, Sync)
	if err != nil {
		return Position{}, err
	}
	return d.pos, nil
}

// Advance records that the job of a Sync dataset has trained up to
// (epoch, consumed) (consumed == Size means the whole epoch). The position
// only moves forward: an earlier one is ErrStalePosition (a report that
// arrived late), the same one is a no-op. The dataset is finished at
// {Epochs, 0}.
func (m *Machine) Advance(dataset string, epoch int, consumed int64, now time.Time) error {
	m.expire(now)
	d, err := m.lookup(dataset, Sync)
	if err != nil {
		return err
	}
	p, err := normPosition(d, Position{epoch, consumed})
	if err != nil {
		return err
	}
	if p.before(d.pos) {
		return errorf(ErrStalePosition, "dataset %q is at %+v; %+v is behind it (use RestorePosition to rewind)", dataset, d.pos, p)
	}
	d.setPosition(p)
	return nil
}

// RestorePosition sets a Sync dataset's position to p, backwards or
// forwards: a checkpoint restore rewinds to the position it recorded.
func (m *Machine) RestorePosition(dataset string, p Position, now time.Time) error {
	m.expire(now)
	d, err := m.lookup(dataset, Sync)
	if err != nil {
		return err
	}
	if p, err = normPosition(d, p); err != nil {
		return err
	}
	d.setPosition(p)
	return nil
}

func (d *dataset) setPosition(p Position) {
	d.pos = p
	d.epoch = p.Epoch
	d.finished = d.cfg.Epochs > 0 && p.Epoch == d.cfg.Epochs
}
