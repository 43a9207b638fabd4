package shard

import (
	"slices"
	"sort"

	"github.com/roverml/rover/internal/deadline"
)

// task is a shard waiting in a dataset's queue.
type task struct {
	start, end int64
	retries    int // failures (and expiries) so far
}

// lease is a shard held by a worker.
type lease struct {
	task
	id uint64
	d  *dataset
	w  *worker // the holder, at its newest incarnation
	// Slot holds the lease's deadline and its place in the machine's
	// deadline queue; a lease of a dataset without LeaseTimeout is never
	// queued and its deadline is zero: it never expires.
	deadline.Slot
	// The worker's leases form a doubly linked list (worker.leases).
	wprev, wnext *lease
}

// dataset is everything the machine keeps about one registered dataset.
// In Leased mode the current epoch's queue is retry (requeued shards; the
// LAST element is the front of the queue) followed by the positions
// [cursor, limit()) not cut into shards yet, so an epoch, shuffled or not,
// costs O(1) memory however many shards it has (plus its requeued shards and
// the leases held); a shuffled shard's samples are computed when it is
// handed out.
type dataset struct {
	cfg      Dataset // normalized
	epoch    int
	finished bool

	retry        []task
	retrySamples int64
	cursor       int64
	doing        map[uint64]*lease
	doingSamples int64
	done         int64 // shards completed in this epoch
	doneSamples  int64
	dropN        int64 // shards dropped in this epoch
	dropSamples  int64
	dropped      []Shard // every shard dropped, in drop order
	nextID       uint64  // next lease ID (IDs start at 1)
	completed    idSet   // IDs of completed leases

	appended int64 // Streaming: samples appended so far
	sealed   bool

	pos Position // Sync
}

func newDataset(cfg Dataset) *dataset {
	return &dataset{cfg: cfg, doing: make(map[uint64]*lease), nextID: 1}
}

// limit is the end of the positions shards may be cut from.
func (d *dataset) limit() int64 {
	if d.cfg.Streaming {
		return d.appended
	}
	return d.cfg.Size
}

// tailOK reports whether a partial shard at the end of [cursor, limit) may
// be cut: always, except in a stream that may still grow.
func (d *dataset) tailOK() bool { return !d.cfg.Streaming || d.sealed }

// cutShards is the number of shards still to be cut from [cursor, limit).
func (d *dataset) cutShards() int64 {
	rest, ss := d.limit()-d.cursor, d.cfg.ShardSize
	n := rest / ss
	if rest%ss != 0 && d.tailOK() {
		n++
	}
	return n
}

// cutSamples is the number of samples in the cutShards.
func (d *dataset) cutSamples() int64 {
	rest := d.limit() - d.cursor
	if d.tailOK() {
		return rest
	}
	return rest - rest%d.cfg.ShardSize
}

// todo is the number of shards waiting in the queue.
func (d *dataset) todo() int64 { return int64(len(d.retry)) + d.cutShards() }

// pop takes the shard at the front of the queue.
func (d *dataset) pop() (task, bool) {
	if n := len(d.retry); n > 0 {
		t := d.retry[n-1]
		d.retry = d.retry[:n-1]
		d.retrySamples -= t.end - t.start
		return t, true
	}
	rest := d.limit() - d.cursor
	if rest <= 0 || rest < d.cfg.ShardSize && !d.tailOK() {
		return task{}, false
	}
	t := task{start: d.cursor, end: d.cursor + min(rest, d.cfg.ShardSize)}
	d.cursor = t.end
	return t, true
}

// frontLen is the number of samples of the shard pop would take; the queue
// must not be empty (todo() > 0).
func (d *dataset) frontLen() int64 {
	if n := len(d.retry); n > 0 {
		return d.retry[n-1].end - d.retry[n-1].start
	}
	return min(d.limit()-d.cursor, d.cfg.ShardSize)
}

// pushFront puts t at the front of the queue.
func (d *dataset) pushFront(t task) {
	d.retry = append(d.retry, t)
	d.retrySamples += t.end - t.start
}

// epochDone reports whether every shard of the epoch is completed or dropped.
func (d *dataset) epochDone() bool {
	return len(d.retry) == 0 && len(d.doing) == 0 && d.cursor == d.limit() && d.tailOK()
}

// settle finishes the epoch when it is done: the dataset is finished after
// its last epoch, else the next epoch starts (its shards are cut lazily).
func (d *dataset) settle() {
	if d.finished || d.cfg.Mode != Leased || !d.epochDone() {
		return
	}
	if d.cfg.Streaming || d.cfg.Epochs > 0 && d.epoch+1 >= d.cfg.Epochs {
		d.finished = true
		return
	}
	d.epoch++
	d.cursor, d.done, d.doneSamples, d.dropN, d.dropSamples = 0, 0, 0, 0, 0
}

// drop records that t failed too often.
func (d *dataset) drop(t task) {
	d.dropN++
	d.dropSamples += t.end - t.start
	d.dropped = append(d.dropped, Shard{Epoch: d.epoch, Start: t.start, End: t.end})
}

// shard returns the Shard of t in the current epoch, with its samples when
// the dataset is shuffled: O(t's samples), whatever the dataset's size.
func (d *dataset) shard(t task) Shard {
	s := Shard{Epoch: d.epoch, Start: t.start, End: t.end}
	if d.cfg.Shuffle {
		s.Samples = EpochOrder(d.cfg, d.epoch).AppendRange(make([]int64, 0, t.end-t.start), t.start, t.end)
	}
	return s
}

// idSet is a set of lease IDs as sorted, disjoint, non-adjacent half-open
// ranges. Completions arrive nearly in ID order, so the set of every
// completed lease stays a handful of ranges: one more for each lease that
// was requeued instead, and for each one still held.
type idSet struct{ r []idRange }

type idRange struct{ lo, hi uint64 }

// find returns the index of the first range with hi > id.
func (s *idSet) find(id uint64) int {
	return sort.Search(len(s.r), func(i int) bool { return s.r[i].hi > id })
}

func (s *idSet) has(id uint64) bool {
	i := s.find(id)
	return i < len(s.r) && s.r[i].lo <= id
}

// add inserts id, which is not in the set.
func (s *idSet) add(id uint64) {
	i := s.find(id)
	// Fast path: id extends the last range (the usual in-order completion).
	switch left, right := i > 0 && s.r[i-1].hi == id, i < len(s.r) && s.r[i].lo == id+1; {
	case left && right:
		s.r[i-1].hi = s.r[i].hi
		s.r = slices.Delete(s.r, i, i+1)
	case left:
		s.r[i-1].hi = id + 1
	case right:
		s.r[i].lo = id
	default:
		s.r = slices.Insert(s.r, i, idRange{id, id + 1})
	}
}
